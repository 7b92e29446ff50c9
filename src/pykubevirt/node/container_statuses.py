"""The containerStatuses the node agent reports: each container's state from its record, waiting reason and exit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pykubevirt.client.api import Object
from pykubevirt.node import virtual_containers as virtual
from pykubevirt.node.pod_dirs import ContainerRecord

KILLED_EXIT_CODE = 137


def terminated_state(record: ContainerRecord, result: dict[str, Any] | None, now: str) -> dict[str, Any]:
    """The state of a process that ended, from what its exit recorder wrote (None when there is no exit file)."""
    if result is not None:
        code = int(result.get("exitCode") or 0)
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": record.started_at,
            "finishedAt": str(result.get("finishedAt") or now),
            "containerID": f"process://{record.pid}",
        }
        if result.get("signal"):
            terminated["signal"] = int(result["signal"])
        if result.get("message"):
            terminated["message"] = str(result["message"])
    else:
        # The exit recorder itself was killed (SIGKILL to the group): the command died with it.
        terminated = {
            "exitCode": KILLED_EXIT_CODE,
            "reason": "Error",
            "signal": 9,
            "startedAt": record.started_at,
            "finishedAt": now,
            "containerID": f"process://{record.pid}",
        }
    return terminated


def container_status(
    container: dict[str, Any],
    record: ContainerRecord | None,
    waiting: tuple[str, str] | None,
    *,
    running: bool,
    pod_uid: str,
    init: bool,
    default_reason: str,
    killed: bool,
) -> dict[str, Any]:
    """One entry of containerStatuses: the state its record and waiting reason give, as the kubelet reports it."""
    name = str(container["name"])
    status: dict[str, Any] = {
        "name": name,
        "image": str(container.get("image") or ""),
        "imageID": record.image_id if record is not None else "",
        "restartCount": record.attempt if record is not None else 0,
        "started": False,
        "ready": False,
        "lastState": {},
    }
    if record is not None:
        status["containerID"] = f"process://{record.pid}" if record.pid else f"virtual://{pod_uid}/{name}"
        if record.last_terminated is not None:
            status["lastState"] = {"terminated": record.last_terminated}
    sidecar = init and virtual.is_restartable(container)
    if record is not None and running:
        status["state"] = {"running": {"startedAt": record.started_at}}
        status["started"] = True
        status["ready"] = not init or sidecar
    elif record is not None and record.terminated is not None:
        if waiting is not None and waiting[0] == "CrashLoopBackOff" and not killed:
            status["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
            status["lastState"] = {"terminated": record.terminated}
        else:
            status["state"] = {"terminated": record.terminated}
            status["ready"] = init and not sidecar and int(record.terminated.get("exitCode") or 0) == 0
    elif killed:
        status["state"] = {
            "terminated": {
                "exitCode": KILLED_EXIT_CODE,
                "reason": "ContainerStatusUnknown",
                "message": "The container could not be located when the pod was terminated",
            }
        }
    else:
        reason, message = waiting if waiting is not None else (default_reason, "")
        status["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return status


def container_statuses(
    pod: Object,
    records: dict[str, ContainerRecord],
    waiting: dict[str, tuple[str, str]],
    running: Callable[[str], bool],
    pod_uid: str,
    *,
    main_default_reason: str,
    killed: bool,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's initContainerStatuses and containerStatuses."""
    spec = pod.get("spec") or {}

    def status(container: dict[str, Any], init: bool, default_reason: str) -> dict[str, Any]:
        name = str(container["name"])
        return container_status(
            container,
            records.get(name),
            waiting.get(name),
            running=running(name),
            pod_uid=pod_uid,
            init=init,
            default_reason=default_reason,
            killed=killed,
        )

    inits = [status(c, True, "PodInitializing") for c in spec.get("initContainers") or []]
    mains = [status(c, False, main_default_reason) for c in spec.get("containers") or []]
    return inits, mains


def sidecar_names(pod: Object) -> set[str]:
    return {str(c["name"]) for c in (pod.get("spec") or {}).get("initContainers") or [] if virtual.is_restartable(c)}


def gating_init_statuses(pod: Object, inits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The init statuses initialization waits for: as in the kubelet's getPhase, not a sidecar that has started."""
    sidecars = sidecar_names(pod)

    def started(status: dict[str, Any]) -> bool:
        ended = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        return bool(status.get("started") or ended)

    return [s for s in inits if s["name"] not in sidecars or not started(s)]
