"""Masquerade over IPv6 without QEMU: a dual-stack pod from the real CNI plugins, the launcher's masquerade plumbing
run in its namespace (as the launcher runs it), and a stand-in guest: a namespace of the test's own whose veth is a
port of `k6t-eth0`, as the guest's tap would be. The guest asks the launcher's DHCPv6 server for its address and takes
its default route from the launcher's router advertisements; then the host reaches it at the pod's IPv6 address
through KubeVirt's `ip6 nat` rules, only on the interface's `ports`, and its own traffic leaves as the pod's IPv6."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.controller.node_ipam import free_subnet, free_subnet_v6
from pykubevirt.node import netns
from pykubevirt.node.pod_network import PodNetwork, split_cidrs
from tests.paths import REPO
from tests.support.waiting import eventually

# The launcher's masquerade plumbing with `ports: [80]`, kept running (its DHCP servers live with it).
PLUMB = """
import asyncio
from pykubevirt.launcher import masquerade

async def main():
    pod = masquerade.pod_interface()
    servers = await masquerade.plumb({"name": "default", "masquerade": {}, "ports": [{"port": 80}]}, pod, "v6guest")
    print("ready " + " ".join(pod.ips), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

# A DHCPv6 client of the stand-in guest: Solicit with an IA_NA, then print the address of the Advertise.
DHCP6_CLIENT = """
import ipaddress, socket, struct, sys
from pykubevirt.launcher import dhcpv6_server as v6
sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"geth0\\0")
sock.bind(("::", v6.CLIENT_PORT))
sock.settimeout(1.0)
duid = struct.pack("!HH", 3, 1) + bytes.fromhex("525400000001")
solicit = bytes([v6.SOLICIT]) + b"\\x01\\x02\\x03" + v6.option(v6.OPT_CLIENTID, duid)
solicit += v6.option(v6.OPT_IA_NA, b"\\x00\\x00\\x00\\x01" + struct.pack("!II", 0, 0))
for _ in range(20):
    sock.sendto(solicit, (v6.ALL_SERVERS, v6.SERVER_PORT, 0, socket.if_nametoindex("geth0")))
    try:
        data = sock.recv(1500)
    except TimeoutError:
        continue
    kind, xid, options = v6.parse_message(data)
    ia = dict(options)[v6.OPT_IA_NA]
    iaaddr = dict(v6.parse_options(ia[12:]))[v6.OPT_IAADDR]
    print(json.dumps({"kind": kind, "address": str(ipaddress.IPv6Address(iaaddr[:16]))}))
    sys.exit(0)
sys.exit("no DHCPv6 answer")
""".replace("import ipaddress,", "import json, ipaddress,")

# The guest's services: on [::]:80 (forwarded) and [::]:8080 (not in ports), each answering with the peer it saw.
GUEST_SERVERS = """
import socket, threading
def listen(port):
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port)); s.listen()
    return s
def serve(s, port):
    while True:
        c, peer = s.accept(); c.sendall(("guest %d %s" % (port, peer[0])).encode()); c.close()
sockets = {port: listen(port) for port in (80, 8080)}
threading.Thread(target=serve, args=(sockets[8080], 8080), daemon=True).start()
print("ready", flush=True)
serve(sockets[80], 80)
"""


@dataclass
class Env:
    network: PodNetwork
    uid: str
    pod_ns: str
    guest_ns: str
    ipv4: str
    ipv6: str
    plumbing: asyncio.subprocess.Process
    env_path: str


async def python_in(ns: str, code: str, *args: str, env_path: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *netns.enter_argv(ns), "env", f"PYTHONPATH={env_path}", sys.executable, "-c", code, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    cidr = choose_cluster_cidr(tmp_path)
    network = PodNetwork(cidr, f"v6-{uuid.uuid4().hex[:6]}", tmp_path / "node")
    if not network.cluster.has_ipv6:
        release_cluster_network(tmp_path)
        pytest.fail("this test needs a host with IPv6 (net.ipv6.conf.all.disable_ipv6 = 0)")
    ipv4, ipv6 = split_cidrs(cidr)
    guest_ns = f"pkvtestguest-{uuid.uuid4().hex[:8]}"
    plumbing: asyncio.subprocess.Process | None = None
    uid = str(uuid.uuid4())
    try:
        await network.start(f"{free_subnet(ipv4, set())},{free_subnet_v6(ipv6, set())}")
        ips = await network.setup({"metadata": {"uid": uid, "name": "v6", "namespace": "v6"}, "spec": {}})
        pod_ns = network.netns_of(uid)
        assert pod_ns is not None and len(ips) == 2
        env_path = f"{REPO / 'src'}:{REPO}"
        plumbing = await python_in(pod_ns, PLUMB, env_path=env_path)
        assert plumbing.stdout is not None
        line = (await asyncio.wait_for(plumbing.stdout.readline(), 30)).decode().split()
        assert line[:1] == ["ready"], (await plumbing.stderr.read()).decode() if plumbing.stderr else line
        assert line[1:] == ips
        # The stand-in guest: its own namespace, a veth whose pod end is a port of k6t-eth0.
        await netns.add(guest_ns)
        await netns.run([*netns.enter_argv(guest_ns), "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"])
        await netns.run(["ip", "-n", pod_ns, "link", "add", "gst0", "type", "veth", "peer", "geth0", "netns", guest_ns])
        await netns.run(["ip", "-n", pod_ns, "link", "set", "gst0", "master", "k6t-eth0", "up"])
        await netns.run(["ip", "-n", guest_ns, "link", "set", "geth0", "up"])
        yield Env(network, uid, pod_ns, guest_ns, ips[0], ips[1], plumbing, env_path)
    finally:
        if plumbing is not None and plumbing.returncode is None:
            plumbing.kill()
            await plumbing.wait()
        await netns.delete(guest_ns)
        with contextlib.suppress(netns.NetworkError):
            await network.teardown(uid)
        release_cluster_network(tmp_path)


async def connect(host: str, port: int) -> str:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
    try:
        return (await asyncio.wait_for(reader.read(200), 5.0)).decode()
    finally:
        writer.close()


async def test_the_guest_gets_its_ipv6_by_dhcpv6_and_is_reached_at_the_pod_ipv6_only_on_its_ports(env: Env) -> None:
    # DHCPv6: the launcher advertises fd10:0:2::2 to the guest.
    client = await python_in(env.guest_ns, DHCP6_CLIENT, env_path=env.env_path)
    out, err = await asyncio.wait_for(client.communicate(), 60)
    assert client.returncode == 0, err.decode()
    assert json.loads(out) == {"kind": 2, "address": "fd10:0:2::2"}
    await netns.run(["ip", "-n", env.guest_ns, "addr", "add", "fd10:0:2::2/120", "dev", "geth0", "nodad"])

    # Router advertisements: the guest's kernel takes its default route from them (via the bridge's link-local).
    async def default_route() -> str | None:
        out = (await netns.run(["ip", "-n", env.guest_ns, "-6", "route", "show", "default"])).decode()
        return out if "via fe80::ff:fe00:0" in out else None

    route = await eventually(default_route, timeout=20.0)
    assert "dev geth0" in route

    servers = await python_in(env.guest_ns, GUEST_SERVERS, env_path=env.env_path)
    try:
        assert servers.stdout is not None
        assert (await asyncio.wait_for(servers.stdout.readline(), 20)).strip() == b"ready"
        # The host reaches the guest's port 80 at the pod's IPv6 address (DNAT to fd10:0:2::2); the guest sees the
        # host's own address, as over IPv4 (no SNAT for a peer that is not the pod's loopback).
        host_v6 = env.network.cluster.host_address_v6
        assert await connect(env.ipv6, 80) == f"guest 80 {host_v6}"
        # 8080 is not in `ports`: not forwarded, so the pod itself refuses it.
        with pytest.raises(ConnectionRefusedError):
            await connect(env.ipv6, 8080)
        # And the guest's own traffic leaves as the pod's IPv6 address (masquerade).
        seen: list[str] = []

        async def note(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("peername")[0])
            writer.close()

        listener = await asyncio.start_server(note, host_v6, 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            dial = f"import socket; socket.create_connection(('{host_v6}', {port}), timeout=5).close()"
            dialer = await python_in(env.guest_ns, dial, env_path=env.env_path)
            _, err = await asyncio.wait_for(dialer.communicate(), 30)
            assert dialer.returncode == 0, err.decode()
            await eventually(lambda: bool(seen), timeout=5.0)
            assert seen == [env.ipv6]
        finally:
            listener.close()
    finally:
        servers.kill()
        await servers.wait()
