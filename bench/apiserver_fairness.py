"""Fairness of the embedded API server: PATCH latency alone, then while clients keep listing many VMs.

A large LIST must not stall other requests (aim: PATCH p99 under 50 ms while two clients list 5,000 VMs). The
listers are curl processes, so the bench's own event loop times only the PATCHes.
Run: .venv/bin/python -m bench.apiserver_fairness [--objects 5000 --listers 2 --patches 300]
Prints progress on stderr and one JSON line with the figures on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from tests.support.control_plane import client_for

from bench.apiserver import bounded, vm
from bench.arguments import at_least
from bench.harness import log, machine, percentile, start_apiserver, stop_apiserver
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import NAMESPACES, VIRTUAL_MACHINES


async def patch_latencies(client: KubeClient, count: int, target: str) -> list[float]:
    """`count` merge patches of one VM's label, one after another; each one's latency."""
    latencies = []
    for i in range(count):
        started = time.perf_counter()
        await client.patch(VIRTUAL_MACHINES, target, {"metadata": {"labels": {"round": str(i)}}}, "bench")
        latencies.append(time.perf_counter() - started)
    return latencies


async def keep_listing(client: KubeClient, ca_file: str, stop: asyncio.Event, latencies: list[float]) -> None:
    """LIST the VMs with curl until `stop`: a client of its own process, so reading the bodies loads neither this
    process's event loop (which times the PATCHes) nor the server's."""
    url = client.config.server + VIRTUAL_MACHINES.path("bench")
    argv = ["curl", "-sf", "--cacert", ca_file, "-H", f"Authorization: Bearer {client.config.bearer_token()}"]
    while not stop.is_set():
        started = time.perf_counter()
        curl = await asyncio.create_subprocess_exec(*argv, "-o", "/dev/null", url)
        assert await curl.wait() == 0
        latencies.append(time.perf_counter() - started)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    server = start_apiserver()
    try:
        client = client_for(server)
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        log(f"creating {args.objects} VMs")
        await bounded(32, [lambda i=i: client.create(VIRTUAL_MACHINES, vm(i), "bench") for i in range(args.objects)])
        target = vm(0)["metadata"]["name"]

        log(f"{args.patches} PATCHes with nothing else going on")
        idle = await patch_latencies(client, args.patches, target)

        log(f"{args.patches} PATCHes while {args.listers} clients list {args.objects} VMs")
        stop = asyncio.Event()
        list_latencies: list[float] = []
        ca_file = str(server.ca_file())
        tasks = [asyncio.create_task(keep_listing(client, ca_file, stop, list_latencies)) for _ in range(args.listers)]
        # A list of 5,000 VMs takes a few hundred ms: after a second both listers are busy.
        await asyncio.sleep(1.0)
        busy = await patch_latencies(client, args.patches, target)
        stop.set()
        await asyncio.gather(*tasks)
        await client.close()
        return {
            "objects": args.objects,
            "listers": args.listers,
            "patches": args.patches,
            "patch_p50_ms_idle": round(percentile(idle, 50) * 1000, 2),
            "patch_p99_ms_idle": round(percentile(idle, 99) * 1000, 2),
            "patch_p50_ms_listing": round(percentile(busy, 50) * 1000, 2),
            "patch_p99_ms_listing": round(percentile(busy, 99) * 1000, 2),
            "lists_completed": len(list_latencies),
            "list_p50_ms": round(percentile(list_latencies, 50) * 1000, 1),
        }
    finally:
        stop_apiserver(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=at_least(1), default=5000, help="VMs stored and listed")
    parser.add_argument("--listers", type=at_least(1), default=2, help="clients listing all the VMs in a loop")
    parser.add_argument(
        "--patches", type=at_least(1), default=300, help="PATCHes measured alone and then while listing"
    )
    args = parser.parse_args()
    figures = asyncio.run(measure(args))
    print(json.dumps({"bench": "apiserver_fairness", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
