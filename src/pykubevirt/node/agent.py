"""The embedded node agent (the kubelet's job, without containers): runs the pods bound to its node as processes.

It registers the Node, watches the pods whose `spec.nodeName` is its name, and hands each pod (by uid) to a
PodWorker through a work queue, so one pod is never synced twice at once while many pods progress in parallel.
Processes are detached: stopping or restarting the agent never stops them. On start it re-adopts every pod
directory under `<data-dir>/pods` whose pod still exists; the processes of pods that are gone are killed. Several
agents can share a host as long as their names and data directories differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from pykubevirt.api import pod_layout
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.delegated_auth import Decision, DelegatedAuth
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import EventHandler, Informer, object_key
from pykubevirt.client.resources import NODES, PODS
from pykubevirt.client.workqueue import ShutDown, WorkQueue
from pykubevirt.log import object_fields
from pykubevirt.node import pod_status
from pykubevirt.node.containers import ProcessRuntime
from pykubevirt.node.cpu_manager import CPU_MANAGER_LABEL, StaticCPUManager
from pykubevirt.node.exec_server import ExecTarget, container_exec_target, serve_exec
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.log_server import LogError, LogServer, LogTarget
from pykubevirt.node.node_context import NodeContext, api_fetch
from pykubevirt.node.pod_dirs import PodDir, existing_pod_dirs
from pykubevirt.node.pod_network import PodNetwork, node_pod_cidrs
from pykubevirt.node.pod_worker import PodWorker
from pykubevirt.node.port_forward_server import PortForwardTarget, serve_port_forward
from pykubevirt.node.registration import HEARTBEAT_INTERVAL_SECONDS, NODE_IP, NodeRegistration
from pykubevirt.node.resource_usage import (
    PodProcesses,
    metered_containers,
    mirror_processes,
    serve_resource_metrics,
)
from pykubevirt.node.service_account_tokens import ServiceAccountTokens
from pykubevirt.node.virtual_containers import ImagePuller

log = logging.getLogger("pykubevirt.node.agent")

DEFAULT_WORKERS = 8


class DataDirError(Exception):
    """The data directory cannot be used by this agent."""


def is_mirror(pod: Object) -> bool:
    """A mirror pod reflects a process the node runs by other means (as the kubelet's static pods): not ours to run."""
    return pod_layout.MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {})


class NodeAgent:
    """One node: `await start()` (or `run()` until cancelled), `await stop()` leaves every pod running."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        data_dir: Path,
        images: ImageStore,
        log_port: int = 0,
        *,
        workers: int = DEFAULT_WORKERS,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_SECONDS,
        capacity_overrides: dict[str, str] | None = None,
        network: PodNetwork | None = None,
        cpu_manager: StaticCPUManager | None = None,
        node_ip: str = NODE_IP,
        fork_server: bool = True,
    ) -> None:
        self.client = client
        self.capacity_overrides = dict(capacity_overrides or {})
        self.name = name
        self.data_dir = Path(data_dir)
        self.pods_dir = self.data_dir / "pods"
        self.images = images
        self.worker_count = workers
        self.heartbeat_interval = heartbeat_interval
        self.pods = Informer(client, PODS, field_selector=f"spec.nodeName={name}")
        self.queue: WorkQueue[str] = WorkQueue()
        self.workers: dict[str, PodWorker] = {}
        self._keys: dict[str, str] = {}
        self.runtime = ProcessRuntime(fork_server=fork_server)
        self.puller = ImagePuller(images, self.enqueue)
        self.recorder = EventRecorder(client, "kubelet", host=name)
        # The API server reaches the log endpoint at the Node's InternalIP, so it listens there.
        self.node_ip = node_ip
        self.log_server = LogServer(self, log_port, host=node_ip)
        self.log_server.routes.append(("/exec/{namespace}/{pod}/{container}", self._serve_exec))
        self.log_server.routes.append(("/portForward/{namespace}/{pod}", self._serve_port_forward))
        self.log_server.routes.append(("/metrics/resource", self._serve_resource_metrics))
        self.delegated_auth = DelegatedAuth(client)
        self.network = network
        self.registration: NodeRegistration | None = None
        self.context = NodeContext(
            client=client,
            node_name=name,
            runtime=self.runtime,
            puller=self.puller,
            recorder=self.recorder,
            fetch=api_fetch(client),
            enqueue=self.enqueue,
            tokens=ServiceAccountTokens(client),
            network=network,
            cpu_manager=cpu_manager,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._lock: IO[str] | None = None
        self.started = asyncio.Event()

    @property
    def log_port(self) -> int:
        return self.log_server.port

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Serve logs, register the Node, re-adopt pod directories, sync the pod cache and start the workers."""
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self._claim_data_dir()
        await self.log_server.start()
        self.registration = NodeRegistration(
            self.client,
            self.name,
            self.data_dir,
            log_port=self.log_port,
            node_ip=self.node_ip,
            heartbeat_interval=self.heartbeat_interval,
            capacity_overrides=self.capacity_overrides,
            extra_labels={CPU_MANAGER_LABEL: "true"} if self.context.cpu_manager is not None else {},
        )
        self.context.node_capacity = dict(self.registration.capacity)
        await self.registration.register()
        if self.network is not None:
            node = await self.client.get(NODES, self.name)
            await self.network.start(self.network.pod_cidr or node_pod_cidrs(node))
        adopted = self._adopt()
        if self.network is not None:
            # Sandboxes of pods whose directory is gone: a crash came between the two removals.
            removed = await self.network.collect_garbage(set(adopted))
            if removed:
                log.info("removed %d stale pod networks", removed, extra={"node": self.name, "count": removed})
        self.pods.add_handler(
            EventHandler(on_add=self._pod_event, on_update=self._pod_update, on_delete=self._pod_gone)
        )
        self._tasks = [
            asyncio.create_task(self.pods.run(), name=f"{self.name}-pods"),
            asyncio.create_task(self.registration.run(), name=f"{self.name}-heartbeat"),
        ]
        await self.pods.synced.wait()
        # Adopted pods are looked at even if their pod is gone (then their processes are killed).
        for uid in adopted:
            self.enqueue(uid)
        self._tasks += [
            asyncio.create_task(self._work(), name=f"{self.name}-pod-worker-{i}") for i in range(self.worker_count)
        ]
        self.started.set()
        log.info(
            "node agent %s started: %d pods adopted, logs on %s:%d",
            self.name,
            len(adopted),
            self.node_ip,
            self.log_port,
            extra={"node": self.name, "count": len(adopted)},
        )

    async def run(self) -> None:
        """Start, then serve until cancelled."""
        await self.start()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await self.stop()

    async def stop(self) -> None:
        """Stop watching and serving; the pods' processes keep running for the next agent to adopt."""
        self.queue.shutdown()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.puller.close()
        self.runtime.close()
        await self.log_server.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.recorder.flush(), 5.0)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _claim_data_dir(self) -> None:
        """One agent per data directory, and always the same node name."""
        # Under another name the directory's pods would look orphaned, and orphans are killed.
        lock = (self.data_dir / "agent.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataDirError(f"{self.data_dir} is in use by another node agent") from None
        name_file = self.data_dir / "node-name"
        recorded = name_file.read_text().strip() if name_file.exists() else ""
        if recorded and recorded != self.name:
            lock.close()
            raise DataDirError(f"{self.data_dir} belongs to node {recorded!r}, not {self.name!r}")
        if not recorded:
            name_file.write_text(self.name + "\n")
        self._lock = lock

    def _adopt(self) -> list[str]:
        """PodWorkers for the pod directories a previous agent left, with their containers' records."""
        adopted = []
        for pod_dir in existing_pod_dirs(self.pods_dir):
            if not pod_dir.exists():
                pod_dir.remove()  # a directory whose creation never finished
                continue
            records = pod_dir.load_records()
            identity = pod_dir.identity()
            self.workers[pod_dir.uid] = PodWorker(self.context, pod_dir, records)
            self._keys[pod_dir.uid] = f"{identity.get('namespace')}/{identity.get('name')}"
            adopted.append(pod_dir.uid)
            alive = sum(1 for r in records.values() if self.workers[pod_dir.uid].alive(r))
            log.info(
                "re-adopting pod %s/%s: %d live processes",
                identity.get("namespace"),
                identity.get("name"),
                alive,
                extra={"uid": pod_dir.uid, "node": self.name, "count": alive},
            )
        return adopted

    # ------------------------------------------------------------------------------------------------ events

    def enqueue(self, uid: str) -> None:
        self.queue.add(uid)

    def _ours(self, pod: Object | None) -> bool:
        # The informer's field selector should be enough; this also holds when a list ignores it.
        return pod is not None and (pod.get("spec") or {}).get("nodeName") == self.name

    def _pod_event(self, pod: Object) -> None:
        uid = str(pod["metadata"].get("uid") or "")
        if uid and self._ours(pod) and not is_mirror(pod):
            self._keys[uid] = object_key(pod)
            self.enqueue(uid)

    def _pod_update(self, old: Object, new: Object) -> None:
        self._pod_event(new)

    def _pod_gone(self, pod: Object) -> None:
        uid = str(pod["metadata"].get("uid") or "")
        if uid:
            self.enqueue(uid)

    def pod(self, uid: str) -> Object | None:
        """The pod with this uid from the cache (None once deleted, or replaced by a namesake)."""
        key = self._keys.get(uid)
        pod = self.pods.get(key) if key else None
        if pod is None or pod["metadata"].get("uid") != uid or not self._ours(pod):
            return None
        return pod

    # ------------------------------------------------------------------------------------------------ workers

    async def _work(self) -> None:
        while True:
            try:
                uid = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._sync(uid)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                retries = self.queue.retries(uid)
                log.warning(
                    "sync of pod %s failed (attempt %d): %s",
                    uid,
                    retries + 1,
                    exc,
                    exc_info=retries == 0 and not isinstance(exc, OSError),
                    extra={"uid": uid, "node": self.name},
                )
                self.queue.add_rate_limited(uid)
            finally:
                self.queue.done(uid)

    async def _sync(self, uid: str) -> None:
        pod = self.pod(uid)
        worker = self.workers.get(uid)
        if worker is None:
            if pod is None:
                self._keys.pop(uid, None)
                return
            if (pod.get("status") or {}).get("phase") in pod_status.TERMINAL_PHASES:
                return  # finished before this agent knew it; nothing runs, nothing to report
            worker = self.workers[uid] = PodWorker(self.context, PodDir(self.pods_dir, uid))
            log.info("pod bound to this node", extra=object_fields(pod, node=self.name))
        delay = await worker.sync(pod)
        self.queue.forget(uid)
        if worker.finished:
            self.workers.pop(uid, None)
            self._keys.pop(uid, None)
        elif delay is not None:
            self.queue.add_after(uid, delay)

    # ------------------------------------------------------------------------------------------------ logs

    def _mirror_log_target(self, obj: Object, container: str) -> LogTarget:
        """A mirror pod's process runs outside this agent; whoever runs it writes its log where the agent looks."""
        meta = obj["metadata"]
        path = Path(
            pod_layout.mirror_log_file(str(self.data_dir), str(meta.get("namespace")), str(meta.get("name")), container)
        )
        if not path.exists():
            raise LogError(
                400, f'container "{container}" in pod "{meta.get("name")}" is waiting to start: ContainerCreating'
            )
        key = object_key(obj)

        def running() -> bool:
            current = self.pods.get(key)
            statuses = ((current or {}).get("status") or {}).get("containerStatuses") or []
            return any(x.get("name") == container and "running" in (x.get("state") or {}) for x in statuses)

        return LogTarget(path, running)

    def _own_pod(self, namespace: str, pod: str) -> Object:
        """The pod of this node the kubelet API asks about, or its 404."""
        obj = self.pods.get_by_name(namespace, pod)
        if obj is None or not self._ours(obj):
            raise LogError(404, f'pod "{namespace}/{pod}" not found on node "{self.name}"')
        return obj

    async def _serve_exec(self, request: web.Request) -> web.StreamResponse:
        return await serve_exec(request, self)

    async def _serve_port_forward(self, request: web.Request) -> web.StreamResponse:
        return await serve_port_forward(request, self)

    def port_forward_target(self, namespace: str, pod: str) -> PortForwardTarget:
        """Where to connect for a port-forward to a running pod of this node."""
        obj = self._own_pod(namespace, pod)
        uid = str(obj["metadata"].get("uid"))
        worker = self.workers.get(uid)
        if is_mirror(obj):  # a component of this node, run outside the agent in the node's network
            running, netns = (obj.get("status") or {}).get("phase") == "Running", None
        else:
            names = [str(c.get("name")) for c in _containers(obj)]
            running = worker is not None and not worker.finished and any(worker.running(name) for name in names)
            netns = worker.sandbox.netns() if worker is not None else None
        if not running:
            raise LogError(400, f"unable to do port forwarding: pod {namespace}/{pod} is not running")
        return PortForwardTarget(namespace, pod, uid, netns)

    async def _serve_resource_metrics(self, request: web.Request) -> web.StreamResponse:
        return await serve_resource_metrics(request, self)

    async def authorize_metrics(self, authorization: str | None) -> Decision:
        """The kubelet's webhook authorization of its metrics: `get nodes/metrics` on this node."""
        return await self.delegated_auth.decide_resource(authorization, "get", "nodes", "metrics", self.name)

    def pod_processes(self) -> list[PodProcesses]:
        """The running pods of this node, their running containers and the process groups of those."""
        found = []
        for uid, worker in self.workers.items():
            obj = self.pods.get(self._keys.get(uid, ""))
            if worker.finished or obj is None:
                continue
            running = tuple(name for name in metered_containers(obj) if worker.running(name))
            groups = {
                record.pid: name
                for name, record in worker.records.items()
                if name in running and not record.virtual and record.pid > 0
            }
            meta = obj["metadata"]
            marker = pod_layout.short_runtime_dir(uid) + "/"
            found.append(PodProcesses(str(meta["namespace"]), str(meta["name"]), running, groups, marker))
        found += [mirror for obj in self.pods.items() if is_mirror(obj) and (mirror := mirror_processes(obj))]
        return found

    async def authorize(self, authorization: str | None) -> Decision:
        """The kubelet's webhook authorization of its API: exec and port-forward are `create nodes/proxy` here."""
        return await self.delegated_auth.decide_resource(authorization, "create", "nodes", "proxy", self.name)

    async def exec_target(self, namespace: str, pod: str, container: str) -> ExecTarget:
        """How to run a command in a running container of a pod of this node, for the exec endpoint."""
        obj = self._own_pod(namespace, pod)
        found = next((c for c in _containers(obj) if c.get("name") == container), None)
        worker = self.workers.get(str(obj["metadata"].get("uid")))
        if found is None or worker is None or worker.finished or not worker.running(container):
            raise LogError(400, f'unable to upgrade connection: container not found ("{container}")')
        return await container_exec_target(worker, obj, found)

    def log_target(self, namespace: str, pod: str, container: str) -> LogTarget:
        """Where a container's log is, for the log server."""
        obj = self._own_pod(namespace, pod)
        names = [str(c.get("name")) for c in _containers(obj)]
        if container not in names:
            raise LogError(400, f'container "{container}" in pod "{pod}" is not valid')
        if is_mirror(obj):
            return self._mirror_log_target(obj, container)
        uid = str(obj["metadata"].get("uid"))
        path = PodDir(self.pods_dir, uid).log_file(container)
        if not path.exists():
            status = obj.get("status") or {}
            reason = "ContainerCreating"
            for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
                waiting = (entry.get("state") or {}).get("waiting")
                if entry.get("name") == container and waiting:
                    reason = str(waiting.get("reason") or reason)
            raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start: {reason}')
        worker = self.workers.get(uid)
        if worker is not None:
            # A guest-console-log container's log is the serial log file, which may not exist yet (read as empty).
            path = worker.log_path(container)

        def running() -> bool:
            worker = self.workers.get(uid)
            return worker is not None and not worker.finished and worker.running(container)

        return LogTarget(path, running)


def _containers(pod: Object) -> list[dict[str, Any]]:
    """A pod's containers and init containers: those the kubelet API can name."""
    spec = pod.get("spec") or {}
    return [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
