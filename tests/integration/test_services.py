"""Services on the embedded API server with the real kubectl: ClusterIPs from the service CIDR, kube's validation and
immutability; Endpoints and EndpointSlices of the selected pods; and the host's nftables proxy taking a connection to
CLUSTER-IP:PORT to a TCP server inside a real pod network namespace (no QEMU)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.cli.node_addresses import node_ip
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import ENDPOINT_SLICES, ENDPOINTS, NAMESPACES, NODES, PODS, VIRTUAL_MACHINES
from pykubevirt.controller.endpoints_controller import EndpointsController
from pykubevirt.node import netns
from pykubevirt.node.pod_network import ClusterNetwork, PodNetwork
from pykubevirt.node.service_proxy import ServiceProxy
from tests.integration.conftest import vm_manifest
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.control_plane import client_for
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

PORT = 7000
# Greets each connection with the address it was reached at (the pod's), then closes.
GREETER = (
    "import asyncio\n"
    "async def serve(r, w):\n"
    "    w.write(('hello ' + w.get_extra_info('sockname')[0] + '\\n').encode()); await w.drain(); w.close()\n"
    "async def main():\n"
    f"    s = await asyncio.start_server(serve, '0.0.0.0', {PORT})\n"
    "    print('ready', flush=True)\n"
    "    await s.serve_forever()\n"
    "asyncio.run(main())\n"
)


@dataclass
class Env:
    server: APIServerProcess
    client: KubeClient
    network: ClusterNetwork
    pod_ip: str
    namespace: str
    home: Path
    pods: PodNetwork
    greeter_uid: str

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(self.server, self.home, "-n", self.namespace, *args, stdin=stdin, check=check)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    root = tmp_path_factory.mktemp("services")
    cidr = choose_cluster_cidr(root)
    network = ClusterNetwork(cidr)
    server = APIServerProcess(root / "api", "--service-cluster-ip-range", network.service_cidr).start()
    pods = PodNetwork(cidr, "svc-node", root / "node")
    await pods.start(cidr.replace(".0.0/16", ".0.0/24"))
    uid = str(uuid.uuid4())
    # Services are IPv4 (single-stack); a dual-stack pod's IPv4 address comes first.
    pod_ip, *_ = await pods.setup({"metadata": {"uid": uid, "name": "echo", "namespace": "svc"}, "spec": {}})
    greeter = await asyncio.create_subprocess_exec(
        *netns.enter_argv(str(pods.netns_of(uid))), sys.executable, "-c", GREETER, stdout=asyncio.subprocess.PIPE
    )
    assert greeter.stdout is not None
    assert (await asyncio.wait_for(greeter.stdout.readline(), 30)).strip() == b"ready"
    client = client_for(server)
    proxy = ServiceProxy(client, network)
    tasks = [asyncio.create_task(EndpointsController(client).run()), asyncio.create_task(proxy.run())]
    namespace = f"svc-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    yield Env(server, client, network, pod_ip, namespace, root / "home", pods, uid)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    greeter.terminate()
    await greeter.wait()
    await pods.teardown(uid)
    release_cluster_network(root)
    await client.close()
    server.stop()


def nft(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nft", *args], capture_output=True, text=True, check=False)


def service(name: str, ports: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"ports": [{"port": 8080, "targetPort": PORT}] if ports is None else ports, **spec}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": body}


def create(env: Env, obj: dict[str, Any], check: bool = True) -> subprocess.CompletedProcess[str]:
    return env.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(obj), check=check)


def created(env: Env, obj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(create(env, obj).stdout)
    return result


def in_range(env: Env, ip: str) -> bool:
    return ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(env.network.service_cidr)


async def test_cluster_ips_come_from_the_service_cidr_with_kubes_defaults(env: Env) -> None:
    svc = created(env, service("plain"))
    spec = svc["spec"]
    assert in_range(env, spec["clusterIP"]) and spec["clusterIPs"] == [spec["clusterIP"]]
    # The range's first address is the `kubernetes` Service's, never given.
    assert spec["clusterIP"] != str(next(ipaddress.IPv4Network(env.network.service_cidr).hosts()))
    assert spec["ports"] == [{"port": 8080, "protocol": "TCP", "targetPort": PORT}]
    assert (spec["type"], spec["sessionAffinity"], spec["internalTrafficPolicy"]) == ("ClusterIP", "None", "Cluster")
    assert (spec["ipFamilies"], spec["ipFamilyPolicy"]) == (["IPv4"], "SingleStack")
    other = created(env, service("other"))["spec"]["clusterIP"]
    assert other != spec["clusterIP"] and in_range(env, other)
    table = env.kubectl("get", "svc", "plain").stdout.split()
    assert table[:5] == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"]
    assert table[6:11] == ["plain", "ClusterIP", spec["clusterIP"], "<none>", "8080/TCP"]
    headless = created(env, service("headless", clusterIP="None"))["spec"]
    assert headless["clusterIPs"] == ["None"]
    node_port = created(env, service("np", type="NodePort"))["spec"]["ports"][0]["nodePort"]
    assert 30000 <= node_port <= 32767
    assert f"8080:{node_port}/TCP" in env.kubectl("get", "svc", "np").stdout


async def test_a_chosen_cluster_ip_must_be_free_and_in_range(env: Env) -> None:
    hosts = list(ipaddress.IPv4Network(env.network.service_cidr).hosts())
    wanted = str(hosts[-1])
    assert created(env, service("chosen", clusterIP=wanted))["spec"]["clusterIP"] == wanted
    taken = create(env, service("clash", clusterIP=wanted), check=False)
    assert taken.returncode == 1
    assert (
        f'The Service "clash" is invalid: spec.clusterIPs: Invalid value: ["{wanted}"]: '
        f"failed to allocate IP {wanted}: provided IP is already allocated"
    ) in taken.stderr
    outside = create(env, service("outside", clusterIP="192.0.2.10"), check=False)
    assert (
        f"failed to allocate IP 192.0.2.10: provided IP is not in the valid range. "
        f"The range of valid IPs is {env.network.service_cidr}"
    ) in outside.stderr
    # Deleting a Service frees its address.
    env.kubectl("delete", "svc", "chosen")
    assert created(env, service("again", clusterIP=wanted))["spec"]["clusterIP"] == wanted


async def test_validation_and_immutability_as_kube_answers_them(env: Env) -> None:
    cases = [
        (service("noports", ports=[]), "spec.ports: Required value"),
        (service("badport", ports=[{"port": 0}]), "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"),
        (
            service("proto", ports=[{"port": 1, "protocol": "ICMP"}]),
            'spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        ),
        (service("unnamed", ports=[{"port": 1}, {"port": 2}]), "spec.ports[0].name: Required value"),
        (service("kind", type="Weird"), 'spec.type: Unsupported value: "Weird"'),
        (
            service("badip", clusterIP="10.1.2.300"),
            'spec.clusterIPs[0]: Invalid value: "10.1.2.300": must be a valid IP address',
        ),
    ]
    for body, message in cases:
        result = create(env, body, check=False)
        assert result.returncode == 1 and message in result.stderr, (message, result.stderr)
    ip = created(env, service("fixed"))["spec"]["clusterIP"]
    changed = env.kubectl(
        "patch",
        "svc",
        "fixed",
        "--type=merge",
        "-p",
        '{"spec":{"clusterIP":"10.1.2.3","clusterIPs":["10.1.2.3"]}}',
        check=False,
    )
    assert changed.returncode == 1
    assert 'spec.clusterIPs[0]: Invalid value: ["10.1.2.3"]: may not change once set' in changed.stderr
    # A replace (or apply) that leaves the address out keeps it, as kube's patchAllocatedValues. (An apply of this
    # object made by `kubectl create` would merge its ports by number, as kube's strategic merge does.)
    manifest = service("fixed", ports=[{"port": 9090, "targetPort": PORT}])
    env.kubectl("replace", "-f", "-", stdin=json.dumps(manifest))
    after = json.loads(env.kubectl("get", "svc", "fixed", "-o", "json").stdout)["spec"]
    assert after["clusterIP"] == ip and after["ports"][0]["port"] == 9090


async def running_pod(env: Env, name: str, ready: bool, **labels: str) -> Object:
    """A pod object with the greeter's address, as a node reports it (no process runs for it)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "svc-node", "containers": [{"name": "c", "image": "greeter"}]},
    }
    await env.client.create(PODS, body, env.namespace)
    return await set_ready(env, name, ready)


async def set_ready(env: Env, name: str, ready: bool) -> Object:
    status = {
        "phase": "Running",
        "podIP": env.pod_ip,
        "podIPs": [{"ip": env.pod_ip}],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    return await env.client.patch(PODS, name, {"status": status}, env.namespace, subresource="status")


async def greeting(ip: str, port: int) -> str | None:
    """One connection's answer; None when the host rejects it (no endpoints): at once, never a timeout."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 5)
    except OSError:
        return None
    try:
        return (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
    finally:
        writer.close()


async def test_endpoints_follow_the_selected_pods_and_the_host_reaches_the_cluster_ip(env: Env) -> None:
    svc = created(env, service("web", selector={"app": "greeter"}))
    ip = svc["spec"]["clusterIP"]
    # No endpoints yet: the host refuses at once, nothing leaves it.
    assert await greeting(ip, 8080) is None
    await running_pod(env, "greeter", ready=True, app="greeter")

    async def addresses() -> list[str] | None:
        try:
            endpoints = await env.client.get(ENDPOINTS, "web", env.namespace)
        except NotFound:
            return None
        found = [a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []]
        return found or None

    assert await eventually(addresses, timeout=20) == [env.pod_ip]
    endpoints = await env.client.get(ENDPOINTS, "web", env.namespace)
    assert endpoints["subsets"][0]["ports"] == [{"port": PORT, "protocol": "TCP"}]
    assert endpoints["subsets"][0]["addresses"][0]["targetRef"]["name"] == "greeter"
    slices = (await env.client.list(ENDPOINT_SLICES, env.namespace, label_selector="kubernetes.io/service-name=web"))[
        "items"
    ]
    assert [e["addresses"] for e in slices[0]["endpoints"]] == [[env.pod_ip]]
    assert slices[0]["endpoints"][0]["conditions"]["ready"] is True
    assert env.kubectl("get", "endpoints", "web").stdout.split()[4] == f"{env.pod_ip}:{PORT}"

    async def through_the_proxy() -> str | None:
        return await greeting(ip, 8080)

    assert await eventually(through_the_proxy, timeout=20) == f"hello {env.pod_ip}"
    # A pod that is no longer ready leaves the rotation.
    await set_ready(env, "greeter", ready=False)

    async def refused() -> bool:
        return await greeting(ip, 8080) is None

    await eventually(refused, timeout=20)
    not_ready = (await env.client.get(ENDPOINTS, "web", env.namespace))["subsets"][0]
    assert "addresses" not in not_ready and not_ready["notReadyAddresses"][0]["ip"] == env.pod_ip
    await set_ready(env, "greeter", ready=True)
    assert await eventually(through_the_proxy, timeout=20) == f"hello {env.pod_ip}"
    # Deleting the Service takes its Endpoints and its rules with it.
    env.kubectl("delete", "svc", "web")

    async def endpoints_gone() -> bool:
        with contextlib.suppress(NotFound):
            await env.client.get(ENDPOINTS, "web", env.namespace)
            return False
        return True

    await eventually(endpoints_gone, timeout=20)
    await eventually(refused, timeout=20)
    assert ip not in nft("list", "table", "ip", env.network.nft_table).stdout


async def greeting_in_pod(path: str, ip: str, port: int) -> str | None:
    """One connection's answer, made from inside a pod's network namespace; None when it fails."""
    probe = (
        "import socket\n"
        f"s = socket.create_connection(({ip!r}, {port}), timeout=5)\n"
        "print(s.makefile().readline().strip())\n"
    )
    process = await asyncio.create_subprocess_exec(
        *netns.enter_argv(path),
        sys.executable,
        "-c",
        probe,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await process.communicate()
    return out.decode().strip() or None if process.returncode == 0 else None


async def test_pods_reach_cluster_ips_and_the_host_reaches_node_ports(env: Env) -> None:
    svc = created(env, service("np-web", type="NodePort", selector={"app": "np-greeter"}))
    ip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    # The node's InternalIP, as an embedded node registers it.
    address = node_ip(env.home.parent, 1)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "svc-node"}}
    await env.client.create(NODES, node)
    addresses = [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": "svc-node"}]
    await env.client.patch(NODES, "svc-node", {"status": {"addresses": addresses}}, subresource="status")
    # Before the Service has endpoints the node port is refused at once, on the host.
    assert await greeting(address, node_port) is None
    await running_pod(env, "np-greeter", ready=True, app="np-greeter")

    async def through_the_node_port() -> str | None:
        return await greeting(address, node_port)

    assert await eventually(through_the_node_port, timeout=20) == f"hello {env.pod_ip}"
    # A second pod on the same node bridge reaches the ClusterIP: DNAT where the bridges end, and the reply back
    # through it (masqueraded) rather than straight over the bridge.
    uid = str(uuid.uuid4())
    await env.pods.setup({"metadata": {"uid": uid, "name": "client", "namespace": env.namespace}, "spec": {}})
    try:
        path = str(env.pods.netns_of(uid))

        async def from_the_pod() -> str | None:
            return await greeting_in_pod(path, ip, 8080)

        assert await eventually(from_the_pod, timeout=20) == f"hello {env.pod_ip}"
        # The endpoint itself through its own Service: out and back in by its bridge port (hairpin), masqueraded.
        own = str(env.pods.netns_of(env.greeter_uid))
        assert await greeting_in_pod(own, ip, 8080) == f"hello {env.pod_ip}"
        listed = await netns.run(
            [*netns.enter_argv(env.network.netns), "nft", "list", "table", "ip", env.network.nft_table]
        )
        rules = listed.decode()
        assert "hook prerouting" in rules and f"ip daddr {ip} tcp dport 8080" in rules
    finally:
        await env.pods.teardown(uid)
        env.kubectl("delete", "svc", "np-web")
        await env.client.delete(NODES, "svc-node")


async def test_the_proxy_table_is_pykubevirts_own_and_down_removes_it(env: Env, tmp_path: Path) -> None:
    listed = nft("list", "table", "ip", env.network.nft_table)
    assert listed.returncode == 0 and f"ip daddr {env.network.service_cidr}" in listed.stdout
    assert env.network.nft_table.startswith("pykubevirt-")
    # release_cluster_network (what `pykubevirt down --all` runs) is checked by the fixture's teardown too; here a
    # second table of a throwaway cluster CIDR shows it removes exactly its own.
    throwaway = choose_cluster_cidr(tmp_path)
    other = ClusterNetwork(throwaway)
    assert nft("add", "table", "ip", other.nft_table).returncode == 0
    release_cluster_network(tmp_path)
    assert nft("list", "table", "ip", other.nft_table).returncode != 0
    assert nft("list", "table", "ip", env.network.nft_table).returncode == 0


def virtctl(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    """The real virtctl console script against the module's server."""
    virtctl_env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    virtctl_env.update({"KUBECONFIG": str(env.server.kubeconfig), "HOME": str(env.home)})
    program = str(Path(sys.executable).parent / "virtctl")
    return subprocess.run([program, "-n", env.namespace, *args], env=virtctl_env, capture_output=True, text=True)


async def test_virtctl_expose_makes_upstreams_service(env: Env) -> None:
    vm = vm_manifest("exposed")
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}, "ports": [{"port": 80}, {"port": 22, "name": "ssh"}]}
    ]
    spec["networks"] = [{"name": "default", "pod": {}}]
    created_vm = await env.client.create(VIRTUAL_MACHINES, vm, env.namespace)
    result = await asyncio.to_thread(virtctl, env, "expose", "vm", "exposed", "--name", "exposed-all")
    assert (result.returncode, result.stdout) == (0, "Service exposed-all successfully created for vm exposed\n")
    svc = json.loads(env.kubectl("get", "svc", "exposed-all", "-o", "json").stdout)
    # The VM's pod-network ports, named port-N; the launcher pod's vmi.kubevirt.io/id; owned by the VM.
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("port-1", 80, 80),
        ("port-2", 22, 22),
    ]
    assert svc["spec"]["selector"] == {"vmi.kubevirt.io/id": "exposed"}
    (owner,) = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "VirtualMachine",
        created_vm["metadata"]["uid"],
        True,
        False,
    )
    assert in_range(env, svc["spec"]["clusterIP"])
    one = await asyncio.to_thread(virtctl, env, "expose", "vmi", "nothere", "--name", "x", "--port", "1")
    assert one.returncode == 1
    assert one.stderr.strip() == (
        'error fetching VirtualMachineInstance: virtualmachineinstances.kubevirt.io "nothere" not found'
    )
    clash = await asyncio.to_thread(virtctl, env, "expose", "vm", "exposed", "--name", "exposed-all", "--port", "1")
    assert clash.stderr.strip() == 'service creation failed: services "exposed-all" already exists'
    halted = await asyncio.to_thread(virtctl, env, "expose", "vm", "exposed", "--name", "x", "--type", "ExternalName")
    assert halted.stderr.strip() == "type: ExternalName not supported"
