"""What every benchmark shares: the machine it ran on, percentiles, RSS, and an API server process to measure."""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.apiserver_process import APIServerProcess

from bench.profiled import component_argv


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


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: the machine is shared, so every figure carries them."""
    return [round(x, 2) for x in os.getloadavg()]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def start_apiserver(*extra_args: str, profile: str | None = None) -> APIServerProcess:
    """`pykubevirt apiserver` in a temporary directory, stopped by its PID; `profile` runs it under bench.profiled."""
    data_dir = Path(tempfile.mkdtemp(prefix="pykubevirt-bench-")) / "data"
    return APIServerProcess(data_dir, *extra_args, argv=functools.partial(component_argv, profile)).start()


def stop_apiserver(server: APIServerProcess) -> None:
    """Stop the server and remove its data (an 8,000-VM run leaves 0.7 GiB of database); its log is kept."""
    server.stop()
    shutil.rmtree(server.data_dir, ignore_errors=True)
    log(f"the API server's log: {server.log_path}")


def cluster_env(data_dir: Path, home: Path, listen: str) -> dict[str, str]:
    """The environment a user's shell has for a `pykubevirt up` cluster: its kubeconfig, data dir, listen address and
    this venv's commands first; nothing of the caller's own cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PYKUBEVIRT_"))}
    env.update(
        KUBECONFIG=str(data_dir / "apiserver" / "kubeconfig"),
        HOME=str(home),
        PYKUBEVIRT_DATA_DIR=str(data_dir),
        PYKUBEVIRT_LISTEN=listen,
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    return env
