"""The VirtualMachineInstanceReplicaSet admitter (KubeVirt's VMIRSAdmitter): its VMI template and its selector."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.vmi import validate_discontinued_gates, validate_vmi_spec
from pykubevirt.api.causes import Cause, FieldPath, invalid, required
from pykubevirt.api.json_lookup import as_map
from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict


def validate_vmirs(
    rs: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """ValidateVMIRSSpec on CREATE and UPDATE; a create also checks the template against discontinued gates."""
    causes = validate_vmirs_spec(FieldPath("spec"), as_map(rs.get("spec")), ctx)
    template = as_map(rs.get("spec")).get("template")
    if old is None and isinstance(template, Mapping):
        causes += validate_discontinued_gates(as_map(template.get("spec")), ctx)
    return causes


def validate_vmirs_spec(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return [required(str(field.child("template")), "missing virtual machine template.")]
    # Not defaulted first, as in KubeVirt: the VMIs the set creates are defaulted and admitted on their own.
    causes = validate_vmi_spec(as_map(template.get("spec")), field.child("template", "spec"), ctx)
    selector_field = str(field.child("selector"))
    try:
        selector = label_selector_from_dict(as_map(spec.get("selector")) if spec.get("selector") is not None else None)
    except SelectorError as exc:
        return [*causes, invalid(selector_field, str(exc))]
    if not selector.matches(as_map(as_map(template.get("metadata")).get("labels"))):
        causes.append(invalid(selector_field, "selector does not match labels."))
    return causes
