"""What admission knows besides the object: the cluster configuration, the caller, and read-only lookups."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pykubevirt.api.object_lookup import NoLookup, ObjectLookup
from pykubevirt.config.cluster_config import ClusterConfig

# Service accounts whose writes to VMIs are KubeVirt's own (controller, handler, api).
KUBEVIRT_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:kubevirt:"


@dataclass(frozen=True, slots=True)
class AccessCheck:
    """A SubjectAccessReview's resource attributes: may the requesting user do this?"""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str = ""
    subresource: str = ""


@dataclass(frozen=True, slots=True)
class AdmissionContext:
    """Everything an admission function may consult; it never performs I/O itself."""

    config: ClusterConfig = field(default_factory=ClusterConfig)
    lookup: ObjectLookup = field(default_factory=NoLookup)
    username: str = "kubernetes-admin"
    now: Callable[[], str] | None = None
    random_uuid: Callable[[], str] | None = None
    # The requesting user's authorizer, as a webhook asks with SubjectAccessReviews; None where there is none to ask
    # (offline validation), and then nothing is refused for want of a right.
    authorize: Callable[[AccessCheck], bool] | None = None

    def is_kubevirt_service_account(self) -> bool:
        return self.username.startswith(KUBEVIRT_SERVICE_ACCOUNT_PREFIX)
