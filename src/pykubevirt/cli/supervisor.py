"""`pykubevirt supervise`: the process `pykubevirt up` leaves running. It starts the embedded cluster's components,
restarts any that exits, keeps each one's mirror pod up to date, and stops them all on SIGTERM (`pykubevirt down`).

Guests are not components: launchers belong to the node agents' pods and outlive the supervisor, so `down`/`up`
leaves running VMs running. `down --all` (a `stop-all` marker next to the pid file) also kills every pod and guest.
A node that stops heartbeating is fenced (cli/node_fence.py): its processes are killed before its guests move.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pykubevirt import __version__
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.cli.cluster_layout import ClusterLayout, Component, node_count_file
from pykubevirt.cli.component_client import set_on_signals
from pykubevirt.cli.component_process import ComponentProcess
from pykubevirt.cli.kubeconfig_command import write_node_kubeconfig
from pykubevirt.cli.mirror_pods import MirrorPods
from pykubevirt.cli.node_fence import DEFAULT_FENCE_GRACE_SECONDS, NodeFencer
from pykubevirt.cli.readdressed_nodes import retire_with_kubeconfig
from pykubevirt.cli.startup_error import last_error_line

log = logging.getLogger("pykubevirt.supervisor")

# A component that ran this long before exiting is restarted at once; quicker exits back off up to MAX_BACKOFF.
HEALTHY_RUN_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 30.0
POLL_SECONDS = 0.2


@dataclass
class Supervised:
    """A component, its current process, and its restart history."""

    component: Component
    process: ComponentProcess
    started_at: str = ""
    started_monotonic: float = 0.0
    restarts: int = 0
    failures_in_a_row: int = 0
    next_start: float = 0.0
    last_exit: dict[str, Any] = field(default_factory=dict)
    # Held down by a fence: not restarted until the fencer lets go.
    held: bool = False
    # Where this run's output starts in the (appended) log: its `error: ` line says why it exited.
    log_offset: int = 0

    def failure(self) -> str | None:
        """The one-line cause this run of the component printed before exiting, if it printed one."""
        try:
            with self.component.log_file.open("rb") as log:
                log.seek(self.log_offset)
                return last_error_line(log.read().decode(errors="replace"))
        except OSError:
            return None

    def state(self) -> dict[str, Any]:
        running = self.process.running()
        return {
            "pid": self.process.pid if running else 0,
            "running": running,
            "restarts": self.restarts,
            "startedAt": self.started_at,
            "lastExit": self.last_exit,
            "node": self.component.node,
            "fenced": self.held,
            "log": str(self.component.log_file),
        }


class Supervisor:
    """Runs the layout's components until stopped."""

    def __init__(self, layout: ClusterLayout, *, fence_grace: float = DEFAULT_FENCE_GRACE_SECONDS) -> None:
        self.layout = layout
        self.components = [Supervised(c, ComponentProcess(c)) for c in layout.components()]
        self.mirror_pods = MirrorPods(layout)
        # A grace of 0 turns fencing off: silent nodes are then only marked unresponsive, as in KubeVirt.
        self.fencer = NodeFencer(layout, self.components, grace=fence_grace) if fence_grace > 0 else None
        self._stop = asyncio.Event()
        self._lock: IO[str] | None = None

    @property
    def pid_file(self) -> Path:
        return self.layout.run_dir / "supervisor.pid"

    @property
    def state_file(self) -> Path:
        return self.layout.run_dir / "state.json"

    @property
    def stop_all_marker(self) -> Path:
        return self.layout.run_dir / "stop-all"

    def _claim(self) -> None:
        """One supervisor per data directory: an flock held for the supervisor's life."""
        self.layout.run_dir.mkdir(parents=True, exist_ok=True)
        lock = (self.layout.run_dir / "supervisor.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise RuntimeError(f"another supervisor runs the cluster in {self.layout.data_dir}") from None
        self._lock = lock
        self.pid_file.write_text(f"{os.getpid()}\n")
        node_count_file(self.layout.data_dir).write_text(f"{self.layout.node_count}\n")
        self.stop_all_marker.unlink(missing_ok=True)

    def _start(self, entry: Supervised) -> None:
        try:
            entry.log_offset = entry.component.log_file.stat().st_size
        except OSError:
            entry.log_offset = 0
        entry.process = ComponentProcess(entry.component).start()
        entry.started_at = now_rfc3339()
        entry.started_monotonic = time.monotonic()
        log.info(
            "started %s (pid %d)", entry.component.name, entry.process.pid, extra={"component": entry.component.name}
        )

    async def run(self) -> int:
        self._claim()
        set_on_signals(self._stop)
        log.info("supervising the cluster in %s (%d node(s))", self.layout.data_dir, self.layout.node_count)
        try:
            apiserver, *others = self.components
            self._start(apiserver)
            await self._wait_for_apiserver(apiserver)
            if self._stop.is_set():
                return 0
            for node in self.layout.node_names:
                write_node_kubeconfig(self.layout, node)
            if self.layout.cluster_cidr:
                await retire_with_kubeconfig(Path(self.layout.kubeconfig), self.layout.cluster_cidr)
            for entry in others:
                self._start(entry)
            self._write_state()
            tasks = [asyncio.create_task(self.mirror_pods.run(self.states))]
            if self.fencer is not None:
                tasks.append(asyncio.create_task(self.fencer.run()))
            try:
                await self._watch()
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
        finally:
            await self._shutdown()
        return 0

    async def _wait_for_apiserver(self, entry: Supervised) -> None:
        """The others read kubeconfigs the API server writes once it serves."""
        marker = self.layout.component_kubeconfig("scheduler")
        started = time.time()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self._stop.is_set():
            if marker.exists() and marker.stat().st_mtime >= started - 1 and entry.process.running():
                return
            if not entry.process.running():
                cause = entry.failure()
                raise RuntimeError(cause or f"the API server exited; see {entry.component.log_file}")
            await asyncio.sleep(0.05)
        if not self._stop.is_set():
            raise RuntimeError("the API server did not start within 60 s")

    async def _watch(self) -> None:
        while not self._stop.is_set():
            changed = False
            now = time.monotonic()
            for entry in self.components:
                if entry.process.running() or entry.held:
                    continue
                if entry.next_start == 0.0:
                    changed = True
                    self._record_exit(entry, now)
                if now >= entry.next_start:
                    entry.restarts += 1
                    entry.next_start = 0.0
                    self._start(entry)
                    changed = True
            if changed:
                self._write_state()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), POLL_SECONDS)

    def _record_exit(self, entry: Supervised, now: float) -> None:
        code = entry.process.exit_code()
        ran = now - entry.started_monotonic
        entry.failures_in_a_row = 0 if ran >= HEALTHY_RUN_SECONDS else entry.failures_in_a_row + 1
        delay = 0.0 if entry.failures_in_a_row <= 1 else min(MAX_BACKOFF_SECONDS, 2.0 ** (entry.failures_in_a_row - 1))
        entry.next_start = now + delay
        entry.last_exit = {"exitCode": code, "finishedAt": now_rfc3339(), "ranSeconds": round(ran, 1)}
        cause = entry.failure()
        if cause:
            entry.last_exit["message"] = cause
        log.warning(
            "%s exited with code %s after %.1fs%s; restarting in %.0fs",
            entry.component.name,
            code,
            ran,
            f" ({cause})" if cause else "",
            delay,
            extra={"component": entry.component.name},
        )

    def states(self) -> dict[str, dict[str, Any]]:
        return {entry.component.name: entry.state() for entry in self.components}

    def _write_state(self) -> None:
        document = {
            "supervisorPid": os.getpid(),
            "version": __version__,
            "dataDir": str(self.layout.data_dir),
            "listen": self.layout.listen,
            "nodes": self.layout.node_names,
            "kubeconfig": str(self.layout.kubeconfig),
            "components": self.states(),
        }
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(temporary, self.state_file)

    async def _shutdown(self) -> None:
        """Stop the components, nodes first and the API server last; with `down --all`, every guest too."""
        stop_all = self.stop_all_marker.exists()
        for entry in reversed(self.components):
            if entry.process.running():
                log.info("stopping %s (pid %d)", entry.component.name, entry.process.pid)
                await asyncio.to_thread(entry.process.stop)
        if stop_all:
            from pykubevirt.node.teardown import kill_node_pods

            for node in self.layout.node_names:
                killed = kill_node_pods(self.layout.node_dir(node))
                log.info("stopped %d pod processes and guests on %s", killed, node)
            self.stop_all_marker.unlink(missing_ok=True)
        self.state_file.unlink(missing_ok=True)
        self.pid_file.unlink(missing_ok=True)
        log.info("cluster stopped")
