"""A free TCP port on loopback, for a server a test or bench starts with a fixed address.

The port is drawn below the kernel's ephemeral range (`ip_local_port_range`): a port from that range, free when
chosen and bound later by another process, can be taken in between as the local port of any outgoing connection
on the host. The stress run saw it: `pykubevirt up` found its `--listen` port held by a client socket of another
process. Each pytest-xdist worker draws from a slice of its own, so two workers never pick the same port.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

LOWEST = 20000


def ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_slice(worker: str, workers: int, low: int = LOWEST, high: int | None = None) -> range:
    """The ports `worker` (pytest-xdist's gw0, gw1, …; "" outside xdist) draws from: one slice a worker, one more
    for processes outside the workers (benches, a test run without xdist)."""
    high = ephemeral_low() if high is None else high
    size = max((high - low) // (workers + 1), 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else workers
    start = low + (index % (workers + 1)) * size
    return range(start, min(start + size, high))


def free_port() -> int:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if ephemeral_low() - LOWEST < 100 * (workers + 1):
        # A host whose ephemeral range starts this low leaves no ports outside it: the kernel's choice, as before.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    ports = port_slice(os.environ.get("PYTEST_XDIST_WORKER", ""), workers)
    for _ in range(500):
        port = random.choice(ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # a server of this worker, or a connection in TIME_WAIT, holds it
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
