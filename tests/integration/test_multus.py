"""Secondary networks delegated as Multus does, against a real API server and the real CNI plugins (no QEMU): the
NAD CRD, the ADD of each selected network under its requested name, network-status, a missing NAD failing the
sandbox, and DEL of everything at deletion or after a crash."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.api import network_attachment as nad
from pykubevirt.api.kubevirt import network_names
from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import EVENTS, NAMESPACES, NETWORK_ATTACHMENT_DEFINITIONS, NODES, PODS
from pykubevirt.controller.node_ipam import NodeIpamController
from pykubevirt.node import multus, netns
from pykubevirt.node.agent import NodeAgent
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.pod_network import ClusterNetwork, PodNetwork, pod_netns
from pykubevirt.node.teardown import kill_node_pods
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUBNET = "192.168.77.0/24"
# A TCP connection to a port nobody listens on: refused when the peer answers, a timeout when it is unreachable.
REACH = (
    "import socket\n"
    "try:\n"
    "    socket.create_connection(('{peer}', 9), timeout=3)\n"
    "except ConnectionRefusedError:\n"
    "    print('refused')\n"
)
SLEEPER = "import time\nwhile True: time.sleep(60)\n"


@dataclass
class Env:
    client: KubeClient
    root: Path
    cidr: str
    node: str
    agent: NodeAgent
    namespace: str
    bridge: str
    kubeconfig: Path

    def new_agent(self) -> NodeAgent:
        data_dir = self.root / self.node
        network = PodNetwork(self.cidr, self.node, data_dir)
        return NodeAgent(self.client, self.node, data_dir, ImageStore(self.root / "images"), network=network)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    root = tmp_path_factory.mktemp("multus")
    cidr = choose_cluster_cidr(root)
    client = client_for(apiserver)
    ipam = NodeIpamController(client, cidr)
    ipam_task = asyncio.create_task(ipam.run())
    suffix = uuid.uuid4().hex[:6]
    namespace = f"multus-{suffix}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    env = Env(
        client, root, cidr, f"mnode-{suffix}", None, namespace, f"pkvb{suffix}", apiserver.data_dir / "kubeconfig"
    )  # type: ignore[arg-type]
    env.agent = env.new_agent()
    await env.agent.start()
    config = {
        "cniVersion": "0.3.1",
        "name": "blue",
        "type": "bridge",
        "bridge": env.bridge,
        "ipam": {"type": "host-local", "subnet": SUBNET},
    }
    await client.create(NETWORK_ATTACHMENT_DEFINITIONS, definition("blue", config), namespace)
    yield env
    for obj in (await client.list(PODS, namespace))["items"]:
        with contextlib.suppress(NotFound):
            await client.delete(PODS, obj["metadata"]["name"], namespace, grace_period_seconds=0)
    await env.agent.stop()
    kill_node_pods(root / env.node)
    with contextlib.suppress(NotFound):
        await client.delete(NODES, env.node)
    with contextlib.suppress(NotFound):
        await client.delete(NAMESPACES, namespace)
    ipam_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await ipam_task
    release_cluster_network(root)
    await client.close()


def definition(name: str, config: dict[str, Any]) -> Object:
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name},
        "spec": {"config": json.dumps(config)},
    }


def pod(name: str, env: Env, networks: str) -> Object:
    container = {"name": "main", "image": "python:3.11", "command": [sys.executable, "-c", SLEEPER]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {nad.NETWORKS_ANNOTATION: networks}},
        "spec": {"nodeName": env.node, "containers": [container], "restartPolicy": "Never"},
    }


def selection(env: Env, network: str = "blue-net", nad_name: str = "blue") -> str:
    iface = network_names.hashed_interface(network)
    return json.dumps([{"name": nad_name, "namespace": env.namespace, "interface": iface}])


async def running(env: Env, name: str) -> Object:
    async def probe() -> Object | None:
        obj = await env.client.get(PODS, name, env.namespace)
        return obj if (obj.get("status") or {}).get("phase") == "Running" else None

    return await eventually(probe, timeout=30.0)


async def gone(env: Env, name: str) -> None:
    async def probe() -> bool:
        try:
            await env.client.get(PODS, name, env.namespace)
        except NotFound:
            return True
        return False

    await eventually(probe, timeout=30.0)


def in_pod(uid: str, *argv: str) -> str:
    return subprocess.run(
        ["nsenter", f"--net={netns.netns_path(pod_netns(uid))}", "--", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def bridge_ports(env: Env) -> list[str]:
    out = subprocess.run(
        ["ip", "-n", ClusterNetwork(env.cidr).netns, "-o", "link", "show", "master", env.bridge],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]


def cluster_has_link(env: Env, name: str) -> bool:
    shown = subprocess.run(["ip", "-n", ClusterNetwork(env.cidr).netns, "link", "show", name], capture_output=True)
    return shown.returncode == 0


def blue_leases(env: Env) -> dict[str, str]:
    store = ClusterNetwork(env.cidr).shared_ipam_dir / "blue"
    if not store.is_dir():
        return {}
    return {p.name: p.read_text().split("\n", 1)[0].strip() for p in store.iterdir() if p.name[0].isdigit()}


async def test_the_nad_crd_is_served_with_its_short_name(env: Env) -> None:
    found = await env.client.get(NETWORK_ATTACHMENT_DEFINITIONS, "blue", env.namespace)
    assert json.loads(found["spec"]["config"])["bridge"] == env.bridge
    kubectl = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(env.kubeconfig), "get", "net-attach-def", "-n", env.namespace, "-o", "name",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await kubectl.communicate()
    assert out.decode().split() == ["networkattachmentdefinition.k8s.cni.cncf.io/blue"], err.decode()


async def test_each_selected_network_is_added_under_its_name_and_reported_in_network_status(env: Env) -> None:
    await env.client.create(PODS, pod("a", env, selection(env)), env.namespace)
    await env.client.create(PODS, pod("b", env, selection(env)), env.namespace)
    a, b = await running(env, "a"), await running(env, "b")
    iface = network_names.hashed_interface("blue-net")
    statuses = [nad.read_network_status(obj) for obj in (a, b)]
    for obj, status in zip((a, b), statuses, strict=True):
        uid = obj["metadata"]["uid"]
        primary, secondary = status
        assert primary["name"] == "pykubevirt" and primary["interface"] == "eth0" and primary["default"] is True
        assert primary["ips"] == [entry["ip"] for entry in obj["status"]["podIPs"]]
        assert secondary["name"] == f"{env.namespace}/blue" and secondary["interface"] == iface
        assert "default" not in secondary
        (ip,) = secondary["ips"]
        assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(SUBNET)
        link = json.loads(in_pod(uid, "ip", "-j", "addr", "show", "dev", iface))[0]
        assert link["address"] == secondary["mac"]
        assert f"{ip}/24" in {f"{x['local']}/{x['prefixlen']}" for x in link["addr_info"]}
        assert blue_leases(env)[ip] == uid
        # Every node of the cluster leases from one store, since they all share the secondary bridge.
        (record,) = json.loads((env.root / env.node / "cni" / "multus" / f"{uid}.json").read_text())
        data_dir = record["conflist"]["plugins"][0]["ipam"]["dataDir"]
        assert data_dir == str(ClusterNetwork(env.cidr).shared_ipam_dir)
    # The two pods reach each other on the secondary bridge.
    peer = statuses[1][1]["ips"][0]
    assert in_pod(a["metadata"]["uid"], sys.executable, "-c", REACH.format(peer=peer)).strip() == "refused"
    events = (await env.client.list(EVENTS, env.namespace))["items"]
    added = [e["message"] for e in events if e.get("reason") == "AddedInterface"]
    assert f"Add {iface} [{statuses[0][1]['ips'][0]}] from {env.namespace}/blue" in added


async def test_deleting_the_pod_deletes_every_delegate(env: Env) -> None:
    await env.client.create(PODS, pod("c", env, selection(env)), env.namespace)
    obj = await running(env, "c")
    uid = obj["metadata"]["uid"]
    ip = nad.read_network_status(obj)[1]["ips"][0]
    ports_before = set(bridge_ports(env))
    await env.client.delete(PODS, "c", env.namespace, grace_period_seconds=0)
    await gone(env, "c")
    await eventually(lambda: not netns.exists(pod_netns(uid)))
    assert ip not in blue_leases(env)
    assert len(set(bridge_ports(env))) == len(ports_before) - 1
    assert not (env.root / env.node / "cni" / "multus" / f"{uid}.json").exists()


async def test_an_unknown_nad_fails_the_sandbox_until_it_exists(env: Env) -> None:
    await env.client.create(PODS, pod("d", env, selection(env, "red-net", "red")), env.namespace)
    uid = (await env.client.get(PODS, "d", env.namespace))["metadata"]["uid"]

    async def failed() -> str | None:
        events = (await env.client.list(EVENTS, env.namespace))["items"]
        for event in events:
            if event["involvedObject"].get("uid") == uid and event.get("reason") == "FailedCreatePodSandBox":
                return str(event["message"])
        return None

    message = await eventually(failed)
    assert message.startswith("Failed to create pod sandbox: ")
    assert (
        f"cannot find a network-attachment-definition (red) in namespace ({env.namespace}): "
        f'network-attachment-definitions.k8s.cni.cncf.io "red" not found' in message
    )
    assert (await env.client.get(PODS, "d", env.namespace))["status"]["phase"] == "Pending"
    assert not netns.exists(pod_netns(uid))
    config = {"cniVersion": "0.3.1", "type": "bridge", "bridge": env.bridge, "ipam": {"type": "host-local",
              "subnet": SUBNET}}  # fmt: skip
    await env.client.create(NETWORK_ATTACHMENT_DEFINITIONS, definition("red", config), env.namespace)
    obj = await running(env, "d")
    assert nad.read_network_status(obj)[1]["name"] == f"{env.namespace}/red"


async def test_a_pod_deleted_while_the_agent_was_down_loses_its_delegates_at_restart(env: Env) -> None:
    await env.client.create(PODS, pod("e", env, selection(env)), env.namespace)
    obj = await running(env, "e")
    uid = obj["metadata"]["uid"]
    ip = nad.read_network_status(obj)[1]["ips"][0]
    await env.agent.stop()
    await env.client.delete(PODS, "e", env.namespace, grace_period_seconds=0)
    env.agent = env.new_agent()
    await env.agent.start()
    await gone(env, "e")
    await eventually(lambda: not netns.exists(pod_netns(uid)) and ip not in blue_leases(env), timeout=20.0)
    assert not (env.root / env.node / "cni" / "multus" / f"{uid}.json").exists()


async def test_a_sandbox_a_crash_left_mid_delegation_is_removed_when_the_agent_starts(env: Env) -> None:
    await env.agent.stop()
    # What a crash during the secondary ADDs leaves: eth0 done, the delegate added but not yet marked done.
    uid = str(uuid.uuid4())
    network = PodNetwork(env.cidr, env.node, env.root / env.node)
    node = await env.client.get(NODES, env.node)
    await network.start(node["spec"]["podCIDR"])
    fake = {"metadata": {"uid": uid, "name": "ghost", "namespace": env.namespace}, "spec": {}}
    await network.setup(fake)
    config = json.loads((await env.client.get(NETWORK_ATTACHMENT_DEFINITIONS, "blue", env.namespace))["spec"]["config"])
    definition_obj = {"metadata": {"name": "blue", "namespace": env.namespace}, "spec": {"config": json.dumps(config)}}
    delegate = multus.Delegate(
        nad.NetworkSelection("blue", env.namespace),
        "pod1",
        multus.delegate_conflist(definition_obj, network.multus.ipam_dir),
    )
    (attached,) = await network.attach(fake, [delegate])
    record = env.root / env.node / "cni" / "multus" / f"{uid}.json"
    entries = json.loads(record.read_text())
    entries[0]["done"] = False
    record.write_text(json.dumps(entries))
    assert network.recorded_ips(uid) is None and blue_leases(env)[attached.ips[0]] == uid
    env.agent = env.new_agent()
    await env.agent.start()
    assert not netns.exists(pod_netns(uid))
    assert attached.ips[0] not in blue_leases(env)
    assert not record.exists()


async def test_the_secondary_bridge_lives_in_the_clusters_namespace_only(env: Env) -> None:
    assert not netns.link_exists(env.bridge)
    assert cluster_has_link(env, env.bridge)


async def test_a_default_network_annotation_replaces_the_pod_network_by_its_nad(env: Env) -> None:
    manifest = pod("f", env, "")
    manifest["metadata"]["annotations"] = {nad.DEFAULT_NETWORK_ANNOTATION: f"{env.namespace}/blue"}
    await env.client.create(PODS, manifest, env.namespace)
    obj = await running(env, "f")
    uid, pod_ip = obj["metadata"]["uid"], obj["status"]["podIP"]
    assert ipaddress.IPv4Address(pod_ip) in ipaddress.IPv4Network(SUBNET)
    (default,) = nad.read_network_status(obj)
    assert default == {**default, "name": f"{env.namespace}/blue", "interface": "eth0", "ips": [pod_ip]}
    assert default["default"] is True
    assert blue_leases(env)[pod_ip] == uid
    await env.client.delete(PODS, "f", env.namespace, grace_period_seconds=0)
    await gone(env, "f")
    await eventually(lambda: not netns.exists(pod_netns(uid)) and pod_ip not in blue_leases(env), timeout=20.0)


async def test_a_power_cut_clean_up_frees_the_secondary_leases_too(env: Env) -> None:
    await env.client.create(PODS, pod("g", env, selection(env)), env.namespace)
    obj = await running(env, "g")
    uid = obj["metadata"]["uid"]
    ip = nad.read_network_status(obj)[1]["ips"][0]
    await env.agent.stop()
    await env.client.delete(PODS, "g", env.namespace, grace_period_seconds=0)
    # What `down --all` does to a node: kill its pods and drop their sandboxes without CNI.
    kill_node_pods(env.root / env.node)
    assert not netns.exists(pod_netns(uid))
    assert ip not in blue_leases(env)
    assert not (env.root / env.node / "cni" / "multus" / f"{uid}.json").exists()
    env.agent = env.new_agent()
    await env.agent.start()
    await gone(env, "g")
