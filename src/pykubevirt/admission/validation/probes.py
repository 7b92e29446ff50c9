"""Readiness and liveness probes: exactly one handler, and network probes only with the pod network."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import Cause, FieldPath, invalid, required

_HANDLERS = ("httpGet", "tcpSocket", "exec", "guestAgentPing")


def validate_probe(field: FieldPath, probe: Any) -> list[Cause]:
    """`field` is the probe's path (`spec.readinessProbe`)."""
    if not isinstance(probe, Mapping):
        return []
    count = sum(probe.get(key) is not None for key in _HANDLERS)
    if count > 1:
        return [invalid(str(field), f"{field} must have exactly one probe type set")]
    if count < 1:
        return [
            required(
                str(field),
                f"either {field.child('tcpSocket')}, {field.child('exec')} or {field.child('httpGet')} "
                f"must be set if a {field} is specified",
            )
        ]
    return []


def validate_probes_need_pod_network(field: FieldPath, probe: Any) -> list[Cause]:
    """HTTP and TCP probes reach the guest through the pod network; call only when there is none."""
    if not isinstance(probe, Mapping):
        return []
    causes: list[Cause] = []
    for key in ("httpGet", "tcpSocket"):
        if probe.get(key) is not None:
            path = field.child(key)
            causes.append(invalid(str(path), f"{path} is only allowed if the Pod Network is attached"))
    return causes
