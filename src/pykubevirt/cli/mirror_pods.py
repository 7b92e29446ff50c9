"""Mirror pods: each supervised component shows as a pod (`kubectl get pods -n kubevirt`, `kubectl logs`), as the
kubelet shows its static pods. The node agents do not run them; they serve their logs from the component's log file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from pykubevirt import __version__
from pykubevirt.api import pod_layout
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.cli.cluster_layout import ClusterLayout, Component
from pykubevirt.cli.component_client import admin_client
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict
from pykubevirt.client.resources import PODS

log = logging.getLogger("pykubevirt.supervisor.mirror")

SYNC_SECONDS = 2.0


States = Callable[[], dict[str, dict[str, Any]]]


def mirror_pod(component: Component, node: str) -> Object:
    """The pod object a component appears as (spec only; its status comes from `mirror_status`)."""
    assert component.pod is not None
    identity = component.pod
    config_hash = hashlib.sha256("\0".join(component.argv).encode()).hexdigest()[:32]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": identity.name,
            "namespace": identity.namespace,
            "labels": dict(identity.labels),
            "annotations": {
                pod_layout.MIRROR_ANNOTATION: config_hash,
                "kubernetes.io/config.source": "pykubevirt-up",
                "kubectl.kubernetes.io/default-container": identity.container,
            },
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": identity.container,
                    "image": f"pykubevirt/{identity.container}:{__version__}",
                    "command": list(component.argv),
                }
            ],
        },
    }


def mirror_status(component: Component, state: dict[str, Any], now: str) -> Object:
    """Pod status from the supervisor's view of the process."""
    assert component.pod is not None
    running = bool(state.get("running"))
    container: Object = {
        "name": component.pod.container,
        "image": f"pykubevirt/{component.pod.container}:{__version__}",
        "imageID": "",
        "ready": running,
        "started": running,
        "restartCount": int(state.get("restarts") or 0),
    }
    if running:
        container["containerID"] = f"process://{state['pid']}"
        container["state"] = {"running": {"startedAt": state.get("startedAt") or now}}
    else:
        container["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "the supervisor restarts it"}}
    last = state.get("lastExit") or {}
    container["lastState"] = (
        {"terminated": {"exitCode": last.get("exitCode"), "reason": "Error", "finishedAt": last.get("finishedAt")}}
        if last
        else {}
    )
    ready = "True" if running else "False"
    conditions = [
        {"type": kind, "status": status, "lastProbeTime": None}
        for kind, status in (
            ("PodScheduled", "True"),
            ("Initialized", "True"),
            ("ContainersReady", ready),
            ("Ready", ready),
        )
    ]
    return {
        "phase": "Running" if running else "Pending",
        "conditions": conditions,
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "startTime": state.get("startedAt") or now,
        "containerStatuses": [container],
        "qosClass": "BestEffort",
    }


def _same(current: Object, wanted: Object) -> bool:
    """Equal except for timestamps the API server or an earlier write set (conditions' transition times)."""

    def strip(status: Object) -> Object:
        copy = dict(status)
        copy["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]]
        return copy

    return bool(current) and "conditions" in current and strip(current) == strip(wanted)


class MirrorPods:
    """Creates and updates the mirror pods of a layout's components every few seconds."""

    def __init__(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.components = [c for c in layout.components() if c.pod is not None]

    async def run(self, states: States) -> None:
        client: KubeClient | None = None
        try:
            while True:
                if client is None:
                    client = self._client()
                if client is not None:
                    try:
                        await self.sync(client, states())
                    except ConnectionError as exc:
                        log.debug("API server unavailable: %s", exc)
                    except ApiError as exc:
                        log.warning("mirror pods: %s", exc.message)
                await asyncio.sleep(SYNC_SECONDS)
        finally:
            if client is not None:
                await client.close()

    def _client(self) -> KubeClient | None:
        return admin_client(self.layout.kubeconfig, "pykubevirt-supervisor")

    async def sync(self, client: KubeClient, states: dict[str, dict[str, Any]]) -> None:
        for component in self.components:
            assert component.pod is not None
            node = component.node or self.layout.control_plane_node
            wanted = mirror_pod(component, node)
            namespace, name = component.pod.namespace, component.pod.name
            current = await client.get_or_none(PODS, name, namespace)
            annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
            stale = current is not None and (
                annotations.get(pod_layout.MIRROR_ANNOTATION)
                != wanted["metadata"]["annotations"][pod_layout.MIRROR_ANNOTATION]
                or current["spec"].get("nodeName") != node
            )
            if stale:
                # The component's command line changed (another --nodes, a new version): replace the pod.
                await client.delete(PODS, name, namespace, grace_period_seconds=0)
                current = None
            if current is None:
                try:
                    current = await client.create(PODS, wanted, namespace)
                except (AlreadyExists, Conflict):
                    continue
            status = mirror_status(component, states.get(component.name) or {}, now_rfc3339())
            if not _same(current.get("status") or {}, status):
                await client.patch(PODS, name, {"status": status}, namespace, subresource="status")
