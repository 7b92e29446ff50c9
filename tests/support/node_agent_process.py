"""Runs `pykubevirt node` as a real process for tests (started and stopped by its PID, never by name)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# `pykubevirt node` through its own add_parser, so this works whether or not cli.main lists the command yet.
_ENTRY = (
    "import argparse, sys\n"
    "from pykubevirt.cli import node_command\n"
    "parser = argparse.ArgumentParser(prog='pykubevirt')\n"
    "node_command.add_parser(parser.add_subparsers(dest='command'))\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


class NodeAgentProcess:
    """One node agent process named `name`, keeping its pods under `data_dir`."""

    def __init__(self, kubeconfig: Path, name: str, data_dir: Path, images_dir: Path, *extra_args: str) -> None:
        self.kubeconfig = kubeconfig
        self.name = name
        self.data_dir = data_dir
        self.images_dir = images_dir
        self.extra_args = extra_args
        self.process: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-node-{name}.log"
        self.log_url = ""

    def start(self, timeout: float = 30.0) -> NodeAgentProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("a")
        argv = [
            *("node", "--name", self.name, "--data-dir", str(self.data_dir)),
            *("--kubeconfig", str(self.kubeconfig), "--images-dir", str(self.images_dir)),
            *("--heartbeat-interval", "2", *self.extra_args),
        ]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, *argv], stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the node agent exited: see {self.log_path}")
            match = re.search(r"container logs on (http://\S+)", line)
            if match:
                self.log_url = match.group(1)
                return self
        raise TimeoutError("the node agent did not start")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

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
