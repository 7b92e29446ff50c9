"""Embedded API server throughput and latency: creates/s (VMs, with admission) with fsync and group commit and,
in the same run, without fsync (`--unsafe-no-fsync`, the behaviour before durability); fsyncs per write under 1, 10
and 100 concurrent writers (strace attached to the server); gets/s, LIST of 1,000 objects, watch delivery latency to
N watchers at a fixed write rate, VM status updates/s (PUT /status), and RSS with many objects stored.

Run: .venv/bin/python -m bench.apiserver [--creates 1000 --gets 5000 --watchers 10 --rate 100 --rss-objects 10000]
Prints progress on stderr and one JSON line with the figures on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.fsync_count import STRACE, counting_fsyncs

from bench.arguments import at_least, positive
from bench.harness import log, machine, percentile, rss_mib, start_apiserver, stop_apiserver
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import CONFIG_MAPS, NAMESPACES, VIRTUAL_MACHINES

VM = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": ""},
    "spec": {
        "runStrategy": "Halted",
        "template": {
            "spec": {
                "domain": {
                    "memory": {"guest": "128Mi"},
                    "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                },
                "volumes": [{"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}],
            }
        },
    },
}


async def bounded(concurrency: int, jobs: list[Any]) -> list[float]:
    """Run coroutine factories with at most `concurrency` in flight; returns each one's latency."""
    semaphore = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(job: Any) -> None:
        async with semaphore:
            started = time.perf_counter()
            await job()
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(one(j) for j in jobs))
    return latencies


def vm(i: int) -> dict[str, Any]:
    body = json.loads(json.dumps(VM))
    body["metadata"]["name"] = f"vm-{i:05d}"
    return body


async def create_vms(args: argparse.Namespace, client: KubeClient, prefix: str) -> dict[str, Any]:
    """Create `--creates` VMs with `--concurrency` in flight: creates/s and latency percentiles."""
    log(f"creating {args.creates} VMs with {args.concurrency} in flight ({prefix})")
    started = time.perf_counter()
    latencies = await bounded(
        args.concurrency, [lambda i=i: client.create(VIRTUAL_MACHINES, vm(i), "bench") for i in range(args.creates)]
    )
    elapsed = time.perf_counter() - started
    return {
        f"{prefix}_creates_per_s": round(args.creates / elapsed, 1),
        f"{prefix}_create_p50_ms": round(percentile(latencies, 50) * 1000, 2),
        f"{prefix}_create_p99_ms": round(percentile(latencies, 99) * 1000, 2),
    }


async def measure_without_fsync(args: argparse.Namespace) -> dict[str, Any]:
    """The same creates on a server started with --unsafe-no-fsync (a commit per write, no fsync): the baseline."""
    server = start_apiserver("--unsafe-no-fsync")
    try:
        client = client_for(server)
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
        figures = await create_vms(args, client, "vm_no_fsync")
        await client.close()
        return figures
    finally:
        stop_apiserver(server)


async def fsyncs_per_write(server: APIServerProcess, client: KubeClient, writes: int) -> dict[str, Any]:
    """fsync+fdatasync calls of the server per acknowledged ConfigMap create under 1, 10 and 100 writers."""
    if STRACE is None:
        return {"fsyncs_per_write": "strace not installed"}
    figures: dict[str, Any] = {}
    for writers in (1, 10, 100):
        log(f"counting fsyncs over {writes} creates from {writers} concurrent writers")
        names = [f"sync-{writers}-{i:05d}" for i in range(writes)]
        jobs = [
            lambda name=name: client.create(
                CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}, "bench"
            )
            for name in names
        ]
        with counting_fsyncs(server.pid) as count:
            await bounded(writers, jobs)
        figures[f"fsyncs_per_write_{writers}_writers"] = round(count.calls / writes, 3)
    return figures


async def measure(args: argparse.Namespace, server: APIServerProcess) -> dict[str, Any]:
    client = client_for(server)
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    figures: dict[str, Any] = await create_vms(args, client, "vm")
    figures.update(await fsyncs_per_write(server, client, args.fsync_writes))

    log(f"updating the status of {args.creates} VMs")
    created = await _all_vms(client)
    started = time.perf_counter()
    latencies = await bounded(
        args.concurrency,
        [
            lambda body=body: client.update_status(
                VIRTUAL_MACHINES, {**body, "status": {"printableStatus": "Stopped", "created": False}}
            )
            for body in created
        ],
    )
    figures["vm_status_updates_per_s"] = round(len(created) / (time.perf_counter() - started), 1)
    figures["vm_status_update_p99_ms"] = round(percentile(latencies, 99) * 1000, 2)

    log(f"getting {args.gets} VMs")
    started = time.perf_counter()
    await bounded(
        args.concurrency,
        [lambda i=i: client.get(VIRTUAL_MACHINES, f"vm-{i % args.creates:05d}", "bench") for i in range(args.gets)],
    )
    figures["gets_per_s"] = round(args.gets / (time.perf_counter() - started), 1)

    log(f"listing {args.creates} VMs {args.lists} times")
    list_latencies = []
    for _ in range(args.lists):
        started = time.perf_counter()
        result = await client.list(VIRTUAL_MACHINES, "bench")
        list_latencies.append(time.perf_counter() - started)
        assert len(result["items"]) == args.creates
    figures["list_objects"] = args.creates
    figures["list_p50_ms"] = round(percentile(list_latencies, 50) * 1000, 1)

    figures.update(await watch_latency(args, client))

    log(f"filling the store to {args.rss_objects} objects")
    have = args.creates
    await bounded(
        args.concurrency,
        [
            lambda i=i: client.create(
                CONFIG_MAPS,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"fill-{i:05d}"},
                    "data": {"k": "v" * 200},
                },
                "bench",
            )
            for i in range(max(0, args.rss_objects - have))
        ],
    )
    figures["rss_objects"] = args.rss_objects
    figures["apiserver_rss_mib"] = round(rss_mib(server.pid), 1)
    await client.close()
    return figures


async def _all_vms(client: KubeClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.list(VIRTUAL_MACHINES, "bench"))["items"]
    return items


async def watch_latency(args: argparse.Namespace, writer: KubeClient) -> dict[str, Any]:
    """Latency from a write's acknowledgement to its arrival at each of N watchers, at a fixed write rate."""
    log(f"{args.watchers} watchers, {args.rate} writes/s for {args.watch_seconds}s")
    listing = await writer.list(CONFIG_MAPS, "bench")
    revision = listing["metadata"]["resourceVersion"]
    acked: dict[str, float] = {}
    acked_events: dict[str, asyncio.Event] = {}
    arrivals: list[float] = []
    total = int(args.rate * args.watch_seconds)
    watchers_done = 0
    clients = [KubeClient(writer.config, qps=0) for _ in range(args.watchers)]

    async def watcher(client: KubeClient) -> None:
        nonlocal watchers_done
        seen = 0
        async for event in client.watch(
            CONFIG_MAPS, "bench", resource_version=revision, timeout_seconds=int(args.watch_seconds) + 30
        ):
            name = event.object["metadata"].get("name", "")
            if event.type == "ADDED" and name.startswith("watch-"):
                now = time.perf_counter()
                # The event may overtake the writer's acknowledgement; wait for the send time to be recorded.
                await acked_events.setdefault(name, asyncio.Event()).wait()
                arrivals.append(max(0.0, now - acked[name]))
                seen += 1
                if seen == total:
                    break
        watchers_done += 1

    tasks = [asyncio.create_task(watcher(c)) for c in clients]
    await asyncio.sleep(0.5)
    interval = 1.0 / args.rate
    start = time.perf_counter()
    for i in range(total):
        due = start + i * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        name = f"watch-{i:05d}"
        sent = time.perf_counter()
        await writer.create(CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}, "bench")
        # Watchers may see the event before the writer sees its acknowledgement; count from when it was sent then.
        acked[name] = sent
        acked_events.setdefault(name, asyncio.Event()).set()
    achieved = total / (time.perf_counter() - start)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    for c in clients:
        await c.close()
    return {
        "watchers": args.watchers,
        "watch_write_rate": round(achieved, 1),
        "watch_latency_p50_ms": round(percentile(arrivals, 50) * 1000, 2),
        "watch_latency_p99_ms": round(percentile(arrivals, 99) * 1000, 2),
        "watch_events_delivered": len(arrivals),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--creates", type=at_least(1), default=1000)
    parser.add_argument("--gets", type=at_least(1), default=5000)
    parser.add_argument("--lists", type=at_least(1), default=20)
    parser.add_argument("--concurrency", type=at_least(1), default=16)
    parser.add_argument("--watchers", type=at_least(1), default=10)
    parser.add_argument("--rate", type=positive, default=100.0)
    parser.add_argument("--watch-seconds", type=positive, default=10.0)
    parser.add_argument("--rss-objects", type=at_least(0), default=10000)
    parser.add_argument(
        "--fsync-writes", type=at_least(1), default=300, help="creates per writer count when counting fsyncs"
    )
    args = parser.parse_args()
    figures = asyncio.run(measure_without_fsync(args))
    server = start_apiserver()
    try:
        figures.update(asyncio.run(measure(args, server)))
    finally:
        stop_apiserver(server)
    print(json.dumps({"bench": "apiserver", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
