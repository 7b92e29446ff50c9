"""A simulated node for controller tests: it plays the scheduler, the kubelet and virt-handler through the API.

It binds launcher pods to its node, reports them Running (honouring readiness gates), finishes pods that are
deleted, moves Scheduled VMIs to Running, and on command makes a VMI succeed, fail, pause or vanish. Everything it
does is an API write, exactly what the real components would send.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from datetime import UTC, datetime
from typing import Any

import aiohttp

from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import ApiError, Conflict, Invalid, NotFound
from pykubevirt.client.informer import EventHandler, Informer
from pykubevirt.client.resources import NODES, PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.client.workqueue import WorkQueue

UNPAUSED_GATE = "kubevirt.io/virtual-machine-unpaused"
UNFIT_RETRY_SECONDS = 0.5


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SimulatedNode:
    """One fake node; `start()` runs its loops as tasks, `stop()` cancels them."""

    def __init__(
        self,
        client: KubeClient,
        name: str = "node01",
        *,
        auto_run: bool = True,
        heartbeat: float = 2.0,
        workers: int = 8,
        handler: KubeClient | None = None,
    ):
        self.client = client
        # VMI writes go out as virt-handler (KubeVirt's admission lets only KubeVirt's accounts set VMI status).
        self.handler = handler or client
        self.name = name
        self.auto_run = auto_run
        self.heartbeat_interval = heartbeat
        self.heartbeating = True
        self.pods = Informer(client, PODS, label_selector="kubevirt.io=virt-launcher")
        self.vmis = Informer(self.handler, VIRTUAL_MACHINE_INSTANCES)
        # Keys are processed by several workers, one worker per key at a time, as a real node's pod workers are.
        self._queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self.workers = workers
        self._tasks: list[asyncio.Task[Any]] = []
        # Pods the kubelet should report as failing to pull their image: name → reason.
        self.image_errors: dict[str, str] = {}
        self.unschedulable_message = ""
        self._labels: dict[str, str] = {}
        self._labels_read = -1.0
        # Pods bound but not yet seen bound in the cache (the scheduler's assumed pods): name → uid.
        self._assumed: dict[str, str] = {}
        self.writes = 0

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> SimulatedNode:
        await self.register()
        self.pods.add_handler(EventHandler(on_add=self._pod, on_update=lambda _, p: self._pod(p)))
        self.vmis.add_handler(EventHandler(on_add=self._vmi, on_update=lambda _, v: self._vmi(v)))
        self._tasks = [
            asyncio.create_task(self.pods.run()),
            asyncio.create_task(self.vmis.run()),
            *(asyncio.create_task(self._work()) for _ in range(self.workers)),
            asyncio.create_task(self._heartbeat()),
        ]
        await asyncio.gather(self.pods.synced.wait(), self.vmis.synced.wait())
        return self

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def register(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/os": "linux",
                    "kubevirt.io/schedulable": "true",
                },
                "annotations": {"kubevirt.io/heartbeat": _now()},
            },
            "status": {
                "capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                "allocatable": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        }
        with contextlib.suppress(ApiError):
            await self.client.create(NODES, node)

    async def _heartbeat(self) -> None:
        while True:
            if self.heartbeating:
                # As virt-handler's heartbeat does: the node is schedulable for VMIs while the handler is alive.
                patch = {
                    "metadata": {
                        "annotations": {"kubevirt.io/heartbeat": _now()},
                        "labels": {"kubevirt.io/schedulable": "true"},
                    }
                }
                with contextlib.suppress(ApiError, OSError, aiohttp.ClientError):
                    await self.client.patch(NODES, self.name, patch)
            await asyncio.sleep(self.heartbeat_interval)

    # ------------------------------------------------------------------------------------------------ reactions

    def _pod(self, pod: Object) -> None:
        self._queue.add(("pod", f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"))

    def _vmi(self, vmi: Object) -> None:
        if (vmi.get("status") or {}).get("nodeName") == self.name:
            self._queue.add(("vmi", f"{vmi['metadata']['namespace']}/{vmi['metadata']['name']}"))

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            kind, key = item
            try:
                if kind == "pod":
                    await self._react_pod(key)
                elif self.auto_run:
                    await self._react_vmi(key)
            except (ApiError, OSError, aiohttp.ClientError):
                # The API server may be restarting; the reaction is level-triggered, so trying again is enough.
                self._queue.add_after(item, 0.2)
            finally:
                self._queue.done(item)

    async def _react_pod(self, key: str) -> None:
        pod = self.pods.get(key)
        namespace, name = key.split("/", 1)
        for attempt in range(5):
            if pod is None:
                return
            try:
                await self._react_to_pod(pod)
                return
            except Conflict:
                # As the node agent's status writes: the pod changed since the cache showed it (virt-controller's
                # readiness gate, say), so its status is computed again from a fresh read instead of overwriting
                # that change with a stale conditions list.
                if attempt == 4:
                    raise
                try:
                    pod = await self.client.get(PODS, name, namespace)
                except NotFound:
                    return

    async def _react_to_pod(self, pod: Object) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp"):
            # With auto_run off the "launcher" is still shutting the guest down, so the pod waits, as with a kubelet.
            if self.auto_run and spec.get("nodeName") in (None, "", self.name):
                await self._finish_pod(pod, "Succeeded", exit_code=0)
                with contextlib.suppress(NotFound):
                    await self.client.delete(PODS, name, namespace, grace_period_seconds=0)
                    self.writes += 1
            return
        if spec.get("nodeName"):
            self._assumed.pop(f"{namespace}/{name}", None)
        elif self._assumed.get(f"{namespace}/{name}") == pod["metadata"].get("uid"):
            # Bound already; the binding's update event is on its way.
            return
        if not spec.get("nodeName"):
            if self.unschedulable_message:
                conditions = status.get("conditions") or []
                # Other writers' conditions (virt-controller's unpaused gate) may be there already; keep them.
                if status.get("phase") != "Pending" or not any(c.get("type") == "PodScheduled" for c in conditions):
                    condition = {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": self.unschedulable_message,
                        "lastTransitionTime": _now(),
                    }
                    others = [c for c in conditions if c.get("type") != "PodScheduled"]
                    await self._put_status(pod, {"phase": "Pending", "conditions": [*others, condition]})
                return
            if not await self._fits(pod):
                # As a scheduler does: an unschedulable pod is tried again, since the node's labels may change
                # (a heartbeat that arrives late briefly marks the node kubevirt.io/schedulable=false).
                self._queue.add_after(("pod", f"{namespace}/{name}"), UNFIT_RETRY_SECONDS)
                return
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"kind": "Node", "name": self.name},
            }
            await self.client.request("POST", PODS.path(namespace, name, "binding"), body=binding)
            self._assumed[f"{namespace}/{name}"] = pod["metadata"].get("uid", "")
            self.writes += 1
            return
        if spec.get("nodeName") != self.name or status.get("phase") in ("Succeeded", "Failed"):
            return
        if name in self.image_errors:
            reason = self.image_errors[name]
            waiting = {"reason": reason, "message": f'Back-off pulling image "{spec["containers"][0].get("image")}"'}
            wanted = {
                "phase": "Pending",
                "containerStatuses": [{"name": "compute", "ready": False, "state": {"waiting": waiting}}],
                "conditions": [{"type": "PodScheduled", "status": "True"}],
            }
            if status.get("containerStatuses") != wanted["containerStatuses"]:
                await self._put_status(pod, wanted)
            return
        gates_ok = all(
            any(
                c.get("type") == g["conditionType"] and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            for g in spec.get("readinessGates") or []
        )
        ready = "True" if gates_ok else "False"
        current_ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if status.get("phase") == "Running" and current_ready.get("status") == ready:
            return
        other = [
            c
            for c in status.get("conditions") or []
            if c.get("type") not in ("Ready", "PodScheduled", "ContainersReady", "Initialized")
        ]
        conditions = [
            {"type": "Initialized", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": ready, "lastTransitionTime": _now()},
            *other,
        ]
        containers = [
            {
                "name": c["name"],
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": _now()}},
            }
            for c in spec.get("containers") or []
        ]
        await self._put_status(
            pod, {"phase": "Running", "conditions": conditions, "containerStatuses": containers, "podIP": "10.244.0.10"}
        )

    async def _fits(self, pod: Object) -> bool:
        """The pod's nodeSelector matches this node's current labels (what a scheduler checks first)."""
        now = asyncio.get_running_loop().time()
        if now - self._labels_read > 0.5:
            node = await self.client.get(NODES, self.name)
            self._labels = node["metadata"].get("labels") or {}
            self._labels_read = now
        labels = self._labels
        wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    async def _put_status(self, pod: Object, status: dict[str, Any], *, as_read: bool = True) -> None:
        """Merge `status` into the pod's; `as_read` guards it with the resourceVersion it was computed from."""
        patch: dict[str, Any] = {"status": status}
        if as_read:
            patch["metadata"] = {"resourceVersion": pod["metadata"]["resourceVersion"]}
        patched = await self.client.patch(
            PODS, pod["metadata"]["name"], patch, pod["metadata"]["namespace"], subresource="status"
        )
        self.pods.wrote(patched, pod["metadata"]["resourceVersion"])
        self.writes += 1

    async def _finish_pod(self, pod: Object, phase: str, *, exit_code: int) -> None:
        containers = [
            {
                "name": c["name"],
                "ready": False,
                "state": {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error"}},
            }
            for c in (pod.get("spec") or {}).get("containers") or []
        ]
        with contextlib.suppress(NotFound):
            await self._put_status(pod, {"phase": phase, "containerStatuses": containers}, as_read=False)

    async def _react_vmi(self, key: str) -> None:
        vmi = self.vmis.get(key)
        if vmi is None:
            return
        phase = (vmi.get("status") or {}).get("phase")
        if vmi["metadata"].get("deletionTimestamp") and phase in ("Scheduled", "Running"):
            await self.set_phase(key, "Succeeded")
        elif phase == "Scheduled":
            await self.set_phase(key, "Running")

    # ------------------------------------------------------------------------------------------------ commands

    def resync(self) -> None:
        """Look at every pod and VMI again (after changing auto_run)."""
        for pod in self.pods.items():
            self._pod(pod)
        for vmi in self.vmis.items():
            self._vmi(vmi)

    async def set_phase(self, key: str, phase: str, *, reason: str = "") -> None:
        """What virt-handler writes when the domain starts, stops or crashes (retried on a concurrent change)."""
        await self._retry(lambda cached: self._set_phase(key, phase, reason, cached=cached))

    async def _retry(self, write: Any) -> None:
        # The first try works from the cache, as virt-handler does; a retry reads the VMI afresh.
        for attempt in range(50):
            try:
                await write(attempt == 0)
                return
            except (Invalid, Conflict):
                await asyncio.sleep(0.02)
        raise AssertionError("the VMI kept changing under the simulated handler")

    async def _set_phase(self, key: str, phase: str, reason: str, *, cached: bool) -> None:
        namespace, name = key.split("/", 1)
        vmi = self.vmis.get(key) if cached else None
        if vmi is None:
            vmi = await self.handler.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        status = copy.deepcopy(vmi.get("status") or {})
        if status.get("phase") == phase:
            return
        status["phase"] = phase
        status.setdefault("phaseTransitionTimestamps", []).append({"phase": phase, "phaseTransitionTimestamp": _now()})
        if reason:
            status["reason"] = reason
        if phase == "Running":
            status["interfaces"] = [
                {
                    "name": "default",
                    "ipAddress": "10.244.0.10",
                    "ipAddresses": ["10.244.0.10"],
                    "mac": "52:54:00:00:00:01",
                }
            ]
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": vmi["metadata"]["resourceVersion"]},
            {"op": "replace" if "status" in vmi else "add", "path": "/status", "value": status},
        ]
        patched = await self.handler.patch(VIRTUAL_MACHINE_INSTANCES, name, ops, namespace, patch_type=JSON_PATCH)
        self.vmis.wrote(patched, vmi["metadata"]["resourceVersion"])
        self.writes += 1

    async def set_paused(self, key: str, paused: bool) -> None:
        await self._retry(lambda _: self._set_paused(key, paused))

    async def _set_paused(self, key: str, paused: bool) -> None:
        namespace, name = key.split("/", 1)
        vmi = await self.handler.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        conditions = [c for c in (vmi.get("status") or {}).get("conditions") or [] if c.get("type") != "Paused"]
        if paused:
            conditions.append(
                {
                    "type": "Paused",
                    "status": "True",
                    "reason": "PausedByUser",
                    "message": "VMI was paused by user",
                    "lastTransitionTime": _now(),
                }
            )
        ops = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": vmi["metadata"]["resourceVersion"]},
            {"op": "add", "path": "/status/conditions", "value": conditions},
        ]
        await self.handler.patch(VIRTUAL_MACHINE_INSTANCES, name, ops, namespace, patch_type=JSON_PATCH)

    async def kill_pod_of(self, vmi_uid: str, *, exit_code: int = 1) -> None:
        """The launcher process died: its pod's compute container terminated and the pod failed."""
        for pod in self.pods.items():
            if any(r.get("uid") == vmi_uid for r in pod["metadata"].get("ownerReferences") or []):
                await self._finish_pod(pod, "Failed" if exit_code else "Succeeded", exit_code=exit_code)
