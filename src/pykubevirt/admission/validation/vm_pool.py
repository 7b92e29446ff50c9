"""The VirtualMachinePool admitter (KubeVirt's VMPoolAdmitter): VM template, selector, update and scale-in options."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.vm import validate_vm_spec
from pykubevirt.admission.validation.vmi import validate_discontinued_gates
from pykubevirt.api.causes import Cause, FieldPath, invalid, required
from pykubevirt.api.json_lookup import as_map
from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict

_STRATEGIES = ("unmanaged", "opportunistic", "proactive")


def validate_vm_pool(
    pool: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """ValidateVMPoolSpec on CREATE and UPDATE (`old`); a create also checks the template against discontinued gates."""
    field = FieldPath("spec")
    spec = as_map(pool.get("spec"))
    template = spec.get("virtualMachineTemplate")
    if not isinstance(template, Mapping):
        # KubeVirt names the field `template` here although the pool's is `virtualMachineTemplate`.
        return [required(str(field.child("template")), "missing virtual machine template.")]
    vm_spec = as_map(template.get("spec"))
    causes = validate_vm_spec(field.child("virtualMachineTemplate", "spec"), vm_spec, ctx)
    causes += _selector_causes(field, spec, as_map(as_map(template.get("metadata")).get("labels")))
    causes += _max_unavailable_causes(field, spec.get("maxUnavailable"))
    for name in ("updateStrategy", "scaleInStrategy"):
        strategy = spec.get(name)
        if isinstance(strategy, Mapping):
            causes += _exclusive(field.child(name), strategy)
    if old is not None and spec.get("selector") != as_map(old.get("spec")).get("selector"):
        causes.append(invalid(str(field.child("selector")), "selector is immutable after creation."))
    if old is None:
        causes += validate_discontinued_gates(as_map(as_map(vm_spec.get("template")).get("spec")), ctx)
    return causes


def _selector_causes(field: FieldPath, spec: Mapping[str, Any], labels: Mapping[str, Any]) -> list[Cause]:
    path = str(field.child("selector"))
    raw = spec.get("selector")
    try:
        selector = label_selector_from_dict(as_map(raw) if raw is not None else None)
    except SelectorError as exc:
        return [invalid(path, str(exc))]
    if not selector.matches(labels):
        return [invalid(path, "selector does not match labels.")]
    return []


def _max_unavailable_causes(field: FieldPath, value: Any) -> list[Cause]:
    path = str(field.child("maxUnavailable"))
    if isinstance(value, str):
        if not value.endswith("%"):
            return [invalid(path, "maxUnavailable percentage must end with %")]
        number = value[:-1]
        if not re.fullmatch(r"[+-]?\d+", number):
            return [invalid(path, f'maxUnavailable percentage value "{number}" is invalid: {_atoi_error(number)}')]
        if not 0 < int(number) <= 100:
            return [invalid(path, f"maxUnavailable percentage value {int(number)} must be between 1 and 100")]
    elif isinstance(value, int) and not isinstance(value, bool) and value <= 0:
        return [invalid(path, "maxUnavailable must be greater than 0")]
    return []


def _atoi_error(text: str) -> str:
    return f'strconv.Atoi: parsing "{text}": invalid syntax'


def _exclusive(path: FieldPath, strategy: Mapping[str, Any]) -> list[Cause]:
    configured = [name for name in _STRATEGIES if strategy.get(name) is not None]
    if len(configured) > 1:
        found = ", ".join(configured)
        return [invalid(str(path), f"only one strategy can be configured at a time: but found {found} strategies")]
    return []
