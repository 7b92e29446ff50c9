"""Deprecated VirtualMachineInstancePresets, merged into a new VMI's domain before the defaults (§3.1)."""

from __future__ import annotations

import copy
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import VMI_PRESET_KIND, MutationDenied, as_dict, obj
from pykubevirt.api.json_lookup import get, parse_quantity
from pykubevirt.api.label_selectors import SelectorError, label_selector_from_dict

EXCLUSION_ANNOTATION = "virtualmachineinstancepresets.admission.kubevirt.io/exclude"
PRESET_ANNOTATION_PREFIX = "virtualmachinepreset.kubevirt.io/"
PRESET_DEPRECATION_WARNING = "kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be removed in v2."
# Domain sections a preset may bring, as paths under the domain.
_SECTIONS: tuple[tuple[str, ...], ...] = (("cpu",), ("firmware",), ("features",), ("devices", "watchdog"))


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an absent selector matches everything, an invalid one nothing."""
    if not isinstance(selector, dict):
        return True
    try:
        return label_selector_from_dict(selector).matches(labels)
    except SelectorError:
        return False


def _same_quantity(a: Any, b: Any) -> bool:
    qa, qb = parse_quantity(a), parse_quantity(b)
    return qa == qb if qa is not None and qb is not None else a == b


def merge_conflicts(preset_domain: dict[str, Any], domain: dict[str, Any]) -> list[str]:
    """The fields both set to different values; they keep the VMI's value."""
    conflicts: list[str] = []
    preset_requests = get(preset_domain, "resources", "requests") or {}
    requests = get(domain, "resources", "requests") or {}
    for key, value in preset_requests.items():
        if key in requests and not _same_quantity(value, requests[key]):
            conflicts.append(f"spec.resources.requests[{key}]: {value} != {requests[key]}")
    for path in _SECTIONS:
        mine, theirs = get(preset_domain, *path), get(domain, *path)
        if mine is not None and theirs is not None and mine != theirs:
            conflicts.append(f"spec.{'.'.join(path)}: {mine} != {theirs}")
    clock_preset, clock = get(preset_domain, "clock"), get(domain, "clock")
    if isinstance(clock_preset, dict) and isinstance(clock, dict):
        offset_keys = ("utc", "timezone")
        if {k: clock_preset.get(k) for k in offset_keys} != {k: clock.get(k) for k in offset_keys}:
            conflicts.append("spec.clock.clockoffset: preset and VMI differ")
        if clock_preset.get("timer") is not None and clock.get("timer") is not None:
            if clock_preset["timer"] != clock["timer"]:
                conflicts.append(f"spec.clock.timer: {clock_preset['timer']} != {clock['timer']}")
    if preset_domain.get("ioThreadsPolicy") is not None and domain.get("ioThreadsPolicy") is not None:
        if preset_domain["ioThreadsPolicy"] != domain["ioThreadsPolicy"]:
            conflicts.append(f"spec.ioThreadsPolicy: {preset_domain['ioThreadsPolicy']} != {domain['ioThreadsPolicy']}")
    return conflicts


def _fill(domain: dict[str, Any], preset_domain: dict[str, Any], path: tuple[str, ...]) -> bool:
    """Copy a section the VMI lacks; True when the VMI now holds the preset's value."""
    value = get(preset_domain, *path)
    if value is None:
        return False
    parent: dict[str, Any] | None = domain
    for key in path[:-1]:
        parent = obj(parent, key) if parent is not None else None
    if parent is None:
        return False
    if parent.get(path[-1]) is None:
        parent[path[-1]] = copy.deepcopy(value)
    return bool(parent[path[-1]] == value)


def merge_domain(preset_domain: dict[str, Any], domain: dict[str, Any]) -> bool:
    """Fill the VMI domain from the preset; True when any part of the preset now applies."""
    applied = False
    preset_requests = get(preset_domain, "resources", "requests")
    if isinstance(preset_requests, dict) and preset_requests:
        resources = obj(domain, "resources")
        if resources is not None:
            if resources.get("requests") is None:
                resources["requests"] = dict(preset_requests)
            applied |= resources["requests"] == preset_requests
    for path in _SECTIONS:
        applied |= _fill(domain, preset_domain, path)
    clock_preset = preset_domain.get("clock")
    if isinstance(clock_preset, dict):
        if domain.get("clock") is None:
            domain["clock"] = {k: v for k, v in clock_preset.items() if k != "timer"}
        applied |= domain["clock"] == clock_preset
        if clock_preset.get("timer") is not None:
            applied |= _fill(domain, preset_domain, ("clock", "timer"))
    applied |= _fill(domain, preset_domain, ("ioThreadsPolicy",))
    return applied


def apply_presets(vmi: dict[str, Any], ctx: AdmissionContext) -> None:
    """Merge every matching preset of the VMI's namespace; raises MutationDenied (422) when presets conflict."""
    metadata = as_dict(vmi.get("metadata"))
    annotations = as_dict(metadata.get("annotations"))
    if annotations.get(EXCLUSION_ANNOTATION) == "true":
        return
    labels = as_dict(metadata.get("labels"))
    presets = [
        p
        for p in ctx.lookup.list(VMI_PRESET_KIND, metadata.get("namespace"))
        if selector_matches(get(p, "spec", "selector"), labels)
    ]
    if not presets:
        return
    presets.sort(key=lambda p: str(get(p, "metadata", "name") or ""))
    errors: list[str] = []
    for i, preset in enumerate(presets):
        for visited in presets[:i]:
            for conflict in merge_conflicts(get(preset, "spec", "domain") or {}, get(visited, "spec", "domain") or {}):
                errors.append(
                    f"presets '{get(preset, 'metadata', 'name')}' and '{get(visited, 'metadata', 'name')}' "
                    f"conflict: {conflict}"
                )
    if errors:
        raise MutationDenied(f"VirtualMachinePresets cannot be applied due to conflicts: {', '.join(errors)}", code=422)
    spec = obj(vmi, "spec")
    domain = obj(spec, "domain") if spec is not None else None
    if domain is None:
        return
    for preset in presets:
        preset_domain = get(preset, "spec", "domain")
        if isinstance(preset_domain, dict) and merge_domain(preset_domain, domain):
            meta = obj(vmi, "metadata")
            notes = obj(meta, "annotations") if meta is not None else None
            if notes is not None:
                notes[PRESET_ANNOTATION_PREFIX + str(get(preset, "metadata", "name"))] = "kubevirt.io/v1"


def preset_warnings(vmi: dict[str, Any]) -> list[str]:
    """The deprecation warning KubeVirt adds to the response once a preset annotated the VMI."""
    annotations = get(vmi, "metadata", "annotations")
    if isinstance(annotations, dict) and any("virtualmachinepreset" in key for key in annotations):
        return [PRESET_DEPRECATION_WARNING]
    return []
