"""What every benchmark shares: the machine it ran on, percentiles, RSS, and an API server process to measure."""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """The machine a figure was measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_kb = 0
    try:
        memory_kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
    except (OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def rss_mib(pid: int) -> float:
    """Resident set size of a process, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", status)
    return int(match.group(1)) / 1024 if match else float("nan")


def pss_mib(pid: int) -> float:
    """Proportional set size in MiB: shared pages (libvirt, Python) divided among the processes that map them."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return float("nan")
    match = re.search(r"^Pss:\s+(\d+) kB", rollup, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else float("nan")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class ServerProcess:
    """`pykubevirt apiserver` in a temporary directory, stopped by its PID."""

    def __init__(self, *extra: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pykubevirt-bench-"))
        self.extra = extra
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> ServerProcess:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pykubevirt.cli.main",
                "apiserver",
                "--data-dir",
                str(self.dir / "data"),
                "--listen",
                "127.0.0.1:0",
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=(self.dir / "apiserver.log").open("w"),
            text=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the API server exited; see {self.dir / 'apiserver.log'}")
            match = re.search(r"listening on (https://\S+)", line)
            if match:
                self.url = match.group(1)
                return self
        raise TimeoutError("the API server did not start")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kubeconfig(self, component: str = "") -> Path:
        return self.dir / "data" / (f"{component}.kubeconfig" if component else "kubeconfig")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
