"""The bridge binding's plumbing in a real pod namespace (no QEMU): a node namespace with a bridge and gateway, a pod
whose `eth0` is a veth on it as CNI leaves it, and the launcher's code run inside the pod. A stand-in guest (a veth
with the pod's MAC in the in-pod bridge, where QEMU's tap would be) gets the pod's IP by the launcher's DHCP and is
then reached from the node at the pod IP."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubevirt.launcher import dhcp_server
from tests.paths import REPO

POD_IP, GATEWAY, PREFIX = "10.251.77.2", "10.251.77.1", 24

# Plumbs the bridge binding in the namespace it runs in, says "ready" and keeps serving DHCP until killed.
PLUMB = """
import asyncio, sys
from pathlib import Path
from pykubevirt.launcher import bridge_binding

async def main():
    link, dhcp = await bridge_binding.plumb({"name": "default", "bridge": {}}, 0, "guest", Path(sys.argv[1]))
    print("ready", link.mac, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

# One DHCP DISCOVER from the client MAC given, on eth0; prints the answer's address and options as JSON.
DISCOVER = """
import json, socket, struct, sys
from pykubevirt.launcher import dhcp_server as d
mac = bytes.fromhex(sys.argv[1].replace(":", ""))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"eth0\\0")
s.bind(("0.0.0.0", 68))
s.settimeout(10)
header = d.HEADER.pack(1, 1, 6, 0, 0x5151, 0, 0x8000, *(b"\\0" * 4,) * 4, mac + b"\\0" * 10, b"", b"")
s.sendto(header + d.MAGIC + bytes([53, 1, d.DISCOVER, 255]), ("255.255.255.255", 67))
while True:
    answer = s.recv(2048)
    if struct.unpack_from("!I", answer, 4)[0] == 0x5151:
        break
opts = d._options(answer[d.HEADER.size + 4:])
print(json.dumps({"yiaddr": socket.inet_ntoa(answer[16:20]), "options": {k: v.hex() for k, v in opts.items()}}))
"""


# The stand-in guest's service: one connection, answered with the peer's address.
LISTEN = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080)); s.listen(); print("listening", flush=True)
c, peer = s.accept(); c.sendall(("hello " + peer[0]).encode()); c.close()
"""

CONNECT = """
import socket, sys
print(socket.create_connection((sys.argv[1], 8080), timeout=10).recv(100).decode())
"""


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def in_ns(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "--", *argv], capture_output=True, text=True)


@dataclass
class Namespaces:
    node: str
    pod: str
    guest: str


@pytest.fixture
def namespaces(tmp_path: Path) -> Iterator[Namespaces]:
    suffix = uuid.uuid4().hex[:6]
    ns = Namespaces(f"pkvt-n-{suffix}", f"pkvt-p-{suffix}", f"pkvt-g-{suffix}")
    try:
        for name in (ns.node, ns.pod, ns.guest):
            ip("netns", "add", name)
            ip("-n", name, "link", "set", "lo", "up")
        # The node side as the CNI bridge plugin leaves it: a gateway bridge and the pod's veth on it.
        ip("-n", ns.node, "link", "add", "cni0", "type", "bridge")
        ip("-n", ns.node, "addr", "add", f"{GATEWAY}/{PREFIX}", "dev", "cni0")
        ip("-n", ns.node, "link", "set", "cni0", "up")
        ip("-n", ns.node, "link", "add", "veth0", "type", "veth", "peer", "name", "eth0", "netns", ns.pod)
        ip("-n", ns.node, "link", "set", "veth0", "master", "cni0", "up")
        ip("-n", ns.pod, "addr", "add", f"{POD_IP}/{PREFIX}", "dev", "eth0")
        ip("-n", ns.pod, "link", "set", "eth0", "up")
        ip("-n", ns.pod, "route", "add", "default", "via", GATEWAY, "dev", "eth0")
        yield ns
    finally:
        for name in (ns.node, ns.pod, ns.guest):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def test_the_pods_address_moves_to_the_guest(namespaces: Namespaces, tmp_path: Path) -> None:
    ns = namespaces
    pod_mac = json.loads(ip("-n", ns.pod, "-j", "link", "show", "eth0"))[0]["address"]
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
    cache = tmp_path / "interface-cache-eth0.json"
    launcher = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{ns.pod}", "--", sys.executable, "-c", PLUMB, str(cache)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline().split() == ["ready", pod_mac]
        links = {link["ifname"]: link for link in json.loads(ip("-n", ns.pod, "-d", "-j", "addr", "show"))}
        # eth0 renamed eth0-nic: no address, the bridge's MAC, a port of k6t-eth0 that learns nothing.
        nic, bridge, dummy, tap = links["eth0-nic"], links["k6t-eth0"], links["eth0"], links["tap0"]
        assert nic["master"] == tap["master"] == "k6t-eth0"
        assert nic["addr_info"] == [] and nic["address"] == bridge["address"] != pod_mac
        assert nic["linkinfo"]["info_slave_data"]["learning"] is False
        # A dummy eth0 keeps the pod's MAC and IP; the bridge has KubeVirt's fake address.
        assert dummy["linkinfo"]["info_kind"] in ("dummy", "bridge") and "UP" not in dummy["flags"]
        assert dummy["address"] == pod_mac
        assert [(a["local"], a["prefixlen"]) for a in dummy["addr_info"]] == [(POD_IP, PREFIX)]
        bridge_v4 = [(a["local"], a["prefixlen"]) for a in bridge["addr_info"] if a["family"] == "inet"]
        assert bridge_v4 == [("169.254.75.10", 32)]
        arp_ignore = in_ns(ns.pod, "cat", "/proc/sys/net/ipv4/conf/all/arp_ignore").stdout.strip()
        assert arp_ignore == "1"
        assert json.loads(cache.read_text())["ipv4"] == [f"{POD_IP}/{PREFIX}"]

        # The stand-in guest sits where QEMU's tap is: a port of k6t-eth0, with the pod's MAC.
        ip("-n", ns.pod, "link", "add", "gst0", "type", "veth", "peer", "name", "eth0", "netns", ns.guest)
        ip("-n", ns.pod, "link", "set", "gst0", "master", "k6t-eth0", "up")
        ip("-n", ns.guest, "link", "set", "eth0", "address", pod_mac, "up")
        offer = in_ns(ns.guest, sys.executable, "-c", DISCOVER, pod_mac)
        assert offer.returncode == 0, offer.stderr
        answer = json.loads(offer.stdout)
        options = {int(k): bytes.fromhex(v) for k, v in answer["options"].items()}
        assert answer["yiaddr"] == POD_IP
        assert socket.inet_ntoa(options[dhcp_server.OPT_SUBNET]) == "255.255.255.0"
        assert socket.inet_ntoa(options[dhcp_server.OPT_ROUTER]) == GATEWAY
        assert socket.inet_ntoa(options[dhcp_server.OPT_SERVER_ID]) == "169.254.75.10"
        assert options[dhcp_server.OPT_CLASSLESS_ROUTES] == dhcp_server.classless_routes([("0.0.0.0/0", GATEWAY)])
        assert options[dhcp_server.OPT_HOSTNAME] == b"guest"

        # A restarted launcher finds the bridge, takes the pod's facts from its cache and serves the same lease.
        launcher.kill()
        launcher.wait()
        launcher = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns.pod}", "--", sys.executable, "-c", PLUMB, str(cache)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert launcher.stdout is not None
        assert launcher.stdout.readline().split() == ["ready", pod_mac]
        again = in_ns(ns.guest, sys.executable, "-c", DISCOVER, pod_mac)
        assert json.loads(again.stdout)["yiaddr"] == POD_IP, again.stderr

        # The guest configures what it was given; the node reaches it at the pod IP, and it reaches the gateway.
        ip("-n", ns.guest, "addr", "add", f"{POD_IP}/{PREFIX}", "dev", "eth0")
        ip("-n", ns.guest, "route", "add", "default", "via", GATEWAY)
        listener = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{ns.guest}", "--", sys.executable, "-c", LISTEN],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
            # The node connects to the pod IP: the guest answers ARP for it (not the pod) and the TCP handshake.
            hello = in_ns(ns.node, sys.executable, "-c", CONNECT, POD_IP)
            assert hello.stdout.strip() == f"hello {GATEWAY}", hello.stderr
            neighbours = json.loads(ip("-n", ns.node, "-j", "neigh", "show", POD_IP))
            assert neighbours[0]["lladdr"] == pod_mac
        finally:
            listener.kill()
            listener.wait()
    finally:
        launcher.kill()
        launcher.wait()
