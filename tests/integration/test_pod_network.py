"""The embedded pod network against a real API server and the real CNI plugins: node podCIDRs from node IPAM, a
namespace and an IP per pod, reachability from the host and across nodes, and nothing left behind (no QEMU)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.cli.readdressed_nodes import retire_readdressed_nodes
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import NAMESPACES, NODES, PODS
from pykubevirt.controller.node_ipam import NodeIpamController
from pykubevirt.node import netns
from pykubevirt.node.agent import NodeAgent
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.pod_network import ClusterNetwork, PodNetwork, pod_netns
from pykubevirt.node.teardown import kill_node_pods
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import eventually
from tests.support.watching import watching

pytestmark = pytest.mark.asyncio(loop_scope="module")

PY = sys.executable
# Listens on port 8080 of both families ([::], not IPv6-only) and answers each connection with the pod's own view:
# the peer's IP as it sees it (an IPv4 peer's without its ::ffff: mapping).
LISTENER = (
    "import socket\n"
    "s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
    "s.bind(('::', 8080)); s.listen()\n"
    "while True:\n"
    "    c, peer = s.accept(); c.sendall(('hello ' + peer[0].removeprefix('::ffff:')).encode()); c.close()\n"
)


@dataclass
class Net:
    client: KubeClient
    root: Path
    cidr: str
    images: ImageStore
    agents: dict[str, NodeAgent] = field(default_factory=dict)
    namespace: str = ""

    def agent_for(self, name: str) -> NodeAgent:
        data_dir = self.root / name
        network = PodNetwork(self.cidr, name, data_dir)
        return NodeAgent(self.client, name, data_dir, self.images, heartbeat_interval=1.0, network=network)

    async def start_node(self, name: str) -> NodeAgent:
        agent = self.agents[name] = self.agent_for(name)
        await agent.start()
        return agent

    async def stop_node(self, name: str) -> None:
        await self.agents.pop(name).stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def net(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Net]:
    root = tmp_path_factory.mktemp("pod-network")
    cidr = choose_cluster_cidr(root)
    client = client_for(apiserver)
    ipam = NodeIpamController(client, cidr)
    ipam_task = asyncio.create_task(ipam.run())
    env = Net(client, root, cidr, ImageStore(root / "images"))
    env.namespace = f"net-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": env.namespace}})
    suffix = uuid.uuid4().hex[:6]
    for name in (f"neta-{suffix}", f"netb-{suffix}"):
        await env.start_node(name)
    yield env
    for pod in (await client.list(PODS, env.namespace))["items"]:
        with contextlib.suppress(NotFound):
            await client.delete(PODS, pod["metadata"]["name"], env.namespace, grace_period_seconds=0)
    names = list(env.agents)
    for name in names:
        await env.stop_node(name)
    for name in names:
        kill_node_pods(root / name)
        with contextlib.suppress(NotFound):
            await client.delete(NODES, name)
    with contextlib.suppress(NotFound):
        await client.delete(NAMESPACES, env.namespace)
    ipam_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ipam_task
    release_cluster_network(root)
    await client.close()


def nodes(env: Net) -> list[str]:
    return sorted(env.agents)


def pod(name: str, node: str, code: str = LISTENER, **spec: Any) -> Object:
    container = {"name": "main", "image": "python:3.11", "command": [PY, "-c", code]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [container], "restartPolicy": "Never", **spec},
    }


async def running(env: Net, name: str) -> Object:
    async def probe() -> Object | None:
        try:
            obj = await env.client.get(PODS, name, env.namespace)
        except NotFound:
            return None
        return obj if (obj.get("status") or {}).get("phase") == "Running" else None

    return await eventually(probe, timeout=30.0)


async def gone(env: Net, name: str) -> None:
    async def probe() -> bool:
        try:
            await env.client.get(PODS, name, env.namespace)
        except NotFound:
            return True
        return False

    await eventually(probe, timeout=30.0)


async def fetch(host: str, port: int = 8080) -> str:
    """One connection to a pod's listener (retried while the process is still binding)."""

    async def attempt() -> str | None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
        except (OSError, TimeoutError):
            return None
        data = await reader.read(200)
        writer.close()
        return data.decode()

    return await eventually(attempt, timeout=20.0)


def pid_of(obj: Object) -> int:
    return int(str(obj["status"]["containerStatuses"][0]["containerID"]).removeprefix("process://"))


def leases(env: Net, node: str, *, ipv6: bool = False) -> dict[str, str]:
    """host-local's store of the node: leased IP (of one family) -> container id (the pod uid)."""
    store = env.root / node / "cni" / "ipam" / "pykubevirt"
    if not store.is_dir():
        return {}
    return {
        path.name: path.read_text().split("\n", 1)[0].strip()
        for path in store.iterdir()
        if "last_reserved" not in path.name and path.name != "lock" and (":" in path.name) == ipv6
    }


def cluster_links(env: Net) -> list[str]:
    out = os.popen(f"ip -n {ClusterNetwork(env.cidr).netns} -o link").read()
    return [line.split(":")[1].strip() for line in out.splitlines()]


async def node_cidr(env: Net, node: str) -> str:
    return str((await env.client.get(NODES, node))["spec"].get("podCIDR") or "")


async def node_cidr_v6(env: Net, node: str) -> str:
    cidrs = (await env.client.get(NODES, node))["spec"].get("podCIDRs") or []
    return next((str(c) for c in cidrs if ":" in c), "")


def v4(obj: Object) -> str:
    """The pod's IPv4 address (status.podIP)."""
    return str(obj["status"]["podIP"])


def v6(obj: Object) -> str:
    """The pod's IPv6 address from status.podIPs."""
    (address,) = [entry["ip"] for entry in obj["status"]["podIPs"] if ":" in entry["ip"]]
    return str(address)


async def test_node_ipam_gives_each_node_its_own_slash_24_of_the_cluster_cidr(net: Net) -> None:
    cidrs = [await eventually(lambda n=n: node_cidr(net, n)) for n in nodes(net)]
    assert len(set(cidrs)) == 2
    cluster = ClusterNetwork(net.cidr)
    for cidr in cidrs:
        subnet = ipaddress.IPv4Network(cidr)
        assert subnet.prefixlen == 24 and subnet.subnet_of(ipaddress.IPv4Network(cluster.ipv4_cidr))
        assert not subnet.overlaps(cluster.host_link)


async def test_a_dual_stack_cluster_gives_each_node_an_ipv6_slash_64_too(net: Net) -> None:
    cluster = ClusterNetwork(net.cidr)
    assert cluster.ipv6_cidr and cluster.has_ipv6, "this host has IPv6: the cluster must be dual-stack"
    for node in nodes(net):
        spec = (await eventually(lambda n=node: net.client.get(NODES, n)))["spec"]
        ipv4, ipv6 = spec["podCIDRs"]
        assert ipv4 == spec["podCIDR"]
        subnet = ipaddress.IPv6Network(ipv6)
        assert subnet.prefixlen == 64 and subnet.subnet_of(ipaddress.IPv6Network(cluster.ipv6_cidr))
        assert not subnet.overlaps(cluster.host_link_v6)
    assert len({await node_cidr_v6(net, n) for n in nodes(net)}) == 2


async def test_a_pod_gets_its_own_namespace_and_an_ip_of_its_node_that_the_host_reaches(net: Net) -> None:
    node = nodes(net)[0]
    await net.client.create(PODS, pod("web", node), net.namespace)
    obj = await running(net, "web")
    ip, ipv6 = obj["status"]["podIP"], v6(obj)
    # Dual-stack, as kubelet reports it: podIP is the IPv4 address, podIPs lists it first and then the IPv6 one.
    assert obj["status"]["podIPs"] == [{"ip": ip}, {"ip": ipv6}]
    assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(await node_cidr(net, node))
    assert ipaddress.IPv6Address(ipv6) in ipaddress.IPv6Network(await node_cidr_v6(net, node))
    assert leases(net, node)[ip] == obj["metadata"]["uid"]
    assert leases(net, node, ipv6=True)[ipv6] == obj["metadata"]["uid"]
    # The container's process is in the pod's namespace, not the host's.
    ns_file = netns.netns_path(pod_netns(obj["metadata"]["uid"]))
    assert os.stat(f"/proc/{pid_of(obj)}/ns/net").st_ino == os.stat(ns_file).st_ino
    assert os.stat(f"/proc/{pid_of(obj)}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    # From the host: the answer names the host's end of the link into the cluster's namespace.
    assert await fetch(ip) == f"hello {ClusterNetwork(net.cidr).host_address}"
    # And over IPv6: from the host's end of the link's IPv6 side.
    assert await fetch(ipv6) == f"hello {ClusterNetwork(net.cidr).host_address_v6}"


async def exchange_across_nodes(
    env: Net, server: str, client: str, address: Callable[[Object], str]
) -> tuple[Object, str]:
    """A listener pod on the first node, and a pod on the second that dials it at `address` of the listener's pod
    (one family's) and exits: the client pod once it has succeeded, and the answer it printed."""
    first, second = nodes(env)
    await env.client.create(PODS, pod(server, first), env.namespace)
    server_ip = address(await running(env, server))
    dial = (
        "import socket, time\n"
        "for _ in range(100):\n"
        "    try:\n"
        f"        c = socket.create_connection(('{server_ip}', 8080), timeout=2); break\n"
        "    except OSError: time.sleep(0.1)\n"
        "print(c.recv(100).decode(), flush=True)\n"
    )
    await env.client.create(PODS, pod(client, second, dial), env.namespace)

    async def succeeded() -> Object | None:
        obj = await env.client.get(PODS, client, env.namespace)
        return obj if (obj.get("status") or {}).get("phase") == "Succeeded" else None

    client_pod = await eventually(succeeded, timeout=30.0)
    log = (env.root / second / "pods" / client_pod["metadata"]["uid"] / "logs" / "main.log").read_text()
    return client_pod, log.strip()


async def test_pods_on_two_nodes_reach_each_other(net: Net) -> None:
    client_pod, answer = await exchange_across_nodes(net, "server", "client", v4)
    assert answer == f"hello {client_pod['status']['podIP']}"
    second = nodes(net)[1]
    assert ipaddress.IPv4Address(client_pod["status"]["podIP"]) in ipaddress.IPv4Network(await node_cidr(net, second))


async def test_pods_on_two_nodes_reach_each_other_over_ipv6(net: Net) -> None:
    client_pod, answer = await exchange_across_nodes(net, "server6", "client6", v6)
    # The server saw the client's own IPv6 pod address: routed between the node bridges, not translated.
    assert answer == f"hello {v6(client_pod)}"
    second = nodes(net)[1]
    assert ipaddress.IPv6Address(v6(client_pod)) in ipaddress.IPv6Network(await node_cidr_v6(net, second))


async def test_a_host_network_pod_stays_in_the_hosts_namespace(net: Net) -> None:
    code = "import time; time.sleep(600)"
    await net.client.create(PODS, pod("hostnet", nodes(net)[0], code, hostNetwork=True), net.namespace)
    obj = await running(net, "hostnet")
    assert obj["status"]["podIP"] == "127.0.0.1"
    assert os.stat(f"/proc/{pid_of(obj)}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino
    assert not netns.exists(pod_netns(obj["metadata"]["uid"]))


async def test_deleting_a_pod_frees_its_ip_and_leaves_no_namespace_or_veth(net: Net) -> None:
    node = nodes(net)[0]
    bridge = net.agents[node].network.bridge  # type: ignore[union-attr]
    links_before = set(cluster_links(net)) | {bridge}
    await net.client.create(PODS, pod("doomed", node), net.namespace)
    obj = await running(net, "doomed")
    uid, ip = obj["metadata"]["uid"], obj["status"]["podIP"]
    (veth,) = set(cluster_links(net)) - links_before
    assert veth.startswith("veth")
    await net.client.delete(PODS, "doomed", net.namespace)
    await gone(net, "doomed")
    assert not netns.exists(pod_netns(uid))
    assert ip not in leases(net, node)
    assert v6(obj) not in leases(net, node, ipv6=True)
    assert set(cluster_links(net)) <= links_before
    assert not (net.root / node / "cni" / "pods" / f"{uid}.json").exists()


async def test_a_terminating_pod_is_reported_finished_only_once_its_network_is_gone(net: Net) -> None:
    """The kubelet's order: containers, then the sandbox, then the terminal status. A finished pod may be removed from
    the API at once (virt-controller deletes it again), so its network must not outlive its last status."""
    node = nodes(net)[0]
    await net.client.create(PODS, pod("finishing", node), net.namespace)
    uid = (await running(net, "finishing"))["metadata"]["uid"]
    seen: list[tuple[str, bool]] = []

    def record(obj: Object) -> None:
        phase = str((obj.get("status") or {}).get("phase") or "")
        if phase in ("Succeeded", "Failed") and not seen:
            seen.append((phase, netns.exists(pod_netns(uid))))

    async with watching(net.client, PODS, net.namespace, "finishing", record):
        await net.client.delete(PODS, "finishing", net.namespace)
        await gone(net, "finishing")
        await eventually(lambda: bool(seen))
    phase, namespace_left = seen[0]
    assert not namespace_left, f"the pod was reported {phase} while its network namespace was still there"


async def test_a_restarted_agent_keeps_pod_ips_and_continues_the_ipam_store(net: Net) -> None:
    node = nodes(net)[1]
    await net.client.create(PODS, pod("stays", node), net.namespace)
    obj = await running(net, "stays")
    ip = obj["status"]["podIP"]
    await net.stop_node(node)
    await net.start_node(node)
    assert await fetch(ip) == f"hello {ClusterNetwork(net.cidr).host_address}"
    await net.client.create(PODS, pod("after", node), net.namespace)
    after = await running(net, "after")
    assert after["status"]["podIP"] != ip
    assert (await net.client.get(PODS, "stays", net.namespace))["status"]["podIP"] == ip
    assert set(leases(net, node)) >= {ip, after["status"]["podIP"]}


async def test_a_pod_deleted_while_its_agent_was_down_is_cleaned_up_at_restart(net: Net) -> None:
    node = nodes(net)[0]
    await net.client.create(PODS, pod("orphan", node), net.namespace)
    obj = await running(net, "orphan")
    uid, ip = obj["metadata"]["uid"], obj["status"]["podIP"]
    await net.stop_node(node)
    await net.client.delete(PODS, "orphan", net.namespace, grace_period_seconds=0)
    await net.start_node(node)

    def cleaned() -> bool:
        record = net.root / node / "cni" / "pods" / f"{uid}.json"
        return not netns.exists(pod_netns(uid)) and ip not in leases(net, node) and not record.exists()

    await eventually(cleaned, timeout=20.0)


async def test_a_sandbox_left_by_a_crash_is_removed_when_the_agent_starts(net: Net) -> None:
    node = nodes(net)[1]
    await net.stop_node(node)
    # What a crash between CNI ADD and the pod directory leaves: a recorded sandbox of a pod the node never ran.
    uid = str(uuid.uuid4())
    network = PodNetwork(net.cidr, node, net.root / node, pod_cidr=await node_cidr(net, node))
    await network.start(await node_cidr(net, node))
    fake = {"metadata": {"uid": uid, "name": "ghost", "namespace": net.namespace}, "spec": {}}
    ip, _ = await network.setup(fake)
    assert netns.exists(pod_netns(uid)) and leases(net, node)[ip] == uid
    await net.start_node(node)
    assert not netns.exists(pod_netns(uid))
    assert ip not in leases(net, node)
    assert json.dumps(sorted(p.name for p in (net.root / node / "cni" / "pods").glob("*.json"))).count(uid) == 0


async def test_a_node_holding_a_podcidr_of_the_clusters_former_cidr_is_retired_and_registers_anew(net: Net) -> None:
    # What `down --all` then `up` leaves when another cluster took the old CIDR meanwhile: a Node in the data dir
    # still holds a podCIDR of it, which the host no longer routes into this cluster. A podCIDR never changes.
    name = f"netc-{uuid.uuid4().hex[:6]}"
    stale = {"podCIDR": "10.127.9.0/24", "podCIDRs": ["10.127.9.0/24"]}
    metadata = {"name": name, "labels": {"example.com/set-by-hand": "yes"}}
    await net.client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": stale})
    # The supervisor's step before the node agents start: only that Node goes.
    assert await retire_readdressed_nodes(net.client, net.cidr) == [name]
    assert await retire_readdressed_nodes(net.client, net.cidr) == []
    assert set(nodes(net)) <= {n["metadata"]["name"] for n in (await net.client.list(NODES))["items"]}
    await net.start_node(name)
    try:
        cidr = await eventually(lambda: node_cidr(net, name))
        cluster = ClusterNetwork(net.cidr)
        assert ipaddress.IPv4Network(cidr).subnet_of(ipaddress.IPv4Network(cluster.ipv4_cidr))
        # It is a new Node: what others had set on the old one went with it, as with a re-created kubelet's Node.
        assert "example.com/set-by-hand" not in (await net.client.get(NODES, name))["metadata"]["labels"]
        await net.client.create(PODS, pod("readdressed", name), net.namespace)
        obj = await running(net, "readdressed")
        assert ipaddress.IPv4Address(obj["status"]["podIP"]) in ipaddress.IPv4Network(cidr)
        assert await fetch(obj["status"]["podIP"]) == f"hello {cluster.host_address}"
    finally:
        with contextlib.suppress(NotFound):
            await net.client.delete(PODS, "readdressed", net.namespace, grace_period_seconds=0)
        await gone(net, "readdressed")
        await net.stop_node(name)
        kill_node_pods(net.root / name)
        with contextlib.suppress(NotFound):
            await net.client.delete(NODES, name)
