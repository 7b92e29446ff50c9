"""Throughput of the two handlers' migration proxies, TLS on the TCP leg against plain TCP (spliced).

One process runs both proxies as the handlers do (the source's unix socket → TCP on loopback → the target's proxy →
a unix socket), a blocking writer sends `--mib` MiB into the source's socket and a blocking reader drains the target's
socket; the figure is MiB moved over the time from connect to the reader's end of stream.

    python -m bench.migration_proxy --mib 256 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import tempfile
import threading
import time
from pathlib import Path

from bench.arguments import at_least
from bench.harness import log, machine
from bench.vm_start import stats
from pykubevirt.handler.certificates import certificates_watch
from pykubevirt.handler.migration_proxy import MigrationProxy, ProxySet, dial_tcp, dial_unix

BLOCK = bytes(range(256)) * 4096  # 1 MiB


def sink(listener: socket.socket, received: list[int]) -> None:
    conn, _ = listener.accept()
    buffer = bytearray(1024 * 1024)
    view = memoryview(buffer)
    total = 0
    with conn:
        while count := conn.recv_into(view):
            total += count
    received.append(total)


def send(path: str, mib: int) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        for _ in range(mib):
            sock.sendall(BLOCK)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def one_run(directory: Path, mib: int, tls: bool) -> tuple[float, float]:
    """MiB/s of one transfer of `mib` MiB through the two proxies, and the process's CPU seconds per GiB moved
    (the writer and the reader included; a figure the host's other load does not change much)."""
    contexts = certificates_watch(str(directory / "pki"), create=True).current() if tls else None
    target_path = str(directory / "target.sock")
    source_path = str(directory / "source.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(target_path)
    listener.listen(1)
    received: list[int] = []
    reader = threading.Thread(target=sink, args=(listener, received))
    reader.start()
    proxies = ProxySet()
    server = contexts.server if contexts else None
    client = contexts.client if contexts else None
    target = await proxies.add(MigrationProxy(dial_unix(target_path), address="127.0.0.1", tls=server))
    await proxies.add(MigrationProxy(dial_tcp("127.0.0.1", target.port, client), path=source_path))
    started, cpu = time.monotonic(), cpu_seconds()
    writer = threading.Thread(target=send, args=(source_path, mib))
    writer.start()
    await asyncio.to_thread(reader.join)
    elapsed, cpu = time.monotonic() - started, cpu_seconds() - cpu
    await asyncio.to_thread(writer.join)
    await proxies.stop()
    listener.close()
    os.unlink(target_path)
    if received != [mib * 1024 * 1024]:
        raise RuntimeError(f"received {received} bytes, sent {mib} MiB")
    return mib / elapsed, cpu / (mib / 1024)


async def run(mib: int, runs: int) -> dict[str, object]:
    figures: dict[str, list[float]] = {"plain": [], "tls": []}
    cpu: dict[str, list[float]] = {"plain": [], "tls": []}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pkv-bench-proxy-") as tmp:
        for index in range(1, runs + 1):
            # Alternate, so a change in the machine's load falls on both.
            for mode in ("plain", "tls"):
                rate, per_gib = await one_run(Path(tmp), mib, mode == "tls")
                figures[mode].append(rate)
                cpu[mode].append(per_gib)
                log(f"run {index}/{runs} {mode}: {rate:.0f} MiB/s, {per_gib:.2f} CPU s/GiB")
    return {
        "bench": "migration_proxy",
        "machine": machine(),
        "mib": mib,
        "plain_mib_s": stats(figures["plain"]),
        "tls_mib_s": stats(figures["tls"]),
        "plain_cpu_s_per_gib": stats(cpu["plain"]),
        "tls_cpu_s_per_gib": stats(cpu["tls"]),
        "load_average_before": load_before,
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=at_least(1), default=256)
    parser.add_argument("--runs", type=at_least(1), default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.mib, args.runs))))


if __name__ == "__main__":
    main()
