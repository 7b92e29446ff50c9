"""Pod network setup time a VM start adds: the node agent's sandbox (namespace, loopback, CNI ADD through bridge +
host-local + portmap) and the launcher's masquerade plumbing in it (k6t-eth0, tap0, KubeVirt's nft rules, the DHCP
socket), then the teardown (CNI DEL, namespace). Real plugins, real namespaces, no QEMU; nothing leaves the host.

With --guest, also what masquerade costs the guest's traffic: one real QEMU guest in a pod namespace has two NICs,
tap0 behind masquerade (k6t-eth0 and KubeVirt's nft NAT) and a bare tap; the same client, in the pod's namespace,
downloads a file from the guest's httpd and times TCP connects (SYN to SYN-ACK, one round trip) through each, in
alternating rounds, and once more from the host at the pod IP (the whole pod network path). Ratios are masquerade
over bare tap.

    python -m bench.network --runs 30 [--guest --rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.arguments import at_least
from bench.guest_network import measure_guest
from bench.harness import log, machine, percentile
from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.node import netns
from pykubevirt.node.pod_network import PodNetwork

# Run in the pod's namespace, as the launcher runs it; prints the seconds the plumbing of the binding took.
PLUMB = """
import asyncio, sys, tempfile, time
from pathlib import Path
from pykubevirt.launcher import bridge_binding, masquerade
async def main():
    started = time.monotonic()
    if sys.argv[1] == "bridge":
        cache = Path(tempfile.mkdtemp()) / "interface-cache-eth0.json"
        _, transport = await bridge_binding.plumb({"name": "default", "bridge": {}}, 0, "bench", cache)
    else:
        pod = masquerade.pod_interface()
        iface = {"name": "default", "masquerade": {}, "ports": [{"port": 80}]}
        transport = await masquerade.plumb(iface, pod, "bench")
    print(time.monotonic() - started)
    transport.close()
asyncio.run(main())
"""


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(values, 50) * 1000, 1),
        "p95_ms": round(percentile(values, 95) * 1000, 1),
        "max_ms": round(max(values) * 1000, 1),
    }


async def run(runs: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-network-"))
    cidr = choose_cluster_cidr(root)
    network = PodNetwork(cidr, "bench-node", root / "node")
    sandbox, teardown, total = [], [], []
    plumbing: dict[str, list[float]] = {"masquerade": [], "bridge": []}
    try:
        await network.start(cidr.replace(".0.0/16", ".0.0/24"))
        for index in range(runs + 1):
            uid = str(uuid.uuid4())
            pod = {"metadata": {"uid": uid, "name": f"bench-{index}", "namespace": "bench"}, "spec": {}}
            started = time.monotonic()
            try:
                await network.setup(pod)
                set_up = time.monotonic() - started
                name = network.netns_of(uid)
                assert name is not None
                binding = "bridge" if index % 2 == 0 else "masquerade"
                out = await netns.run([*netns.enter_argv(name), sys.executable, "-c", PLUMB, binding])
                plumbed = float(out.decode().strip().splitlines()[-1])
            finally:
                started = time.monotonic()
                await network.teardown(uid)
                torn = time.monotonic() - started
            if index == 0:
                continue  # warm-up: the node's bridge is made by the first ADD
            sandbox.append(set_up)
            plumbing[binding].append(plumbed)
            teardown.append(torn)
            total.append(set_up + plumbed)
    finally:
        release_cluster_network(root)
    figures = {
        "runs": runs,
        "sandbox_cni_add": summary(sandbox),
        "launcher_masquerade": summary(plumbing["masquerade"]),
        "launcher_bridge": summary(plumbing["bridge"]),
        "added_to_vm_start": summary(total),
        "teardown_cni_del": summary(teardown),
    }
    log(json.dumps(figures, indent=2))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=at_least(1), default=30, help="measured pods (plus one warm-up)")
    parser.add_argument("--guest", action="store_true", help="also a guest's throughput and RTT, masquerade vs tap")
    parser.add_argument("--rounds", type=at_least(1), default=5, help="alternating measurement rounds with --guest")
    args = parser.parse_args()
    figures = asyncio.run(run(args.runs))
    if args.guest:
        figures["guest"] = asyncio.run(measure_guest(args.rounds))
    print(json.dumps({"bench": "network", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
