"""A VM's clone DataVolumes: their source resolved from a DataSource, and the VM's right to clone it.

KubeVirt's GetResolvedCloneSource (`pkg/storage/types/dv.go`) and handleCloneDataVolume / authorizeDataVolume
(`pkg/virt-controller/watch/vm/vm.go`): a template's `sourceRef` becomes the `source` it names (with its namespace), and
a source in another namespace needs the VM's service account to hold CDI's clone right there, asked by
SubjectAccessReview as CDI's AuthorizeSA asks it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AccessCheck
from pykubevirt.admission.defaults.datavolume_mutator import (
    CHECK_STATIC_VOLUME,
    INSUFFICIENT,
    PRE_POPULATED,
    clone_access_checks,
)
from pykubevirt.api import constants as c
from pykubevirt.api.data_source_target import data_source_target
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import DATA_SOURCES, NAMESPACES

SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
SOURCE_PVC_NOT_AVAILABLE = "SourcePVCNotAvailabe"  # sic, KubeVirt's reason
UNAUTHORIZED_DATA_VOLUME_CREATE = "UnauthorizedDataVolumeCreate"


class CloneNotAllowed(Exception):
    """Why the VM may not create a clone DataVolume; the message is CDI's reason."""


async def resolve_clone_source(client: KubeClient, namespace: str, spec: dict[str, Any]) -> None:
    """GetResolvedCloneSource on a DataVolume spec, in place: a DataSource's source replaces the sourceRef, and a
    claim or snapshot source gets its namespace. Raises NotFound for a missing DataSource."""
    source: Mapping[str, Any] = spec.get("source") or {}
    ref = spec.get("sourceRef") or {}
    if ref.get("kind") == c.DATA_SOURCE_KIND:
        ds_namespace = str(ref.get("namespace") or namespace)
        found = await client.get(DATA_SOURCES, str(ref.get("name") or ""), ds_namespace)
        source = data_source_target(found, ds_namespace) or {}
    for key in ("pvc", "snapshot"):
        target = source.get(key)
        if isinstance(target, Mapping):
            spec.pop("sourceRef", None)
            spec["source"] = {key: {**target, "namespace": target.get("namespace") or namespace}}
            return


def service_account_of(vm: Object) -> str:
    """The VM's service account: its template's, else its serviceAccount volume's, else `default`."""
    spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
    if spec.get("serviceAccountName"):
        return str(spec["serviceAccountName"])
    for volume in spec.get("volumes") or []:
        name = (volume.get("serviceAccount") or {}).get("serviceAccountName")
        if name:
            return str(name)
    return "default"


class CloneAuthorization:
    """May a VM's service account clone what a DataVolume names? Asked of the API server as CDI's AuthorizeSA asks."""

    def __init__(self, client: KubeClient, pvcs: Informer | None) -> None:
        self.client = client
        self.pvcs = pvcs

    def source_claim_missing(self, dv: Object) -> str | None:
        """The name of a clone's source claim when it does not exist yet (the VM gets an event), else None."""
        source = ((dv.get("spec") or {}).get("source") or {}).get("pvc")
        if not isinstance(source, dict) or self.pvcs is None:
            return None
        namespace = str(source.get("namespace") or dv["metadata"]["namespace"])
        if self.pvcs.get_by_name(namespace, str(source.get("name") or "")) is None:
            return str(source.get("name") or "")
        return None

    async def check(self, vm: Object, dv: Object) -> None:
        """Raises CloneNotAllowed with CDI's reason when the VM's service account may not clone the source."""
        source = (dv.get("spec") or {}).get("source") or {}
        kind = next((k for k in ("pvc", "snapshot") if isinstance(source.get(k), dict)), None)
        if kind is None:
            return
        annotations = (dv.get("metadata") or {}).get("annotations") or {}
        no_token_okay = PRE_POPULATED in annotations or CHECK_STATIC_VOLUME in annotations
        namespace = str(vm["metadata"]["namespace"])
        source_namespace = str(source[kind].get("namespace") or namespace)
        try:
            await self.client.get(NAMESPACES, source_namespace)
        except NotFound as missing:
            if no_token_okay:
                return
            raise CloneNotAllowed(missing.message) from None
        if source_namespace == namespace:
            return
        user = f"system:serviceaccount:{namespace}:{service_account_of(vm)}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
        any_of, all_of = clone_access_checks(kind, source_namespace, str(source[kind].get("name") or ""))
        allowed = False
        for check in any_of:
            if await self._allowed(user, groups, check):
                allowed = True
                break
        if not allowed and all_of:
            allowed = all([await self._allowed(user, groups, check) for check in all_of])
        if not allowed and not no_token_okay:
            raise CloneNotAllowed(INSUFFICIENT.format(user=user, namespace=source_namespace))

    async def _allowed(self, user: str, groups: list[str], check: AccessCheck) -> bool:
        attributes = {"namespace": check.namespace, "verb": check.verb, "group": check.group}
        attributes |= {"resource": check.resource, "subresource": check.subresource, "name": check.name}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
        }
        answer = await self.client.request("POST", SUBJECT_ACCESS_REVIEWS, body=review) or {}
        return bool((answer.get("status") or {}).get("allowed"))
