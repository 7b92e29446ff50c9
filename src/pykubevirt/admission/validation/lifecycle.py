"""Start strategy, eviction strategy and reboot policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import get

EVICTION_STRATEGIES = ("LiveMigrate", "LiveMigrateIfPossible", "None", "External")


def validate_start_strategy(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    strategy = spec.get("startStrategy")
    if strategy is None:
        return []
    path = field.child("startStrategy")
    if strategy != "Paused":
        return [invalid(str(path), f"{path} is set with an unrecognized option: {strategy}")]
    if spec.get("livenessProbe") is not None:
        # The missing space after the period is upstream's.
        return [
            invalid(
                str(path),
                f"either {path} or {field.child('livenessProbe')} should be provided."
                "Pausing VMI with LivenessProbe is not supported",
            )
        ]
    return []


def validate_eviction_strategy(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    strategy = spec.get("evictionStrategy")
    effective = strategy if strategy is not None else ctx.config.eviction_strategy
    if effective is None or effective in EVICTION_STRATEGIES:
        return []
    path = field.child("evictionStrategy")
    return [invalid(str(path), f"{path} is set with an unrecognized option: {strategy}")]


def validate_reboot_policy(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    if get(spec, "domain", "rebootPolicy") is None or ctx.config.gate_enabled("RebootPolicy"):
        return []
    return [
        invalid(
            str(field.child("domain", "rebootPolicy")),
            "RebootPolicy is specified but the RebootPolicy feature gate is not enabled",
        )
    ]
