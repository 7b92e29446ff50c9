"""One pod on this node: start its init containers in order, then its containers, restart them by policy, kill them
when the pod is deleted, and report it all as the pod's status. `sync` is level-triggered and never runs twice at
once for a pod (the agent's work queue sees to that).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.api.pod_defaults import DEFAULT_GRACE_PERIOD_SECONDS
from pykubevirt.api.timestamps import now_rfc3339, parse_time
from pykubevirt.client.api import Object
from pykubevirt.client.errors import Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING
from pykubevirt.client.resources import PODS
from pykubevirt.log import object_fields
from pykubevirt.node import containers as runtime_mod
from pykubevirt.node import pod_status, processes
from pykubevirt.node import virtual_containers as virtual
from pykubevirt.node.container_statuses import container_statuses, gating_init_statuses, sidecar_names, terminated_state
from pykubevirt.node.containers import StartError
from pykubevirt.node.env import ConfigError, container_env
from pykubevirt.node.node_context import NodeContext
from pykubevirt.node.pod_dirs import ContainerRecord, PodDir
from pykubevirt.node.pod_network import host_network
from pykubevirt.node.sandbox_network import SandboxNetwork
from pykubevirt.node.volumes import PreparedVolumes, container_mounts, prepare_volumes, refresh_volumes

log = logging.getLogger("pykubevirt.node.pod_worker")

RESYNC_SECONDS = 10.0
# The kubelet's sync period: how often secret, configMap and downward API volumes are rewritten from their objects
# (a key added with `virtctl credentials add-ssh-key` reaches a running guest through this).
VOLUME_REFRESH_SECONDS = 60.0
NETWORK_RETRY_SECONDS = 1.0
RESTART_BACKOFF_INITIAL_SECONDS = 10.0
RESTART_BACKOFF_MAX_SECONDS = 300.0
# A container that ran this long before it ended restarts without back-off (the kubelet forgets its back-off).
BACKOFF_RESET_SECONDS = 600.0
STATUS_WRITE_ATTEMPTS = 5


def _epoch(stamp: str) -> float:
    moment = parse_time(stamp)
    return moment.timestamp() if moment is not None else 0.0


def _resource_version(pod: Object | None) -> int:
    try:
        return int(((pod or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


@dataclass
class _Plan:
    """What one pass found: when to look again, and whether the init containers are all done."""

    requeue: list[float] = field(default_factory=list)
    initialized: bool = True
    init_failed: bool = False


class PodWorker:
    """The node's state of one pod (by uid); records on disk let a restarted agent carry on."""

    def __init__(self, ctx: NodeContext, pod_dir: PodDir, records: dict[str, ContainerRecord] | None = None) -> None:
        self.ctx = ctx
        self.uid = pod_dir.uid
        self.dir = pod_dir
        self.records: dict[str, ContainerRecord] = dict(records or {})
        self.waiting: dict[str, tuple[str, str]] = {}
        self._start_failures: dict[str, tuple[int, float]] = {}
        self.volumes: PreparedVolumes | None = None
        self.volumes_written = 0.0
        self.latest: Object | None = None
        self.kill_deadline: float | None = None
        self.sigterm_sent = False
        self.sigkill_sent = False
        self.delete_sent = False
        self.finished = False
        self.sandbox = SandboxNetwork(ctx.client, ctx.node_name, ctx.network, ctx.recorder, self.uid)
        for record in self.records.values():
            self._watch(record)

    # ------------------------------------------------------------------------------------------------ queries

    def alive(self, record: ContainerRecord) -> bool:
        return record.terminated is None and record.pid > 0 and processes.is_alive(record.pid, record.ticks)

    def running(self, name: str) -> bool:
        record = self.records.get(name)
        if record is None or record.terminated is not None:
            return False
        return record.virtual_state == "running" if record.virtual else self.alive(record)

    def last_seen_running(self, name: str) -> bool:
        """Running as the status reports it: until `_refresh` records a process's exit (its watcher brings that
        sync), as the kubelet reports a container's last known state. A process that just died must not read as
        never started: a sidecar would then hold the pod back in Pending."""
        record = self.records.get(name)
        if record is None or record.terminated is not None:
            return False
        return record.virtual_state == "running" if record.virtual else record.pid > 0

    def any_alive(self) -> bool:
        return any(self.alive(r) for r in self.records.values())

    def completed(self, name: str) -> bool:
        record = self.records.get(name)
        return record is not None and record.terminated is not None and record.terminated["exitCode"] == 0

    def log_path(self, name: str) -> Path:
        """The file `kubectl logs` shows: a guest-console-log's serial log file, else what the process wrote."""
        record = self.records.get(name)
        if record is not None and record.extra.get("logfile"):
            return Path(str(record.extra["logfile"]))
        return self.dir.log_file(name)

    # ------------------------------------------------------------------------------------------------ sync

    async def sync(self, pod: Object | None) -> float | None:
        """Bring the pod's processes and status in line; returns seconds until it wants another look (None: done)."""
        if pod is None:
            await self._cleanup_vanished()
            return None
        if self.latest is not None and _resource_version(self.latest) > _resource_version(pod):
            if self.latest["metadata"].get("uid") == self.uid:
                pod = self.latest
        self.sandbox.host_network = host_network(pod)
        await self._refresh()
        if pod["metadata"].get("deletionTimestamp"):
            return await self._sync_terminating(pod)
        self.dir.create(pod)
        if self.volumes is None or self.volumes.errors:
            self.volumes = await prepare_volumes(pod, self.dir, self.ctx.fetch, self.ctx.tokens)
            self.volumes_written = time.monotonic()
        elif time.monotonic() - self.volumes_written >= VOLUME_REFRESH_SECONDS:
            self.volumes_written = time.monotonic()
            for failure in await refresh_volumes(pod, self.dir, self.ctx.fetch, self.ctx.tokens):
                meta = pod["metadata"]
                log.warning("pod %s/%s: volume %s kept as it was", meta.get("namespace"), meta.get("name"), failure)
        plan = _Plan()
        if (pod.get("status") or {}).get("phase") not in pod_status.TERMINAL_PHASES:
            if await self.sandbox.ensure(pod):
                await self._run_containers(pod, plan)
            else:
                plan.requeue.append(NETWORK_RETRY_SECONDS)
        else:
            self._end_sidecars(pod)
        await self._report(pod, plan, killed=False)
        return min([RESYNC_SECONDS, *plan.requeue])

    async def _refresh(self) -> None:
        """Record the exit of every process that ended since the last look."""
        ended = False
        for record in self.records.values():
            if record.virtual or record.terminated is not None or record.pid <= 0:
                continue
            if processes.is_alive(record.pid, record.ticks):
                continue
            self.ctx.runtime.reap(record.pid)
            record.terminated = terminated_state(record, self.dir.read_exit(record.name, record.attempt), now_rfc3339())
            self.dir.save_record(record)
            ended = True
        if ended and not self.any_alive():
            await self._kill_strays()

    async def _kill_strays(self) -> None:
        """Nothing of a pod outlives its containers, as a cgroup would ensure: QEMU daemonizes out of the group."""
        runtime = pod_layout.short_runtime_dir(self.uid)
        if await self.ctx.strays.kill(runtime + "/"):
            log.info("killed processes the pod's containers left behind", extra={"pod": self.uid})

    # ------------------------------------------------------------------------------------------------ running

    async def _run_containers(self, pod: Object, plan: _Plan) -> None:
        spec = pod.get("spec") or {}
        policy = pod_status.restart_policy(pod)
        if self._regular_containers_over(pod, policy):
            # The pod has ended even if its phase is not written yet: nothing starts or restarts any more, and a
            # sidecar the agent stops now must not come back by its own restartPolicy (the kubelet's too).
            self._end_virtual_after_processes(pod)
            return
        inits = spec.get("initContainers") or []
        regular_done = all(self.completed(str(c["name"])) for c in inits if not virtual.is_restartable(c))
        for container in inits:
            name = str(container["name"])
            record = self.records.get(name)
            if virtual.is_restartable(container):
                # A sidecar restarts whatever the pod's policy; later init containers wait for its start only.
                if record is None:
                    await self._start(pod, container, init=True, plan=plan)
                elif record.terminated is not None:
                    await self._restart(pod, container, record, init=True, plan=plan)
                if self.running(name) or regular_done:
                    continue
                plan.initialized = False
                return
            if self.completed(name):
                continue
            plan.initialized = False
            if record is None:
                await self._start(pod, container, init=True, plan=plan)
                record = self.records.get(name)
                if record is not None and record.terminated is not None and record.terminated["exitCode"] == 0:
                    plan.initialized = True
                    continue  # a virtual init container completes at once
            elif record.terminated is not None:
                if policy == "Never":
                    plan.init_failed = True
                else:
                    await self._restart(pod, container, record, init=True, plan=plan)
            return
        for container in spec.get("containers") or []:
            record = self.records.get(str(container["name"]))
            if record is None:
                await self._start(pod, container, init=False, plan=plan)
            elif record.terminated is not None:
                failed = int(record.terminated.get("exitCode") or 0) != 0
                if policy == "Always" or (policy == "OnFailure" and failed):
                    await self._restart(pod, container, record, init=False, plan=plan)
        if self._regular_containers_over(pod, policy):
            self._end_virtual_after_processes(pod)

    def _regular_containers_over(self, pod: Object, policy: str) -> bool:
        """Every regular container that runs a process has exited and the restart policy brings none back."""
        if policy == "Always":
            return False
        containers = (pod.get("spec") or {}).get("containers") or []
        records = [self.records.get(str(c["name"])) for c in containers]
        if any(r is None for r in records):
            return False
        processes_ = [r for r in records if r is not None and not r.virtual]
        if not processes_ or any(r.terminated is None for r in processes_):
            return False
        return policy == "Never" or all(int((r.terminated or {}).get("exitCode") or 0) == 0 for r in processes_)

    def _end_virtual_after_processes(self, pod: Object) -> None:
        """Upstream's container-disk servers and virt-tail end once virt-launcher has: when every container that
        runs a process has exited for good, the virtual ones complete too, so a migrated-away launcher's pod (or
        one whose guest shut down) reaches Succeeded as in KubeVirt, and a drain may then evict it."""
        now = now_rfc3339()
        for container in (pod.get("spec") or {}).get("containers") or []:
            record = self.records.get(str(container["name"]))
            if record is not None and record.virtual and record.virtual_state == "running":
                self._complete_virtual(record, now)
        self._end_sidecars(pod)

    async def _restart(
        self, pod: Object, container: dict[str, Any], record: ContainerRecord, *, init: bool, plan: _Plan
    ) -> None:
        assert record.terminated is not None
        steps = int(record.extra.get("backoff_steps") or 0)
        ran = _epoch(record.terminated.get("finishedAt", "")) - _epoch(record.started_at)
        if ran >= BACKOFF_RESET_SECONDS:
            steps = 0
        delay = (
            0.0 if steps == 0 else min(RESTART_BACKOFF_INITIAL_SECONDS * 2 ** (steps - 1), RESTART_BACKOFF_MAX_SECONDS)
        )
        remaining = _epoch(record.terminated.get("finishedAt", "")) + delay - time.time()
        if remaining > 0:
            meta = pod["metadata"]
            message = (
                f"back-off {int(delay)}s restarting failed container={record.name} "
                f"pod={meta['name']}_{meta.get('namespace', '')}({self.uid})"
            )
            if self.waiting.get(record.name, ("", ""))[0] != "CrashLoopBackOff":
                self.ctx.recorder.event(pod, WARNING, "BackOff", "Back-off restarting failed container")
            self.waiting[record.name] = ("CrashLoopBackOff", message)
            plan.requeue.append(remaining)
            return
        record.extra["backoff_steps"] = steps + 1
        await self._start(pod, container, init=init, plan=plan, previous=record)

    async def _start(
        self,
        pod: Object,
        container: dict[str, Any],
        *,
        init: bool,
        plan: _Plan,
        previous: ContainerRecord | None = None,
    ) -> None:
        name = str(container["name"])
        failures, not_before = self._start_failures.get(name, (0, 0.0))
        if time.monotonic() < not_before:
            plan.requeue.append(not_before - time.monotonic())
            return
        kind = virtual.virtual_kind(container)
        try:
            if kind is not None:
                await self._start_virtual(pod, container, kind, init=init, plan=plan)
            else:
                await self._start_process(pod, container, init=init, previous=previous)
            self._start_failures.pop(name, None)
        except (ConfigError, StartError, OSError, ValueError) as exc:
            reason = "CreateContainerConfigError" if isinstance(exc, ConfigError) else "RunContainerError"
            message = str(exc)
            if self.waiting.get(name) != (reason, message):
                self.ctx.recorder.event(pod, WARNING, "Failed", f"Error: {message}")
                log.warning(
                    "container %s cannot start: %s",
                    name,
                    message,
                    extra=object_fields(pod, reason=reason, node=self.ctx.node_name),
                )
            self.waiting[name] = (reason, message)
            delay = min(RESTART_BACKOFF_INITIAL_SECONDS * 2**failures, RESTART_BACKOFF_MAX_SECONDS)
            self._start_failures[name] = (failures + 1, time.monotonic() + delay)
            plan.requeue.append(delay)

    async def _start_process(
        self, pod: Object, container: dict[str, Any], *, init: bool, previous: ContainerRecord | None
    ) -> None:
        name = str(container["name"])
        spec_env, env, cwd = await self.process_context(pod, container)
        argv = runtime_mod.container_argv(container, spec_env)
        attempt = previous.attempt + 1 if previous is not None else 0
        cpus = self.ctx.cpu_manager.allocate(pod, container) if self.ctx.cpu_manager is not None else None
        started = self.ctx.runtime.start(
            argv,
            env=env,
            cwd=cwd,
            log_file=self.dir.log_file(name),
            exit_file=self.dir.exit_file(name, attempt),
            netns=self.sandbox.netns(),
            cpus=cpus,
        )
        record = ContainerRecord(
            name=name,
            init=init,
            attempt=attempt,
            pid=started.pid,
            ticks=started.ticks,
            started_at=now_rfc3339(),
            image_id=f"process://{started.executable}",
            last_terminated=previous.terminated if previous is not None else None,
            extra={k: v for k, v in previous.extra.items() if k != "stop_sent"} if previous is not None else {},
        )
        self.records[name] = record
        self.dir.save_record(record)
        self.waiting.pop(name, None)
        self._watch(record)
        log.info(
            "started container %s (pid %d): %s",
            name,
            started.pid,
            " ".join(argv),
            extra=object_fields(pod, reason="Started"),
        )
        self.ctx.recorder.event(pod, NORMAL, "Started", f"Started container {name}")

    async def process_context(
        self, pod: Object, container: dict[str, Any]
    ) -> tuple[dict[str, str], dict[str, str], str]:
        """What a process of the container gets: the spec's variables, the full environment and the directory
        (its own start, or a `kubectl exec` in it)."""
        assert self.volumes is not None
        mounts = container_mounts(container, self.volumes)
        spec_env = await container_env(pod, container, self.ctx.fetch, self.ctx.node_capacity)
        hostname = str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])
        env = runtime_mod.process_env(spec_env, mounts, hostname, runtime_mod.search_path(spec_env))
        return spec_env, env, runtime_mod.working_dir(container, mounts, self.dir.path)

    async def _start_virtual(
        self, pod: Object, container: dict[str, Any], kind: str, *, init: bool, plan: _Plan
    ) -> None:
        name = str(container["name"])
        now = now_rfc3339()
        record = ContainerRecord(name=name, init=init, virtual=True, started_at=now)
        if kind == virtual.CONSOLE_LOG:
            assert self.volumes is not None
            # The launcher's libvirt writes this file; serving it as the log spares a tail process per VM.
            record.extra["logfile"] = virtual.console_log_path(container, container_mounts(container, self.volumes))
            record.virtual_state = "running"
        elif kind != virtual.BINARY_COPY:
            image = str(container.get("image") or "")
            result = self.ctx.puller.status(self.uid, name, image, virtual.pull_policy(container), kind)
            if result.path is None:
                if result.reason != self.waiting.get(name, ("", ""))[0] and result.reason != "ContainerCreating":
                    self.ctx.recorder.event(pod, WARNING, "Failed", f"Error: {result.reason}: {result.message}")
                self.waiting[name] = (result.reason, result.message)
                if result.retry_in is not None:
                    plan.requeue.append(result.retry_in)
                return
            record.image_id = str(result.path)
            if kind in (virtual.CONTAINER_DISK, virtual.KERNEL_BOOT):
                assert self.volumes is not None
                link = virtual.disk_link_path(container, container_mounts(container, self.volumes), kind)
                virtual.link_disk(result.path, link)
                record.link = link
                record.virtual_state = "running"
        if record.virtual_state != "running":
            record.terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
        self.dir.log_file(name).parent.mkdir(parents=True, exist_ok=True)
        self.dir.log_file(name).touch()
        self.records[name] = record
        self.dir.save_record(record)
        self.waiting.pop(name, None)
        self.ctx.recorder.event(pod, NORMAL, "Started", f"Started container {name}")

    def _complete_virtual(self, record: ContainerRecord, now: str) -> None:
        record.virtual_state = ""
        record.terminated = {"exitCode": 0, "reason": "Completed", "startedAt": record.started_at, "finishedAt": now}
        self.dir.save_record(record)

    def _end_sidecars(self, pod: Object) -> None:
        """The pod has finished: its sidecars end too, as the kubelet stops them after the regular containers."""
        for container in (pod.get("spec") or {}).get("initContainers") or []:
            record = self.records.get(str(container["name"]))
            if not virtual.is_restartable(container) or record is None or record.terminated is not None:
                continue
            if record.virtual and record.virtual_state == "running":
                self._complete_virtual(record, now_rfc3339())
            elif self.alive(record) and not record.extra.get("stop_sent"):
                record.extra["stop_sent"] = True
                self.dir.save_record(record)
                self.ctx.runtime.terminate(record.pid, record.ticks)

    def _watch(self, record: ContainerRecord) -> None:
        if record.virtual or record.terminated is not None or record.pid <= 0:
            return
        uid = self.uid
        self.ctx.runtime.watcher.watch(record.pid, record.ticks, lambda: self.ctx.enqueue(uid))

    # ------------------------------------------------------------------------------------------------ deletion

    async def _sync_terminating(self, pod: Object) -> float | None:
        """SIGTERM, SIGKILL after the grace period, then the final status and the DELETE the kubelet sends."""
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_PERIOD_SECONDS)
        deadline = time.monotonic() + max(int(grace), 0)
        self.kill_deadline = deadline if self.kill_deadline is None else min(self.kill_deadline, deadline)
        self.ctx.puller.forget(self.uid)
        if self.ctx.tokens is not None:
            self.ctx.tokens.forget(self.uid)
        if not self.sigterm_sent:
            self.sigterm_sent = True
            now = now_rfc3339()
            sidecars = sidecar_names(pod)
            for record in self.records.values():
                if record.virtual and record.virtual_state == "running":
                    # A virtual sidecar (the guest's console log) lasts until the processes are gone, below.
                    if record.name not in sidecars:
                        self._complete_virtual(record, now)
                elif self.alive(record):
                    self.ctx.runtime.terminate(record.pid, record.ticks)
            if self.any_alive():
                log.info("killing pod with grace period %ss", grace, extra=object_fields(pod, reason="Killing"))
                self.ctx.recorder.event(pod, NORMAL, "Killing", "Stopping container(s)")
        if self.any_alive() and time.monotonic() >= self.kill_deadline and not self.sigkill_sent:
            self.sigkill_sent = True
            log.info("grace period over: SIGKILL", extra=object_fields(pod, reason="Killing"))
            for record in self.records.values():
                if self.alive(record):
                    self.ctx.runtime.kill(record.pid, record.ticks)
        await self._refresh()
        if self.any_alive():
            await self._report(pod, _Plan(), killed=False)
            return 0.5 if self.sigkill_sent else max(0.05, self.kill_deadline - time.monotonic())
        if self.delete_sent:
            return RESYNC_SECONDS
        self._end_sidecars(pod)
        # The sandbox goes before the pod is reported finished, as the kubelet's killPod stops it: a finished pod
        # may be removed from the API at once (virt-controller deletes it again), and its network must be gone by then.
        await self.sandbox.teardown()
        await self._report(pod, _Plan(), killed=True)
        try:
            await self.ctx.client.delete(
                PODS, meta["name"], meta.get("namespace"), grace_period_seconds=0, preconditions={"uid": self.uid}
            )
        except (NotFound, Conflict):
            pass  # already gone, or a new pod of the same name
        self.delete_sent = True
        log.info("pod terminated and deleted", extra=object_fields(pod, reason="Deleted"))
        return RESYNC_SECONDS

    async def _cleanup_vanished(self) -> None:
        """The pod is gone from the API (force deletion): kill whatever still runs, at once, and forget it."""
        alive = [r for r in self.records.values() if self.alive(r)]
        for record in alive:
            self.ctx.runtime.kill(record.pid, record.ticks)
        if alive:
            log.info("pod %s vanished from the API: killed %d processes", self.uid, len(alive))
        deadline = time.monotonic() + 5.0
        # Processes we did not start give no event to wait on: /proc is polled.
        while self.any_alive() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        for record in self.records.values():
            if record.pid > 0:
                self.ctx.runtime.reap(record.pid)
        await self._kill_strays()
        self.ctx.puller.forget(self.uid)
        if self.ctx.tokens is not None:
            self.ctx.tokens.forget(self.uid)
        await self.sandbox.teardown()
        self.dir.remove()
        if self.ctx.cpu_manager is not None:
            self.ctx.cpu_manager.release(self.uid)
        shutil.rmtree(pod_layout.short_runtime_dir(self.uid), ignore_errors=True)
        self.finished = True

    # ------------------------------------------------------------------------------------------------ status

    def statuses(self, pod: Object, plan: _Plan, *, killed: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        default = "ContainerCreating" if plan.initialized and not plan.init_failed else "PodInitializing"
        return container_statuses(
            pod,
            self.records,
            self.waiting,
            self.last_seen_running,
            self.uid,
            main_default_reason=default,
            killed=killed,
        )

    async def _report(self, pod: Object, plan: _Plan, *, killed: bool) -> None:
        """Write the status when it changed; on a conflict, recompute against the current pod and retry."""
        for _ in range(STATUS_WRITE_ATTEMPTS):
            inits, mains = self.statuses(pod, plan, killed=killed)
            desired = pod_status.desired_status(
                pod,
                inits,
                mains,
                gating_inits=gating_init_statuses(pod, inits),
                killed=killed,
                sandbox_ready=self.dir.exists() and not self.sandbox.problem,
                now=now_rfc3339(),
                pod_ips=self.sandbox.reported_ips(),
            )
            if not pod_status.status_differs(pod.get("status") or {}, desired):
                return
            meta = pod["metadata"]
            patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": desired}
            try:
                self.latest = await self.ctx.client.patch(
                    PODS, meta["name"], patch, meta.get("namespace"), subresource="status"
                )
                if desired["phase"] != (pod.get("status") or {}).get("phase"):
                    log.info("pod is %s", desired["phase"], extra=object_fields(pod, phase=desired["phase"]))
                return
            except NotFound:
                return
            except Conflict:
                fresh = await self._get(pod)
                if fresh is None:
                    return
                pod = fresh
        raise Conflict({"message": "pod status kept changing under the node agent"}, 409)

    async def _get(self, pod: Object) -> Object | None:
        meta = pod["metadata"]
        fresh = await self.ctx.client.get_or_none(PODS, meta["name"], meta.get("namespace"))
        return fresh if fresh is not None and fresh["metadata"].get("uid") == self.uid else None
