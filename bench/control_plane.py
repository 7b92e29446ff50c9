"""Control-plane latency and cost with a simulated node (no QEMU): VM create → VMI Running, API writes per start,
virt-controller RSS. KubeVirt's equivalent is its KWOK density job (8,000 VMIs: p50 0.62 s, p99 1.9 s).

Run: .venv/bin/python -m bench.control_plane [--vms 1000 --rate 10] [--burst] [--profile controller.prof]
         [--profile-apiserver apiserver.prof]
The controller runs in a process of its own (so its RSS is its own); the simulated node and the load generator
share this process. One JSON line with the figures goes to stdout.

cProfile's per-call overhead overstates recursive Python walks; for where the time really goes, sample the running
processes instead: `.venv/bin/py-spy record --pid PID --format raw -o out.txt --duration 20`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import time
from collections import Counter
from typing import Any

from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for, simulated_node_client
from tests.support.simulated_node import SimulatedNode

from bench.arguments import at_least, positive
from bench.harness import cpu_seconds, load_average, log, machine, percentile, rss_mib, start_apiserver, stop_apiserver
from bench.profiled import component_argv, top
from pykubevirt.cli.garbage_collection import pace_garbage_collection
from pykubevirt.client.api import KubeClient
from pykubevirt.client.informer import EventHandler
from pykubevirt.client.resources import NAMESPACES, VIRTUAL_MACHINES


def vm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "spec": {
                    "domain": {
                        "memory": {"guest": "90Mi"},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}],
                }
            },
        },
    }


async def run(args: argparse.Namespace, server: APIServerProcess) -> dict[str, Any]:
    admin = client_for(server)
    handler = client_for(server, "virt-handler")
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    command = (
        *("virt-controller", "--kubeconfig", str(server.data_dir / "virt-controller.kubeconfig")),
        "--no-leader-election",
        *(("--workers", str(args.workers)) if args.workers else ()),
    )
    controller = subprocess.Popen(  # noqa: ASYNC220 - started once, before the measured part
        component_argv(args.profile, *command),
        stderr=(server.data_dir.parent / "virt-controller.log").open("w"),
    )
    node_client = await simulated_node_client(server, admin)
    node = await SimulatedNode(node_client, "node01", heartbeat=10.0, handler=handler).start()
    try:
        figures = await measured(args, server, admin, node, controller)
    finally:
        # Also when the run fails: start only what you stop.
        if controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            controller.wait(timeout=30)
        await node.stop()
        await admin.close()
        await handler.close()
        await node_client.close()
    return figures


async def measured(
    args: argparse.Namespace,
    server: APIServerProcess,
    admin: KubeClient,
    node: SimulatedNode,
    controller: subprocess.Popen[bytes],
) -> dict[str, Any]:
    """Create the VMs at the rate asked, wait for them to run, and work out the figures."""
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    everything_running = asyncio.Event()

    def observe(obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if (obj.get("status") or {}).get("phase") == "Running" and name not in running:
            running[name] = time.perf_counter()
            if len(running) >= args.vms:
                everything_running.set()

    # Running is seen on the simulated handler's own VMI watch: a watch of its own would be load no KubeVirt
    # deployment carries (KubeVirt's density job reads virt-controller's metrics instead).
    node.vmis.add_handler(EventHandler(on_add=observe, on_update=lambda _, o: observe(o)))
    await asyncio.sleep(2.0)
    (before, rejected_before), cpu_before = await api_write_counts(server), cpu_by_process(server, controller)
    log(f"creating {args.vms} VMs at {'full speed' if args.burst else f'{args.rate}/s'}")
    start = time.perf_counter()
    semaphore = asyncio.Semaphore(16)

    async def create(i: int) -> None:
        async with semaphore:
            name = f"vm-{i:05d}"
            created[name] = time.perf_counter()
            await admin.create(VIRTUAL_MACHINES, vm(name), "bench")

    tasks = []
    for i in range(args.vms):
        if not args.burst:
            delay = start + i / args.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(create(i)))
    await asyncio.gather(*tasks)
    try:
        await asyncio.wait_for(everything_running.wait(), timeout=args.timeout)
    except TimeoutError:
        log(f"only {len(running)} of {args.vms} VMIs reached Running within {args.timeout}s")
    all_running = max(running.values()) - start if len(running) == args.vms else float("nan")
    latencies = [running[n] - created[n] for n in running]
    await asyncio.sleep(1.0)
    after, rejected_after = await api_write_counts(server)
    controller_rss, cpu_after = rss_mib(controller.pid), cpu_by_process(server, controller)
    footprint = server_footprint(server)
    writes, rejected = after - before, rejected_after - rejected_before
    started = max(1, len(running))
    return {
        "vms": args.vms,
        "rate": "burst" if args.burst else args.rate,
        "running": len(running),
        "create_to_running_p50_s": round(percentile(latencies, 50), 3),
        "create_to_running_p95_s": round(percentile(latencies, 95), 3),
        "create_to_running_p99_s": round(percentile(latencies, 99), 3),
        "all_running_after_s": round(all_running, 2),
        # In creation order, so a control plane that falls behind as its caches grow shows it.
        "create_to_running_p99_by_tenth_s": [round(percentile(part, 99), 2) for part in tenths(created, running)],
        "cpu_s": {k: round(cpu_after[k] - cpu_before[k], 1) for k in cpu_after},
        **write_figures(writes, rejected, started),
        "controller_rss_mib": round(controller_rss, 1),
        **footprint,
        "load_average": load_average(),
    }


def write_figures(
    writes: dict[tuple[str, str], int], rejected: dict[tuple[str, str], int], started: int
) -> dict[str, Any]:
    """API writes a start, from the (user, "VERB resource") counts of the run's writes done and refused."""
    # The simulated node binds pods and reports their status as a node (the scheduler's and kubelet's writes, counted
    # as "other"); only its VMI patches go out as virt-handler.
    kubevirt = {
        (u, r): v
        for (u, r), v in writes.items()
        if u in ("virt-controller", "virt-handler") and "events" not in r and "nodes" not in r
    }
    pods_and_vmis = sum(v for (_, r), v in kubevirt.items() if "pods" in r or "virtualmachineinstances" in r)
    # The measure: every write of the flow, the user's VM create and the events too; not the node's
    # heartbeats nor the bench's own set-up (its namespace, the simulated node's registration and role bindings).
    set_up = ("nodes", "namespaces", "clusterrolebindings")
    flow = sum(v for (_, r), v in writes.items() if r.split(" ", 1)[-1] not in set_up)
    return {
        "all_writes_per_start": round(flow / started, 2),
        "kubevirt_pod_and_vmi_writes_per_start": round(pods_and_vmis / started, 2),
        "kubevirt_all_writes_per_start": round(sum(kubevirt.values()) / started, 2),
        "events_per_start": round(sum(v for (_, r), v in writes.items() if "events" in r) / started, 2),
        "writes_by_component": {f"{u}:{r}": v for (u, r), v in sorted(writes.items())},
        # Writes refused for a stale read (409, a failed JSON patch test): work for nothing, and a retry.
        "rejected_writes_per_start": round(sum(rejected.values()) / started, 2),
        "rejected_by_component": {f"{u}:{r}": v for (u, r), v in sorted(rejected.items())},
    }


def cpu_by_process(server: APIServerProcess, controller: subprocess.Popen[bytes]) -> dict[str, float]:
    """CPU seconds used so far by the API server, virt-controller and this process (simulated node, load)."""
    pids = {"apiserver": server.pid, "virt-controller": controller.pid, "simulated_node_and_load": os.getpid()}
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def tenths(created: dict[str, float], running: dict[str, float]) -> list[list[float]]:
    """Create → Running latencies of each tenth of the VMs, in the order they were created."""
    names = sorted(created, key=created.__getitem__)
    size = max(1, len(names) // 10)
    parts = [names[i : i + size] for i in range(0, len(names), size)][:10]
    return [[running[n] - created[n] for n in part if n in running] for part in parts]


def server_footprint(server: APIServerProcess) -> dict[str, Any]:
    """The API server's RSS and the size of its SQLite files (database, WAL)."""
    sizes = {f.name: f.stat().st_size for f in server.data_dir.glob("state.db*")}
    return {
        "apiserver_rss_mib": round(rss_mib(server.pid), 1),
        "sqlite_mib": {name: round(size / 2**20, 1) for name, size in sorted(sizes.items())},
    }


async def api_write_counts(server: APIServerProcess) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """Writes done and writes refused, per (component, resource), from the API server's counters."""
    admin = client_for(server)
    try:
        counts = await admin.request("GET", "/debug/writes")
    finally:
        await admin.close()
    done, refused = (
        Counter({(c["user"], c["resource"]): c["count"] for c in counts[kind]}) for kind in ("writes", "rejected")
    )
    return done, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vms", type=at_least(1), default=1000)
    parser.add_argument("--rate", type=positive, default=10.0)
    parser.add_argument("--burst", action="store_true", help="create as fast as possible instead of at --rate")
    parser.add_argument("--workers", type=at_least(1), help="virt-controller's reconcile workers (default: its own)")
    parser.add_argument("--timeout", type=positive, default=600.0)
    parser.add_argument("--profile", metavar="FILE", help="write a CPU-time cProfile of virt-controller to FILE")
    parser.add_argument("--profile-apiserver", metavar="FILE", help="write a CPU-time cProfile of the API server")
    args = parser.parse_args()
    # The simulated node stands in for the node agent and scheduler, which pace the collector this way; at the
    # default pace, collections of this process's growing caches stalled the simulated node for a second each.
    pace_garbage_collection()
    server = start_apiserver(profile=args.profile_apiserver)
    try:
        figures = asyncio.run(run(args, server))
    finally:
        stop_apiserver(server)
    for path in (args.profile, args.profile_apiserver):
        if path:
            log(top(path))
    print(json.dumps({"bench": "control_plane", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
