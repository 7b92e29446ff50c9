"""A pod's READY, STATUS and RESTARTS as kube-apiserver's pod printer computes them (printers.go printPod)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

# The reason the node lifecycle controller gives pods on an unreachable node (k8s.io/kubernetes/pkg/util/node).
NODE_UNREACHABLE_POD_REASON = "NodeLost"


@dataclass(frozen=True, slots=True)
class PodSummary:
    """What `kubectl get pods` shows besides name, age and the wide columns."""

    ready: int
    total: int
    reason: str
    restarts: int
    last_restart: datetime | None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _later(current: datetime | None, status: dict[str, Any]) -> datetime | None:
    """The later of `current` and the container's last termination time."""
    terminated = ((status.get("lastState") or {}).get("terminated")) or None
    if terminated is None:
        return current
    finished = _time(terminated.get("finishedAt"))
    if finished is None:
        return current
    return finished if current is None or finished > current else current


def _restartable(container: dict[str, Any] | None) -> bool:
    """A sidecar: an init container with restartPolicy Always."""
    return container is not None and container.get("restartPolicy") == "Always"


def _condition_true(status: dict[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or ())


def _init_reason(index: int, total: int, state: dict[str, Any]) -> str:
    """The STATUS an unfinished init container gives the pod."""
    terminated = state.get("terminated")
    waiting = state.get("waiting")
    if terminated is not None:
        if terminated.get("reason"):
            return "Init:" + str(terminated["reason"])
        if terminated.get("signal"):
            return f"Init:Signal:{terminated['signal']}"
        return f"Init:ExitCode:{terminated.get('exitCode', 0)}"
    if waiting is not None and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
        return "Init:" + str(waiting["reason"])
    return f"Init:{index}/{total}"


def pod_summary(pod: dict[str, Any]) -> PodSummary:
    """kubectl's pod STATUS logic: phase, then init containers, then containers, then deletion."""
    spec: dict[str, Any] = pod.get("spec") or {}
    status: dict[str, Any] = pod.get("status") or {}
    metadata: dict[str, Any] = pod.get("metadata") or {}
    containers = spec.get("containers") or []
    init_specs = spec.get("initContainers") or []
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    init_by_name = {c.get("name"): c for c in init_specs}
    total = len(containers) + sum(1 for c in init_specs if _restartable(c))
    ready = restarts = sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None

    initializing = False
    for index, container in enumerate(status.get("initContainerStatuses") or ()):
        restarts += int(container.get("restartCount") or 0)
        last_restart = _later(last_restart, container)
        sidecar = _restartable(init_by_name.get(container.get("name")))
        if sidecar:
            sidecar_restarts += int(container.get("restartCount") or 0)
            last_sidecar_restart = _later(last_sidecar_restart, container)
        state = container.get("state") or {}
        terminated = state.get("terminated")
        if terminated is not None and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and container.get("started"):
            ready += 1 if container.get("ready") else 0
            continue
        reason = _init_reason(index, len(init_specs), state)
        initializing = True
        break

    if not initializing or _condition_true(status, "Initialized"):
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        has_running = False
        # Walked backwards as printers.go does, so the first container's reason wins.
        for container in reversed(status.get("containerStatuses") or []):
            restarts += int(container.get("restartCount") or 0)
            last_restart = _later(last_restart, container)
            state = container.get("state") or {}
            waiting, terminated = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif terminated is not None and terminated.get("reason"):
                reason = str(terminated["reason"])
            elif terminated is not None:
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{terminated.get('exitCode', 0)}"
            elif container.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        # A pod whose finished containers say Completed is still Running while another container runs.
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(status, "Ready") else "NotReady"

    if metadata.get("deletionTimestamp"):
        if status.get("reason") == NODE_UNREACHABLE_POD_REASON:
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return PodSummary(ready, total, reason, restarts, last_restart)


def readiness_gates(pod: dict[str, Any]) -> str:
    """READINESS GATES: true gate conditions / gates, or <none>."""
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = (pod.get("status") or {}).get("conditions") or []
    passed = 0
    for gate in gates:
        for condition in conditions:
            if condition.get("type") == gate.get("conditionType"):
                passed += condition.get("status") == "True"
                break
    return f"{passed}/{len(gates)}"
