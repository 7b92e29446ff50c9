"""KubeVirt's VirtualMachineCloneAdmitter (pkg/virt-api/webhooks/validating-webhook/admitters/vmclone-admitter.go).

KubeVirt's admitter looks nothing up any more (ee83b4fcbe and 44cc21bcd1 removed its source checks), so a clone of a
missing VM or snapshot is admitted and left to the clone controller.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import REQUEST_ERROR, parse_mac
from pykubevirt.admission.validation.snapshot import SNAPSHOT_GATE
from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.constants import VM_KIND, VM_SNAPSHOT_KIND
from pykubevirt.api.json_lookup import as_list, as_map, as_str

CLONE_WEBHOOK = "vm-clone-validator.kubevirt.io"
GATE_DISABLED = "snapshot feature gate is not enabled"
SOURCE_KINDS = (VM_KIND, VM_SNAPSHOT_KIND)
TARGET_KINDS = (VM_KIND,)
TARGET_IS_SOURCE = "Target name cannot be equal to source name when both are VirtualMachines"
_FILTER_ERROR = "{field} filter {filter} is invalid: cannot contain a {what} character ({char}); FilterRules: {rule}"
_SPEC = FieldPath("spec")


def validate_vm_clone(clone: Mapping[str, Any], ctx: AdmissionContext, *, creating: bool = True) -> list[Cause]:
    """The causes KubeVirt's admitter finds, in its order; a create needs the Snapshot gate."""
    if creating and not ctx.config.gate_enabled(SNAPSHOT_GATE):
        return [Cause(REQUEST_ERROR, GATE_DISABLED, "")]
    spec = as_map(clone.get("spec"))
    template = as_map(spec.get("template"))
    # KubeVirt names these fields after the metadata they filter, not after the spec's fields.
    causes = _filter_causes(spec.get("annotationFilters"), "spec.annotations")
    causes += _filter_causes(spec.get("labelFilters"), "spec.labels")
    causes += _filter_causes(template.get("annotationFilters"), "spec.template.annotations")
    causes += _filter_causes(template.get("labelFilters"), "spec.template.labels")
    source = spec.get("source")
    target = spec.get("target")
    causes += _kind_causes(source, target)
    causes += _source_causes(source)
    if (
        isinstance(source, Mapping)
        and isinstance(target, Mapping)
        and source.get("kind") == VM_KIND
        and target.get("kind") == VM_KIND
        and as_str(target.get("name")) == as_str(source.get("name"))
    ):
        causes.append(invalid(str(_SPEC.child("target", "name")), TARGET_IS_SOURCE))
    causes += _mac_causes(spec.get("newMacAddresses"))
    causes += _patch_causes(spec.get("patches"))
    return causes


def _filter_causes(filters: Any, field: str) -> list[Cause]:
    """validateFilters: "!" only first, "*" only last; a lone "!" filters nothing."""
    causes: list[Cause] = []
    for item in as_list(filters):
        text = as_str(item)
        if len(text) <= 1:
            # An empty filter makes KubeVirt's webhook panic (filter[1:]), failing the call; it filters nothing here.
            if text == "!":
                causes.append(invalid(field, "a negation character is not a valid filter"))
            continue
        if "!" in text[1:]:
            rule = "NegationChar can be only used at the beginning of the filter"
            message = _FILTER_ERROR.format(field=field, filter=text, what="negation", char="!", rule=rule)
            causes.append(invalid(field, message))
        if "*" in text[:-1]:
            rule = "WildcardChar can be only at the end of the filter"
            message = _FILTER_ERROR.format(field=field, filter=text, what="wildcard", char="*", rule=rule)
            causes.append(invalid(field, message))
    return causes


def _kind_causes(source: Any, target: Any) -> list[Cause]:
    """validateSourceAndTargetKind, with KubeVirt's capitalised field names."""
    causes: list[Cause] = []
    if as_str(as_map(source).get("kind")) not in SOURCE_KINDS:
        causes.append(invalid(str(_SPEC.child("Source", "Kind")), "Source kind is not supported"))
    if isinstance(target, Mapping) and as_str(target.get("kind")) not in TARGET_KINDS:
        causes.append(invalid(str(_SPEC.child("Target", "Kind")), "Target kind is not supported"))
    return causes


def _source_causes(source: Any) -> list[Cause]:
    """validateSource: the reference must name its group, kind and name."""
    field = _SPEC.child("Source")
    if not isinstance(source, Mapping):
        return [invalid(str(field), "Source cannot be nil")]
    causes: list[Cause] = []
    if not as_str(source.get("apiGroup")):
        causes.append(invalid(str(field.child("APIGroup")), "Source's APIGroup cannot be empty"))
    if not as_str(source.get("kind")):
        causes.append(invalid(str(field), "Source's Kind cannot be empty"))
    if not as_str(source.get("name")):
        causes.append(invalid(str(field.child("Name")), "Source's name cannot be empty"))
    return causes


def _mac_causes(addresses: Any) -> list[Cause]:
    """validateNewMacAddresses: link.ValidateMacAddress, whose "too long" is reported as malformed here too."""
    causes: list[Cause] = []
    for name, value in as_map(addresses).items():
        mac = as_str(value)
        if not mac:
            continue
        octets = parse_mac(mac)
        if octets is None or octets > 6:
            field = str(_SPEC.child("newMacAddresses", str(name)))
            causes.append(invalid(field, f"interface {name} has malformed MAC address ({mac})."))
    return causes


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def is_valid_json(text: str) -> bool:
    """encoding/json's Valid: Python's parser without NaN and Infinity, which Go refuses."""
    try:
        json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return False
    return True


def _patch_causes(patches: Any) -> list[Cause]:
    """validatePatches: each patch must be JSON; what it patches is the controller's concern."""
    field = _SPEC.child("patches")
    return [
        invalid(str(field.index(i)), f"patch is not valid JSON ({as_str(patch)})")
        for i, patch in enumerate(as_list(patches))
        if not is_valid_json(as_str(patch))
    ]
