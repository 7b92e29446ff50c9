"""Template fields an instance type owns: setting them as well is a conflict (pkg/instancetype/apply, conflict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import FieldPath
from pykubevirt.api.json_lookup import get


def _has_key(obj: Any, *path: str) -> bool:
    parent = get(obj, *path[:-1])
    return isinstance(parent, Mapping) and path[-1] in parent


def _nonzero(value: Any) -> bool:
    return bool(value) and value is not False


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _non_empty_list(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 0


def _cpu_conflicts(spec: Mapping[str, Any], it_cpu: Mapping[str, Any], path: FieldPath) -> list[str]:
    cpu = get(spec, "domain", "cpu")
    found: list[str] = []
    if _has_key(spec, "domain", "resources", "requests", "cpu"):
        found.append(str(path.child("domain", "resources", "requests", "cpu")))
    if _has_key(spec, "domain", "resources", "limits", "cpu"):
        found.append(str(path.child("domain", "resources", "limits", "cpu")))
    for topology in ("sockets", "cores", "threads"):
        if _nonzero(get(cpu, topology)):
            found.append(str(path.child("domain", "cpu", topology)))
    if get(cpu, "model") and it_cpu.get("model") is not None:
        found.append(str(path.child("domain", "cpu", "model")))
    # Upstream spells this path with the instancetype's capitalisation, not the VMI's `dedicatedCpuPlacement`.
    if get(cpu, "dedicatedCpuPlacement") is True and it_cpu.get("dedicatedCPUPlacement") is not None:
        found.append(str(path.child("domain", "cpu", "dedicatedCPUPlacement")))
    if get(cpu, "isolateEmulatorThread") is True and it_cpu.get("isolateEmulatorThread") is not None:
        found.append(str(path.child("domain", "cpu", "isolateEmulatorThread")))
    if get(cpu, "numa") is not None and it_cpu.get("numa") is not None:
        found.append(str(path.child("domain", "cpu", "numa")))
    if get(cpu, "realtime") is not None and it_cpu.get("realtime") is not None:
        found.append(str(path.child("domain", "cpu", "realtime")))
    return found


def _memory_conflict(spec: Mapping[str, Any], it_memory: Mapping[str, Any], path: FieldPath) -> list[str]:
    """Only the first memory conflict is reported, as upstream does."""
    memory = get(spec, "domain", "memory")
    if get(memory, "guest") is not None:
        return [str(path.child("domain", "memory", "guest"))]
    if get(memory, "hugepages") is not None and it_memory.get("hugepages") is not None:
        return [str(path.child("domain", "memory", "hugepages"))]
    if get(memory, "maxGuest") is not None and it_memory.get("maxGuest") is not None:
        return [str(path.child("domain", "memory", "maxGuest"))]
    if _has_key(spec, "domain", "resources", "requests", "memory"):
        return [str(path.child("domain", "resources", "requests", "memory"))]
    if _has_key(spec, "domain", "resources", "limits", "memory"):
        return [str(path.child("domain", "resources", "limits", "memory"))]
    return []


def instancetype_conflicts(
    template_spec: Mapping[str, Any],
    instancetype_spec: Mapping[str, Any],
    path: FieldPath,
    *,
    template_annotations: Mapping[str, Any] | None = None,
) -> list[str]:
    """Paths of template fields that clash with the instance type, in upstream's order (CPU before memory)."""
    it = instancetype_spec
    found: list[str] = []
    if it.get("nodeSelector") is not None and template_spec.get("nodeSelector") is not None:
        found.append(str(path.child("nodeSelector")))
    if it.get("schedulerName") and template_spec.get("schedulerName"):
        found.append(str(path.child("schedulerName")))
    it_cpu = _map(it.get("cpu"))
    found += _cpu_conflicts(template_spec, it_cpu, path)
    it_memory = _map(it.get("memory"))
    found += _memory_conflict(template_spec, it_memory, path)
    if get(it, "ioThreads", "supplementalPoolThreadCount") is not None and (
        get(template_spec, "domain", "ioThreads", "supplementalPoolThreadCount") is not None
    ):
        found.append(str(path.child("domain", "ioThreads", "supplementalPoolThreadCount")))
    if it.get("ioThreadsPolicy") is not None and get(template_spec, "domain", "ioThreadsPolicy") is not None:
        found.append(str(path.child("domain", "ioThreadsPolicy")))
    if it.get("launchSecurity") is not None and get(template_spec, "domain", "launchSecurity") is not None:
        found.append(str(path.child("domain", "launchSecurity")))
    if _non_empty_list(it.get("gpus")) and _non_empty_list(get(template_spec, "domain", "devices", "gpus")):
        found.append(str(path.child("domain", "devices", "gpus")))
    if _non_empty_list(it.get("hostDevices")) and _non_empty_list(
        get(template_spec, "domain", "devices", "hostDevices")
    ):
        found.append(str(path.child("domain", "devices", "hostDevices")))
    annotations = template_annotations or {}
    it_annotations = _map(it.get("annotations"))
    for key, value in it_annotations.items():
        # Upstream reports annotation clashes without the template path prefix.
        if key in annotations and annotations[key] != value:
            found.append(str(FieldPath("annotations").child(key)))
    return found
