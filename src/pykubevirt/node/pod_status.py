"""The kubelet's pod status from its container states: phase (getPhase), kubelet-owned conditions, IPs. Pure.

Only the conditions the kubelet owns are computed; conditions written by others (the readiness gate virt-controller
sets, DisruptionTarget, …) are carried over unchanged, and Ready honours every readiness gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykubevirt.api.pod_qos import qos_class
from pykubevirt.node.registration import NODE_IP

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
TERMINAL_PHASES = (SUCCEEDED, FAILED)
READY_TO_START = "PodReadyToStartContainers"
INITIALIZED = "Initialized"
CONTAINERS_READY = "ContainersReady"
READY = "Ready"
SCHEDULED = "PodScheduled"
KUBELET_CONDITIONS = (READY_TO_START, INITIALIZED, READY, CONTAINERS_READY, SCHEDULED)


def restart_policy(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("restartPolicy") or "Always")


def _state_kind(status: Mapping[str, Any]) -> str:
    state = status.get("state") or {}
    for kind in ("running", "terminated", "waiting"):
        if state.get(kind) is not None:
            return kind
    return ""


def init_progress(init_statuses: Sequence[Mapping[str, Any]]) -> tuple[bool, bool]:
    """(all init containers completed, one of them failed)."""
    done = True
    failed = False
    for status in init_statuses:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None:
            done = False
            last = (status.get("lastState") or {}).get("terminated")
            if last is not None and int(last.get("exitCode") or 0) != 0:
                failed = True
        elif int(terminated.get("exitCode") or 0) != 0:
            done = False
            failed = True
    return done, failed


def pod_phase(
    pod: Mapping[str, Any],
    init_statuses: Sequence[Mapping[str, Any]],
    statuses: Sequence[Mapping[str, Any]],
    *,
    killed: bool = False,
) -> str:
    """kubelet's getPhase; a pod already Succeeded or Failed stays so; `killed`: deleted and all processes ended."""
    current = str((pod.get("status") or {}).get("phase") or "")
    if current in TERMINAL_PHASES:
        return current
    policy = restart_policy(pod)
    initialized, init_failed = init_progress(init_statuses)
    if init_failed and policy == "Never":
        return FAILED
    running = waiting = stopped = succeeded = unknown = 0
    for status in statuses:
        kind = _state_kind(status)
        if kind == "running":
            running += 1
        elif kind == "terminated":
            stopped += 1
            if int(status["state"]["terminated"].get("exitCode") or 0) == 0:
                succeeded += 1
        elif kind == "waiting":
            if (status.get("lastState") or {}).get("terminated") is not None:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1
    if killed:
        # A deleted pod whose processes all ended is terminal, whatever its restart policy (kubelet TerminatePod).
        return SUCCEEDED if statuses and succeeded == len(statuses) else FAILED
    if not initialized or waiting > 0:
        return PENDING
    if running > 0 and unknown == 0:
        return RUNNING
    if running == 0 and stopped > 0 and unknown == 0:
        if policy == "Always":
            return RUNNING
        if stopped == succeeded:
            return SUCCEEDED
        if policy == "Never":
            return FAILED
        return RUNNING
    return PENDING


def _condition(
    kind: str, status: bool, current: Mapping[str, Mapping[str, Any]], now: str, reason: str = "", message: str = ""
) -> dict[str, Any]:
    value = "True" if status else "False"
    old = current.get(kind) or {}
    since = old.get("lastTransitionTime") if old.get("status") == value else None
    condition: dict[str, Any] = {"type": kind, "status": value, "lastProbeTime": None}
    condition["lastTransitionTime"] = since or now
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _by_type(conditions: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in conditions}


def _names(names: Sequence[str]) -> str:
    return "[" + " ".join(names) + "]"


def _readiness_gates(pod: Mapping[str, Any], current: Mapping[str, Mapping[str, Any]]) -> str:
    """Why the readiness gates keep the pod from Ready ("" when they all hold)."""
    for gate in (pod.get("spec") or {}).get("readinessGates") or []:
        kind = str(gate.get("conditionType") or "")
        condition = current.get(kind)
        if condition is None:
            return f'corresponding condition of pod readiness gate "{kind}" does not exist.'
        if condition.get("status") != "True":
            return f'the status of pod readiness gate "{kind}" is not "True", but {condition.get("status")}'
    return ""


def pod_conditions(
    pod: Mapping[str, Any],
    init_statuses: Sequence[Mapping[str, Any]],
    statuses: Sequence[Mapping[str, Any]],
    phase: str,
    *,
    sandbox_ready: bool,
    now: str,
) -> list[dict[str, Any]]:
    """The kubelet's conditions followed by everyone else's, unchanged."""
    existing = list((pod.get("status") or {}).get("conditions") or [])
    current = _by_type(existing)
    conditions = [_condition(READY_TO_START, sandbox_ready, current, now)]
    incomplete = [
        str(s["name"])
        for s in init_statuses
        if int(((s.get("state") or {}).get("terminated") or {"exitCode": 1}).get("exitCode") or 0) != 0
    ]
    initialized = not incomplete or phase == SUCCEEDED
    if initialized:
        conditions.append(_condition(INITIALIZED, True, current, now))
    else:
        message = f"containers with incomplete status: {_names(incomplete)}"
        conditions.append(_condition(INITIALIZED, False, current, now, "ContainersNotInitialized", message))
    unready = [str(s["name"]) for s in statuses if not s.get("ready")]
    if phase in TERMINAL_PHASES:
        containers_ready = _condition(CONTAINERS_READY, False, current, now, "PodCompleted")
        ready = _condition(READY, False, current, now, "PodCompleted")
    elif unready:
        message = f"containers with unready status: {_names(unready)}"
        containers_ready = _condition(CONTAINERS_READY, False, current, now, "ContainersNotReady", message)
        ready = _condition(READY, False, current, now, "ContainersNotReady", message)
    else:
        containers_ready = _condition(CONTAINERS_READY, True, current, now)
        gate_problem = _readiness_gates(pod, current)
        if gate_problem:
            ready = _condition(READY, False, current, now, "ReadinessGatesNotReady", gate_problem)
        else:
            ready = _condition(READY, True, current, now)
    conditions += [ready, containers_ready]
    scheduled = current.get(SCHEDULED)
    conditions.append(dict(scheduled) if scheduled is not None else _condition(SCHEDULED, True, current, now))
    conditions += [dict(c) for c in existing if c.get("type") not in KUBELET_CONDITIONS]
    return conditions


def reported_qos_class(pod: Mapping[str, Any]) -> str:
    """The pod's QoS class as the API server stored it, else computed from its containers."""
    return str((pod.get("status") or {}).get("qosClass") or qos_class(pod.get("spec") or {}))


def desired_status(
    pod: Mapping[str, Any],
    init_statuses: list[dict[str, Any]],
    statuses: list[dict[str, Any]],
    *,
    gating_inits: Sequence[Mapping[str, Any]],
    killed: bool,
    sandbox_ready: bool,
    now: str,
    pod_ips: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every status field the node agent owns, for this moment; phase and conditions look at `gating_inits` only
    (the init statuses initialization waits for), initContainerStatuses reports them all."""
    current = pod.get("status") or {}
    phase = pod_phase(pod, gating_inits, statuses, killed=killed)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": pod_conditions(
            pod, gating_inits, statuses, phase, sandbox_ready=sandbox_ready and phase not in TERMINAL_PHASES, now=now
        ),
        "hostIP": NODE_IP,
        "hostIPs": [{"ip": NODE_IP}],
        "startTime": current.get("startTime") or now,
        "qosClass": reported_qos_class(pod),
        "containerStatuses": statuses,
    }
    # None: the pod shares the node's network (hostNetwork, or no pod network); empty: its sandbox has none yet.
    ips = [NODE_IP] if pod_ips is None else list(pod_ips)
    if ips:
        status["podIP"] = ips[0]
        status["podIPs"] = [{"ip": ip} for ip in ips]
    if (pod.get("spec") or {}).get("initContainers"):
        status["initContainerStatuses"] = init_statuses
    return status


def status_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` would change anything (condition order does not count)."""
    for key, value in desired.items():
        if key == "conditions":
            if _by_type(current.get("conditions") or []) != _by_type(value):
                return True
        elif current.get(key) != value:
            return True
    return False
