"""How the VMI controller reads a virt-launcher Pod: ready for hand-over, down, going down, image errors. Pure."""

from __future__ import annotations

from typing import Any

from pykubevirt.api import constants as c

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"


def _container_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list((pod.get("status") or {}).get("containerStatuses") or [])


def pod_phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def pod_is_down(pod: dict[str, Any]) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def _compute_state(pod: dict[str, Any]) -> dict[str, Any]:
    for status in _container_statuses(pod):
        if status.get("name") == c.LAUNCHER_COMPUTE_CONTAINER:
            return dict(status.get("state") or {})
    return {}


def is_down_or_going_down(pod: dict[str, Any]) -> bool:
    """Pod finished, its compute container terminated, or the pod is being deleted."""
    return (
        pod_is_down(pod)
        or _compute_state(pod).get("terminated") is not None
        or bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    )


def is_ready_for_handover(pod: dict[str, Any]) -> bool:
    """Running, not deleting, compute container started and every other container ready."""
    if is_down_or_going_down(pod):
        return False
    for status in _container_statuses(pod):
        if status.get("name") in (c.LAUNCHER_COMPUTE_CONTAINER, "istio-proxy"):
            if (status.get("state") or {}).get("running") is None:
                return False
        elif not status.get("ready"):
            return False
    return pod_phase(pod) == "Running"


def image_error(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(message, reason) of the first container waiting on ErrImagePull or ImagePullBackOff."""
    statuses = [*((pod.get("status") or {}).get("initContainerStatuses") or []), *_container_statuses(pod)]
    for status in statuses:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") in (ERR_IMAGE_PULL, IMAGE_PULL_BACK_OFF):
            return str(waiting.get("message") or ""), str(waiting["reason"])
    return None


def current_pod(vmi: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest pod the VMI controls (on the VMI's node once it has one), as KubeVirt's CurrentVMIPod."""
    node = (vmi.get("status") or {}).get("nodeName")
    current: dict[str, Any] | None = None
    for pod in pods:
        if node and (pod.get("spec") or {}).get("nodeName") != node:
            continue
        created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
        if current is None or str(current["metadata"].get("creationTimestamp") or "") < created:
            current = pod
    return current
