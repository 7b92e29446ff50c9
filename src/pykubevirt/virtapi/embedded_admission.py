"""KubeVirt's admission webhooks run in-process for its kinds: the admission plugin the embedded server is handed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pykubevirt.admission import chain
from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.context import AccessCheck, AdmissionContext
from pykubevirt.api import errors
from pykubevirt.api.constants import KUBEVIRT_KIND
from pykubevirt.api.kinds import OUR_GROUPS
from pykubevirt.apiserver.authorization.attributes import Attributes
from pykubevirt.apiserver.authorization.rbac import Authorizer
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.store import Store
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import ConfigFromKubeVirt
from pykubevirt.log import set_verbosity


class StoreLookup:
    """Admission's read-only view of other objects, straight from the store's current state."""

    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry

    def _resource(self, kind: str) -> Resource | None:
        candidates = [r for r in self.registry.all() if r.kind == kind]
        candidates.sort(key=lambda r: r.group not in OUR_GROUPS)
        return candidates[0] if candidates else None

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        resource = self._resource(kind)
        if resource is None:
            return None
        record = self.store.get(resource.collection, resource.key(namespace, name))
        return record.value if record is not None else None

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        resource = self._resource(kind)
        if resource is None:
            return []
        return [r.value for r in self.store.records(resource.collection, resource.namespace_prefix(namespace))]


class KubeVirtAdmission:
    """Runs the admission chain of pykubevirt.admission for kubevirt.io, instancetype and cdi kinds."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        defaults: ClusterConfig | None = None,
        authorizer: Authorizer | None = None,
    ) -> None:
        self.lookup = StoreLookup(store, registry)
        self._config = ConfigFromKubeVirt(defaults or ClusterConfig())
        self._last: ClusterConfig | None = None
        self.authorizer = authorizer

    def config(self) -> ClusterConfig:
        """The KubeVirt object's configuration over the command line's, as the store holds it now."""
        config = self._config(self.lookup.list(KUBEVIRT_KIND, None))
        if config is not self._last:
            # Embedded, virt-api is this process: its log level follows logVerbosity.virtAPI from the next request.
            self._last = config
            set_verbosity(config.verbosity("virtAPI"))
        return config

    def handles(self, resource: Resource) -> bool:
        return resource.group in OUR_GROUPS and chain.handles(resource.kind)

    def context(self, user: UserInfo | None = None) -> AdmissionContext:
        """What admission consults for one request: the configuration in effect, the store's objects, and what the
        requesting user may do (the SubjectAccessReviews a webhook would send)."""
        if user is None:
            return AdmissionContext(config=self.config(), lookup=self.lookup)
        return AdmissionContext(
            config=self.config(), lookup=self.lookup, username=user.username, authorize=self._access_of(user)
        )

    def _access_of(self, user: UserInfo) -> Callable[[AccessCheck], bool] | None:
        authorizer = self.authorizer
        if authorizer is None:
            return None

        def allowed(check: AccessCheck) -> bool:
            attributes = Attributes(
                user=user,
                verb=check.verb,
                resource_request=True,
                namespace=check.namespace,
                api_group=check.group,
                resource=check.resource,
                subresource=check.subresource,
                name=check.name,
            )
            return authorizer.authorize(attributes).allowed

        return allowed

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        try:
            # The API server's write owns `obj` and keeps only what this returns.
            return chain.mutate(obj, self.context(ctx.user), operation=operation, old=old, in_place=True)
        except AdmissionRejected as rejected:
            raise errors.APIError.from_status(rejected.status()) from rejected

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        try:
            return chain.validate(obj, self.context(ctx.user), operation=operation, old=old)
        except AdmissionRejected as rejected:
            raise errors.APIError.from_status(rejected.status()) from rejected
