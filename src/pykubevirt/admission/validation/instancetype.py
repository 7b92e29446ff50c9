"""Instance type and preference objects (namespaced and cluster-wide share these rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import as_int, as_map, as_str, get
from pykubevirt.instancetype.instancetype_apply import spread_options

PREFERRED_CPU_TOPOLOGIES = (
    "preferSockets",
    "preferCores",
    "preferThreads",
    "preferSpread",
    "preferAny",
    "sockets",
    "cores",
    "threads",
    "spread",
    "any",
)
SPREAD_ACROSS = ("CoresThreads", "SocketsCores", "SocketsCoresThreads")


def validate_instancetype(obj: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """ValidateInstanceTypeSpec: overcommitPercent in 0..100 and never together with hugepages."""
    spec = as_map(obj.get("spec"))
    field = FieldPath("spec")
    percent_path = field.child("memory", "overcommitPercent")
    percent = as_int(get(spec, "memory", "overcommitPercent"))
    causes: list[Cause] = []
    if percent < 0 or percent > 100:
        causes.append(invalid(str(percent_path), f"{percent_path} '{percent}': must be in range between 0 and 100."))
    if percent != 0 and get(spec, "memory", "hugepages") is not None:
        causes.append(
            invalid(
                str(percent_path),
                f"{percent_path} and {field.child('memory', 'hugepages')} should not be requested together.",
            )
        )
    return causes


def validate_preference(obj: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """ValidatePreferenceSpec: a known preferredCPUTopology and a supported spread."""
    spec = as_map(obj.get("spec"))
    field = FieldPath("spec")
    topology = get(spec, "cpu", "preferredCPUTopology")
    if topology is not None and topology not in PREFERRED_CPU_TOPOLOGIES:
        return [
            invalid(str(field.child("cpu", "preferredCPUTopology")), f"unknown preferredCPUTopology {as_str(topology)}")
        ]
    if topology not in ("spread", "preferSpread"):
        return []
    ratio, across = spread_options(spec)
    if across not in SPREAD_ACROSS:
        return [invalid(str(field.child("cpu", "spreadOptions", "across")), f"across {across} is not supported")]
    if across == "CoresThreads" and ratio != 2:
        return [
            invalid(
                str(field.child("cpu", "spreadOptions", "ratio")),
                "only a ratio of 2 (1 core 2 threads) is allowed when spreading vCPUs over cores and threads",
            )
        ]
    return []
