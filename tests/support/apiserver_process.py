"""Runs the embedded API server as a real process for tests, the way users and components meet it."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from pykubevirt.cli.cluster_layout import pykubevirt_argv

KUBECTL = "/usr/bin/kubectl"


class APIServerProcess:
    """`pykubevirt apiserver` on 127.0.0.1 with a free port; started by the test, stopped by its PID."""

    def __init__(self, data_dir: Path, *extra_args: str, argv: Callable[..., Sequence[str]] = pykubevirt_argv) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args
        # How the command is run: pykubevirt's own argv, or a bench's (under a profiler).
        self.argv = argv
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.log_path = data_dir.parent / f"{data_dir.name}-apiserver.log"

    def start(self, port: int = 0, timeout: float = 30.0) -> APIServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = ("apiserver", "--data-dir", str(self.data_dir), "--listen", f"127.0.0.1:{port}", *self.extra_args)
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(self.argv(*argv), stdout=subprocess.PIPE, stderr=log, text=True)
        banner = r"listening on (https://\S+)"
        self.url = wait_for_banner(self.process, banner, "the API server", self.log_path, timeout)
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    def token(self) -> str:
        config = yaml.safe_load(self.kubeconfig.read_text())
        return str(config["users"][0]["user"]["token"])

    def token_of(self, username: str) -> str:
        """The bearer token the server issued to `username` (its components' service accounts are in tokens.csv)."""
        with (self.data_dir / "tokens.csv").open(newline="") as table:
            for row in csv.reader(table):
                if len(row) > 1 and row[1] == username:
                    return row[0]
        raise KeyError(username)

    def ca_file(self) -> Path:
        return self.data_dir / "pki" / "ca.crt"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None


def wait_for_banner(process: subprocess.Popen[str], pattern: str, what: str, log_path: Path, timeout: float) -> str:
    """The first group of `pattern` in the line a started component prints once it serves."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{what} exited: see {log_path}")
        match = re.search(pattern, line)
        if match:
            return match.group(1)
    raise TimeoutError(f"{what} did not start")


def kubectl_env(server: APIServerProcess, home: Path) -> dict[str, str]:
    """Environment for /usr/bin/kubectl: this server's kubeconfig and a fresh HOME (empty discovery cache)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update({"KUBECONFIG": str(server.kubeconfig), "HOME": str(home)})
    return env


def kubectl(
    server: APIServerProcess, home: Path, *args: str, stdin: str | None = None, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [KUBECTL, *args],
        env=kubectl_env(server, home),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result
