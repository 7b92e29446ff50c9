"""CDI's DataVolume mutating webhook (`datavolume-mutate.cdi.kubevirt.io`): who may clone from another namespace.

After `pkg/apiserver/webhooks/datavolume-mutate.go` and the API's `AuthorizeUser` (authorize.go,
authorize_utils.go): a clone's source (its `pvc` or `snapshot`, or what its DataSource names) in another namespace
needs the creator's right there to `create datavolumes/source` (or `pods`, for a claim; `pods` and `pvcs` together,
for a snapshot). A DataVolume marked prePopulated or checkStaticVolume is let through whatever the answer. CDI's
clone token is not added: the embedded webhook cannot be bypassed, so the controller needs no proof it ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.causes import AdmissionRejected, RequestDenied, failure_status
from pykubevirt.admission.context import AccessCheck, AdmissionContext
from pykubevirt.api import constants as c
from pykubevirt.api.causes import FIELD_VALUE_INVALID, Cause
from pykubevirt.api.data_source_target import data_source_target
from pykubevirt.api.json_lookup import as_map, as_str

WEBHOOK = "datavolume-mutate.cdi.kubevirt.io"
PRE_POPULATED = "cdi.kubevirt.io/storage.prePopulated"
CHECK_STATIC_VOLUME = "cdi.kubevirt.io/storage.checkStaticVolume"
INSUFFICIENT = "User {user} has insufficient permissions in clone source namespace {namespace}"
CDI_GROUP = "cdi.kubevirt.io"


class CloneRejected(AdmissionRejected):
    """CDI's toRejectedAdmissionResponse: 422 without a reason, each cause's message after a space."""

    def status(self) -> dict[str, Any]:
        message = self.denied_prefix() + "".join(f" {cause.message}" for cause in self.causes)
        return failure_status(message, 422, details={"causes": [cause.to_dict() for cause in self.causes]})


def _clone_source(dv: Mapping[str, Any], ctx: AdmissionContext, namespace: str) -> tuple[str, str, str] | None:
    """newCloneSourceHandler: ("pvc" or "snapshot", namespace or "", name) of what the DataVolume clones, or None.

    Raises LookupError with kube's NotFound text when its DataSource does not exist."""
    spec = as_map(dv.get("spec"))
    source = as_map(spec.get("source"))
    ref = as_map(spec.get("sourceRef"))
    if not source and as_str(ref.get("kind")) == c.DATA_SOURCE_KIND:
        ds_namespace = as_str(ref.get("namespace")) or namespace
        found = ctx.lookup.get(c.DATA_SOURCE_KIND, ds_namespace, as_str(ref.get("name")))
        if found is None:
            raise LookupError(f'datasources.cdi.kubevirt.io "{as_str(ref.get("name"))}" not found')
        # A DataSource's claim without a namespace is in the DataSource's, as its Ready condition, KubeVirt's
        # GetResolvedCloneSource and the embedded CDI's copy read it; CDI's webhook alone would take the
        # DataVolume's, and so let anyone clone another namespace's claim through a DataSource there.
        source = data_source_target(found, ds_namespace) or {}
    for kind in ("pvc", "snapshot"):
        chosen = source.get(kind)
        if isinstance(chosen, Mapping):
            return kind, as_str(chosen.get("namespace")), as_str(chosen.get("name"))
    return None


def clone_access_checks(kind: str, namespace: str, name: str) -> tuple[list[AccessCheck], list[AccessCheck]]:
    """(any of these suffices, or all of these): the SubjectAccessReviews CDI sends for a claim or a snapshot."""
    explicit = AccessCheck("create", CDI_GROUP, "datavolumes", namespace, name, "source")
    if kind == "pvc":
        return [explicit, AccessCheck("create", "", "pods", namespace, name)], []
    implicit = [AccessCheck("create", "", resource, namespace, name) for resource in ("pods", "pvcs")]
    return [explicit], implicit


def authorize_datavolume(dv: Mapping[str, Any], ctx: AdmissionContext) -> None:
    """AuthorizeUser for the requesting user; raises the webhook's refusal."""
    meta = as_map(dv.get("metadata"))
    if meta.get("deletionTimestamp"):
        return
    annotations = as_map(meta.get("annotations"))
    no_token_okay = PRE_POPULATED in annotations or CHECK_STATIC_VOLUME in annotations
    target_namespace = as_str(meta.get("namespace")) or "default"
    try:
        source = _clone_source(dv, ctx, target_namespace)
    except LookupError as missing:
        if no_token_okay:
            return
        raise RequestDenied(str(missing.args[0]), WEBHOOK) from None
    if source is None:
        return
    kind, source_namespace, name = source
    source_namespace = source_namespace or target_namespace
    if ctx.lookup.get("Namespace", None, source_namespace) is None:
        if no_token_okay:
            return
        raise RequestDenied(f'namespaces "{source_namespace}" not found', WEBHOOK)
    if source_namespace == target_namespace or ctx.authorize is None:
        return
    any_of, all_of = clone_access_checks(kind, source_namespace, name)
    allowed = any(ctx.authorize(check) for check in any_of) or bool(all_of and all(map(ctx.authorize, all_of)))
    if allowed or no_token_okay:
        return
    message = INSUFFICIENT.format(user=ctx.username, namespace=source_namespace)
    raise CloneRejected([Cause(FIELD_VALUE_INVALID, message, "spec.source.PVC.namespace")], WEBHOOK)
