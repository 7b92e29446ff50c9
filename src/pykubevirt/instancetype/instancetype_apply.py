"""What the VM webhook does with a referenced instance type and preference before validating the template."""

from __future__ import annotations

import copy
import struct
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import FIELD_VALUE_INVALID, Cause, FieldPath
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get, parse_quantity
from pykubevirt.api.object_lookup import ObjectLookup
from pykubevirt.api.quantity import Quantity
from pykubevirt.instancetype.conflicts import instancetype_conflicts
from pykubevirt.instancetype.matcher_kind import is_namespaced, named_kind

CONTROLLER_REVISION_KIND = "ControllerRevision"
CONFLICT_MESSAGE = "VM field(s) {} conflicts with selected instance type"
_SPREAD_CORES_THREADS = "CoresThreads"
_SPREAD_SOCKETS_CORES = "SocketsCores"
_SPREAD_SOCKETS_CORES_THREADS = "SocketsCoresThreads"


def _f32(value: float) -> float:
    """Round to the nearest float32, as Go's float32 arithmetic does."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _find(vm: Mapping[str, Any], lookup: ObjectLookup, matcher_key: str) -> Any:
    """The referenced spec, or None; upstream's webhook ignores lookup failures, so they are None too."""
    matcher = get(vm, "spec", matcher_key)
    if not isinstance(matcher, Mapping):
        return None
    namespace = as_str(get(vm, "metadata", "namespace")) or "default"
    revision = as_str(matcher.get("revisionName"))
    if revision:
        stored = lookup.get(CONTROLLER_REVISION_KIND, namespace, revision)
        return get(stored, "data", "spec") if stored is not None else None
    kind = named_kind(matcher_key, as_str(matcher.get("kind")))
    if kind is None:
        return None
    found = lookup.get(kind, namespace if is_namespaced(kind) else None, as_str(matcher.get("name")))
    return get(found, "spec") if found is not None else None


def find_instancetype_spec(vm: Mapping[str, Any], lookup: ObjectLookup) -> dict[str, Any] | None:
    spec = _find(vm, lookup, "instancetype")
    return dict(spec) if isinstance(spec, Mapping) else None


def find_preference_spec(vm: Mapping[str, Any], lookup: ObjectLookup) -> dict[str, Any] | None:
    spec = _find(vm, lookup, "preference")
    return dict(spec) if isinstance(spec, Mapping) else None


def preferred_topology(preference: Mapping[str, Any] | None) -> str:
    topology = as_str(get(preference, "cpu", "preferredCPUTopology"))
    return topology or "sockets"


def spread_options(preference: Mapping[str, Any] | None) -> tuple[int, str]:
    ratio = as_int(get(preference, "preferSpreadSocketToCoreRatio")) or 2
    across = _SPREAD_SOCKETS_CORES
    options = get(preference, "cpu", "spreadOptions")
    if options is not None:
        across = as_str(get(options, "across")) or across
        if get(options, "ratio") is not None:
            ratio = as_int(get(options, "ratio"))
    return ratio, across


def check_spread_topology(instancetype: Mapping[str, Any] | None, preference: Mapping[str, Any] | None) -> list[Cause]:
    """CheckSpreadCPUTopology: the instance type's vCPUs must divide the preference's spread."""
    if instancetype is None or preferred_topology(preference) not in ("spread", "preferSpread"):
        return []
    guest = as_int(get(instancetype, "cpu", "guest"))
    ratio, across = spread_options(preference)
    if ratio == 0:
        return []
    if across == _SPREAD_SOCKETS_CORES and guest % ratio:
        message = (
            f"{guest} vCPUs provided by the instance type are not divisible by the "
            "Spec.PreferSpreadSocketToCoreRatio or Spec.CPU.PreferSpreadOptions.Ratio of "
            f"{ratio} provided by the preference"
        )
    elif across == _SPREAD_CORES_THREADS and guest % ratio:
        message = (
            f"{guest} vCPUs provided by the instance type are not divisible by the number of threads per core {ratio}"
        )
    elif across == _SPREAD_SOCKETS_CORES_THREADS and (guest % 2 or (guest // 2) % ratio):
        message = (
            f"{guest} vCPUs provided by the instance type are not divisible by the number of threads per core 2 "
            f"and Spec.PreferSpreadSocketToCoreRatio or Spec.CPU.PreferSpreadOptions.Ratio of {ratio}"
        )
    else:
        return []
    return [Cause(FIELD_VALUE_INVALID, message, "instancetype.spec.cpu.guest")]


def conflict_causes(template: Mapping[str, Any], instancetype: Mapping[str, Any], path: FieldPath) -> list[Cause]:
    spec = as_map(template.get("spec"))
    annotations = as_map(get(template, "metadata", "annotations"))
    return [
        Cause(FIELD_VALUE_INVALID, CONFLICT_MESSAGE.format(p), p)
        for p in instancetype_conflicts(spec, instancetype, path, template_annotations=annotations)
    ]


def apply_instancetype(spec: dict[str, Any], metadata: dict[str, Any], it: Mapping[str, Any], pref: Any) -> None:
    """Copy the instance type's fields into a template known to have no conflicts with it."""
    domain = spec.setdefault("domain", {})
    if it.get("nodeSelector") is not None:
        spec["nodeSelector"] = dict(it["nodeSelector"])
    if it.get("schedulerName"):
        spec["schedulerName"] = it["schedulerName"]
    cpu = domain.get("cpu") if isinstance(domain.get("cpu"), dict) else {}
    domain["cpu"] = cpu
    it_cpu = as_map(it.get("cpu"))
    for src, dst in (
        ("model", "model"),
        ("dedicatedCPUPlacement", "dedicatedCpuPlacement"),
        ("isolateEmulatorThread", "isolateEmulatorThread"),
        ("numa", "numa"),
        ("realtime", "realtime"),
        ("maxSockets", "maxSockets"),
    ):
        if it_cpu.get(src) is not None:
            cpu[dst] = copy.deepcopy(it_cpu[src])
    cpu.update(_guest_topology(as_int(it_cpu.get("guest")), pref))

    memory = domain.get("memory") if isinstance(domain.get("memory"), dict) else {}
    domain["memory"] = memory
    it_memory = as_map(it.get("memory"))
    guest = parse_quantity(it_memory.get("guest"))
    if it_memory.get("guest") is not None:
        memory["guest"] = it_memory["guest"]
    overcommit = as_int(it_memory.get("overcommitPercent"))
    if overcommit > 0 and guest is not None:
        # Upstream computes this in float32 and truncates, so the request can be a few bytes off the exact value.
        factor = _f32(1 - _f32(_f32(overcommit) / 100))
        requested = int(_f32(_f32(float(guest.value)) * factor))
        resources = domain.setdefault("resources", {})
        resources.setdefault("requests", {})["memory"] = str(Quantity(requested, guest.format))
    for key in ("hugepages", "maxGuest"):
        if it_memory.get(key) is not None:
            memory[key] = copy.deepcopy(it_memory[key])
    if get(it, "ioThreads", "supplementalPoolThreadCount") is not None:
        domain.setdefault("ioThreads", {})["supplementalPoolThreadCount"] = it["ioThreads"][
            "supplementalPoolThreadCount"
        ]
    for key in ("ioThreadsPolicy", "launchSecurity"):
        if it.get(key) is not None:
            domain[key] = copy.deepcopy(it[key])
    for key in ("gpus", "hostDevices"):
        if as_list(it.get(key)):
            domain.setdefault("devices", {})[key] = copy.deepcopy(it[key])
    annotations = metadata.setdefault("annotations", {})
    for key, value in as_map(it.get("annotations")).items():
        annotations.setdefault(key, value)


def _guest_topology(vcpus: int, pref: Any) -> dict[str, int]:
    topology = {"sockets": 1, "cores": 1, "threads": 1}
    if vcpus == 1:
        return topology
    preferred = preferred_topology(pref)
    if preferred in ("cores", "preferCores"):
        topology["cores"] = vcpus
    elif preferred in ("sockets", "preferSockets", "any", "preferAny"):
        topology["sockets"] = vcpus
    elif preferred in ("threads", "preferThreads"):
        topology["threads"] = vcpus
    elif preferred in ("spread", "preferSpread"):
        ratio, across = spread_options(pref)
        ratio = ratio or 1
        if across == _SPREAD_SOCKETS_CORES:
            topology.update(cores=ratio, sockets=vcpus // ratio)
        elif across == _SPREAD_CORES_THREADS:
            topology.update(threads=ratio, cores=vcpus // ratio)
        elif across == _SPREAD_SOCKETS_CORES_THREADS:
            topology.update(threads=2, cores=ratio, sockets=vcpus // 2 // ratio)
    return topology


def check_requirements(
    instancetype: Mapping[str, Any] | None, preference: Mapping[str, Any] | None, spec: Mapping[str, Any]
) -> list[Cause]:
    """requirements.Check on the defaulted template: `failure checking preference requirements: ...`."""
    requirements = get(preference, "requirements")
    if requirements is None:
        return []
    failure = None
    if get(requirements, "cpu") is not None:
        failure = _check_cpu(instancetype, preference, spec, as_int(get(requirements, "cpu", "guest")))
    if failure is None and get(requirements, "memory") is not None:
        failure = _check_memory(instancetype, spec, parse_quantity(get(requirements, "memory", "guest")))
    if failure is None and get(requirements, "architecture") is not None:
        wanted, actual = as_str(get(requirements, "architecture")), as_str(spec.get("architecture"))
        if wanted != actual:
            failure = (
                ["spec.template.spec.architecture"],
                f"preference requires architecture {wanted} but {actual} is being requested",
            )
    if failure is None:
        return []
    paths, error = failure
    return [Cause("FieldValueNotFound", f"failure checking preference requirements: {error}", ", ".join(paths))]


def _check_cpu(
    instancetype: Mapping[str, Any] | None, preference: Mapping[str, Any] | None, spec: Mapping[str, Any], needed: int
) -> tuple[list[str], str] | None:
    if instancetype is not None:
        provided = as_int(get(instancetype, "cpu", "guest"))
        if provided < needed:
            return (
                ["spec.instancetype"],
                f"insufficient CPU resources of {provided} vCPU provided by instance type, "
                f"preference requires {needed} vCPU",
            )
        return None
    cpu = get(spec, "domain", "cpu")
    base = "spec.template.spec.domain.cpu"
    if cpu is None:
        return [base], f"no CPU resources provided by VirtualMachine, preference requires {needed} vCPU"
    sockets, cores, threads = (as_int(get(cpu, k)) for k in ("sockets", "cores", "threads"))
    topology = preferred_topology(preference)
    checks = {
        "threads": (threads, ["threads"], "threads"),
        "preferThreads": (threads, ["threads"], "threads"),
        "cores": (cores, ["cores"], "cores"),
        "preferCores": (cores, ["cores"], "cores"),
        "sockets": (sockets, ["sockets"], "sockets"),
        "preferSockets": (sockets, ["sockets"], "sockets"),
        "any": (cores * sockets * threads, ["cores", "sockets", "threads"], "cores, sockets and threads"),
        "preferAny": (cores * sockets * threads, ["cores", "sockets", "threads"], "cores, sockets and threads"),
    }
    if topology in ("spread", "preferSpread"):
        _, across = spread_options(preference)
        spread = {
            _SPREAD_SOCKETS_CORES: (sockets * cores, ["sockets", "cores"]),
            _SPREAD_CORES_THREADS: (cores * threads, ["cores", "threads"]),
            _SPREAD_SOCKETS_CORES_THREADS: (sockets * cores * threads, ["sockets", "cores", "threads"]),
        }
        count, fields = spread.get(across, (0, []))
        checks[topology] = (count, fields, across)
    if topology not in checks:
        return None
    count, fields, described = checks[topology]
    if count < needed:
        return (
            [f"{base}.{f}" for f in fields],
            f"insufficient CPU resources of {count} vCPU provided by VirtualMachine, preference requires {needed} vCPU "
            f"provided as {described}",
        )
    return None


def _check_memory(
    instancetype: Mapping[str, Any] | None, spec: Mapping[str, Any], needed: Quantity | None
) -> tuple[list[str], str] | None:
    if needed is None:
        return None
    path, kind = "spec.template.spec.domain.memory", "VirtualMachine"
    provided = Quantity.parse("0Mi")
    if instancetype is not None:
        path, kind = "spec.instancetype", "instance type"
        provided = parse_quantity(get(instancetype, "memory", "guest")) or provided
    guest = parse_quantity(get(spec, "domain", "memory", "guest"))
    if guest is not None:
        provided = guest
    if provided < needed:
        return [path], f"insufficient Memory resources of {provided} provided by {kind}, preference requires {needed}"
    return None
