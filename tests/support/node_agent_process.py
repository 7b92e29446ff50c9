"""Runs `pykubevirt node` as a real process for tests (started and stopped by its PID, never by name)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from tests.support.apiserver_process import wait_for_banner


class NodeAgentProcess:
    """One node agent process named `name`, keeping its pods under `data_dir`."""

    def __init__(
        self, kubeconfig: Path, name: str, data_dir: Path, images_dir: Path, extra: tuple[str, ...] = ()
    ) -> None:
        self.kubeconfig = kubeconfig
        self.extra = extra
        self.name = name
        self.data_dir = data_dir
        self.images_dir = images_dir
        self.process: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-node-{name}.log"

    def start(self, timeout: float = 30.0) -> NodeAgentProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = pykubevirt_argv(
            *("node", "--name", self.name, "--data-dir", str(self.data_dir)),
            *("--kubeconfig", str(self.kubeconfig), "--images-dir", str(self.images_dir)),
            *("--heartbeat-interval", "2"),
            *self.extra,
        )
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        wait_for_banner(self.process, r"container logs on (http://\S+)", "the node agent", self.log_path, timeout)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """End the agent (not its pods): SIGTERM, or SIGKILL after 10 s, or `sig` straight away."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None


def kill_leftover_pods(data_dir: Path) -> int:
    """SIGKILL every container process still recorded under `data_dir/pods` (test clean-up); returns how many."""
    from pykubevirt.node.teardown import kill_node_pods

    return kill_node_pods(data_dir)
