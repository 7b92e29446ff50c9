"""50 pod-network start/stop cycles leave nothing behind: each cycle is what a VM start and stop does to the network
(the node agent's sandbox by the real CNI plugins, the launcher's masquerade or bridge plumbing run inside it, CNI
DEL and the namespace's deletion), alternating the two bindings. Afterwards no namespace, veth, nft rule or leased
IP of the cycles remains (`ip netns`, `ip link`, `nft list ruleset`, the host-local store). No QEMU: the guest's
side is the tap, which the namespace owns."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.node import netns
from pykubevirt.node.pod_network import NETWORK_NAME, ClusterNetwork, PodNetwork
from tests.paths import REPO
from tests.support.waiting import eventually

CYCLES = 50

# The launcher's plumbing for one binding, run in the pod's namespace as the launcher runs it; prints what it made.
PLUMB = """
import asyncio, json, subprocess, sys
from pathlib import Path
from pykubevirt.launcher import bridge_binding, masquerade

async def main():
    binding, cache = sys.argv[1], Path(sys.argv[2])
    if binding == "bridge":
        _, dhcp = await bridge_binding.plumb({"name": "default", "bridge": {}}, 0, "leak", cache)
    else:
        iface = {"name": "default", "masquerade": {}, "ports": [{"port": 80}]}
        dhcp = await masquerade.plumb(iface, masquerade.pod_interface(), "leak")
    links = [link["ifname"] for link in json.loads(subprocess.check_output(["ip", "-j", "link"]))]
    rules = subprocess.check_output(["nft", "list", "ruleset"], text=True)
    nft6 = "table ip6 nat" in rules and "KUBEVIRT_PREINBOUND" in rules.split("table ip6 nat", 1)[1]
    print(json.dumps({"links": sorted(links), "nft": "KUBEVIRT_PREINBOUND" in rules, "nft6": nft6}))
    dhcp.close()

asyncio.run(main())
"""


async def ip_lines(*args: str) -> list[str]:
    return (await netns.run(["ip", *args])).decode().splitlines()


async def link_names(ns: str) -> list[str]:
    return [line.split(":")[1].strip().split("@")[0] for line in await ip_lines("-n", ns, "-o", "link")]


@pytest.fixture
async def network(tmp_path: Path) -> AsyncIterator[PodNetwork]:
    cidr = choose_cluster_cidr(tmp_path)
    node = PodNetwork(cidr, f"leak-{uuid.uuid4().hex[:6]}", tmp_path / "node")
    try:
        await node.start(cidr.replace(".0.0/16", ".0.0/24"))
        yield node
    finally:
        release_cluster_network(tmp_path)


async def test_fifty_vm_network_cycles_leave_no_namespace_veth_rule_or_ip(network: PodNetwork, tmp_path: Path) -> None:
    cluster = ClusterNetwork(network.cluster.cidr)
    # A warm-up cycle makes the node bridge; everything after it must come back to this.
    await network.setup({"metadata": {"uid": str(uuid.uuid4()), "name": "warm", "namespace": "leak"}, "spec": {}})
    for uid in network.recorded_uids():
        await network.teardown(uid)
    cluster_links = await link_names(cluster.netns)
    env_path = f"{REPO / 'src'}:{REPO}"
    uids, pod_ips = [], set()
    for index in range(CYCLES):
        uid = str(uuid.uuid4())
        uids.append(uid)
        pod = {"metadata": {"uid": uid, "name": f"vm-{index}", "namespace": "leak"}, "spec": {}}
        pod_ips.update(await network.setup(pod))
        name = network.netns_of(uid)
        assert name is not None
        binding = "bridge" if index % 2 else "masquerade"
        argv = [*netns.enter_argv(name), "env", f"PYTHONPATH={env_path}", sys.executable, "-c", PLUMB]
        made = json.loads(await netns.run([*argv, binding, str(tmp_path / f"cache-{uid}.json")]))
        if binding == "bridge":
            assert {"k6t-eth0", "eth0-nic", "eth0", "tap0"} <= set(made["links"]) and not made["nft"]
        else:
            assert {"k6t-eth0", "eth0", "tap0"} <= set(made["links"]) and made["nft"]
            # A dual-stack pod (this host has IPv6) gets the ip6 rules as well.
            assert made["nft6"] == cluster.has_ipv6
        assert len(await link_names(cluster.netns)) == len(cluster_links) + 1
        await network.teardown(uid)

    # host-local hands out fresh addresses, so a leak cannot hide behind reuse (an IPv4 and an IPv6 one a cycle)
    assert len(pod_ips) == CYCLES * (2 if cluster.has_ipv6 else 1)
    namespaces = {line.split()[0] for line in await ip_lines("netns", "list")}
    assert not namespaces & {f"pkvpod-{uid}" for uid in uids}
    # The cluster namespace holds the node bridge, the host link and no veth of any cycle. A bridge binding's veth
    # (eth0-nic by then; CNI DEL removes the device named eth0) goes when the kernel destroys the pod's namespace,
    # which it does asynchronously.

    async def veths_gone() -> bool:
        return await link_names(cluster.netns) == cluster_links

    await eventually(veths_gone, timeout=10)
    leases = network.ipam_dir / NETWORK_NAME
    assert sorted(p.name for p in leases.iterdir() if not p.name.startswith(("last_reserved_ip", "lock"))) == []
    assert network.recorded_uids() == []
    # Rules lived inside the pods' namespaces only: the host's ruleset never names a pod IP.
    ruleset = (await netns.run(["nft", "list", "ruleset"])).decode()
    assert not [ip for ip in pod_ips if ip in ruleset]
    host_links = " ".join(await ip_lines("-o", "link"))
    assert "k6t-" not in host_links and "eth0-nic" not in host_links
