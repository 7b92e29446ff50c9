"""The VM with its instancetype and preference expanded into its template (pkg/instancetype/expand, rest/expand.go):
`virtualmachines/NAME/expand-spec` for a stored VM, `expand-vm-spec` for one in the request body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import MutationDenied
from pykubevirt.admission.defaults.device_defaults import set_default_network_interface, set_default_volume_disks
from pykubevirt.admission.defaults.vmi_spec import set_vmi_spec_defaults
from pykubevirt.api import errors, structural
from pykubevirt.api.causes import FieldPath
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.kinds import VIRTUAL_MACHINE
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import (
    CLUSTER_INSTANCETYPES,
    CLUSTER_PREFERENCES,
    CONTROLLER_REVISIONS,
    INSTANCETYPES,
    PREFERENCES,
    ResourceRef,
)
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.instancetype import instancetype_apply as itapply
from pykubevirt.instancetype.matcher_kind import is_namespaced, named_kind
from pykubevirt.instancetype.preference_apply import apply_preference
from pykubevirt.virtapi.options import UNMARSHAL_ERROR


class ExpandError(Exception):
    """Why a VM could not be expanded; the message is upstream's."""


# matcher → (its namespaced resource, its cluster-wide resource)
_FINDERS: dict[str, tuple[ResourceRef, ResourceRef]] = {
    "instancetype": (INSTANCETYPES, CLUSTER_INSTANCETYPES),
    "preference": (PREFERENCES, CLUSTER_PREFERENCES),
}


async def find_spec(client: KubeClient, vm: Mapping[str, Any], matcher_key: str) -> dict[str, Any] | None:
    """The spec a matcher names: its revision's when it has one, else the (cluster) instancetype's or preference's."""
    matcher = (vm.get("spec") or {}).get(matcher_key)
    if not isinstance(matcher, Mapping):
        return None
    namespace = str((vm.get("metadata") or {}).get("namespace") or "default")
    namespaced, cluster = _FINDERS[matcher_key]
    try:
        if revision := matcher.get("revisionName"):
            stored = await client.get(CONTROLLER_REVISIONS, str(revision), namespace)
            data = stored.get("data") or {}
            return dict((json.loads(data) if isinstance(data, str) else data).get("spec") or {})
        kind = named_kind(matcher_key, str(matcher.get("kind") or ""))
        name = str(matcher.get("name") or "")
        if kind is not None and is_namespaced(kind):
            return dict((await client.get(namespaced, name, namespace)).get("spec") or {})
        if kind is not None:
            return dict((await client.get(cluster, name)).get("spec") or {})
    except ApiError as exc:
        raise ExpandError(exc.message) from None
    matcher_name = "InstancetypeMatcher" if matcher_key == "instancetype" else "PreferenceMatcher"
    raise ExpandError(f"got unexpected kind in {matcher_name}: {matcher.get('kind')}")


def expand_vm(
    vm: Mapping[str, Any],
    instancetype: Mapping[str, Any] | None,
    preference: Mapping[str, Any] | None,
    config: ClusterConfig,
) -> dict[str, Any]:
    """The VM as the VMI would be made from it: default disks and interface, the instancetype and preference applied,
    the VMI spec's defaults, and no matchers left."""
    expanded = copy_json(dict(vm))
    spec = expanded.setdefault("spec", {})
    if spec.get("instancetype") is None and spec.get("preference") is None:
        return expanded
    template = spec.setdefault("template", {})
    template_spec = template.setdefault("spec", {})
    template_metadata = template.setdefault("metadata", {})
    template_spec.setdefault("domain", {}).setdefault("devices", {})
    ctx = AdmissionContext(config=config)
    set_default_volume_disks(template_spec)
    try:
        set_default_network_interface(template_spec, config)
    except MutationDenied as denied:
        raise ExpandError(denied.message) from None
    if instancetype is not None:
        causes = itapply.conflict_causes(template, instancetype, FieldPath("spec.template.spec"))
        if causes:
            # Conflicts.Error(): every conflicting path in one sentence.
            raise ExpandError(itapply.CONFLICT_MESSAGE.format(", ".join(cause.field for cause in causes)))
        itapply.apply_instancetype(template_spec, template_metadata, instancetype, preference)
    apply_preference(preference, template_spec, template_metadata)
    try:
        set_vmi_spec_defaults(template_spec, ctx)
    except MutationDenied as denied:
        raise ExpandError(denied.message) from None
    spec.pop("instancetype", None)
    spec.pop("preference", None)
    status = expanded.get("status")
    if isinstance(status, dict):
        status.pop("instancetypeRef", None)
        status.pop("preferenceRef", None)
    return expanded


def vm_from_body(body: bytes, namespace: str) -> dict[str, Any]:
    """ExpandSpecRequestHandler's checks of the posted VM; failures are its 400s."""
    if not body:
        raise errors.bad_request("empty request body")
    try:
        vm = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.bad_request(UNMARSHAL_ERROR % exc) from None
    if not isinstance(vm, dict):
        raise errors.bad_request(
            UNMARSHAL_ERROR % "json: cannot unmarshal into Go value of type map[string]interface {}"
        )
    problems = structural.validate(vm, VIRTUAL_MACHINE.schema)
    if problems:
        causes = [{"message": problem.message} for problem in problems]
        raise errors.APIError(400, "BadRequest", "Object is not a valid VirtualMachine", details={"causes": causes})
    if not namespace:
        raise errors.bad_request("The request namespace must not be empty")
    metadata = vm.setdefault("metadata", {})
    if metadata.get("namespace") not in (None, "", namespace):
        raise errors.bad_request(f"VM namespace must be empty or {namespace}")
    metadata["namespace"] = namespace
    return vm
