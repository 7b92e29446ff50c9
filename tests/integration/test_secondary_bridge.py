"""The bridge binding of a secondary (Multus) network in a real pod namespace (no QEMU): the CNI interface
`pod<hash>` as the bridge plugin leaves it, the launcher's plumbing run inside the pod, KubeVirt's names for the
in-pod devices, and DHCP for the guest's second NIC without a default route (or no DHCP at all without IPAM)."""

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

from pykubevirt.api.kubevirt import network_names
from pykubevirt.launcher import dhcp_server
from tests.integration.test_bridge_binding import DISCOVER, in_ns, ip
from tests.paths import REPO

ADDRESS, PREFIX = "192.168.79.5", 24
POD_IFACE = network_names.hashed_interface("blue-net")
HASH = POD_IFACE.removeprefix("pod")

# Plumbs the VMI's secondary interfaces where it runs, prints what the launcher learned, serves DHCP until killed.
PLUMB = """
import asyncio, json, sys
from pathlib import Path
from pykubevirt.launcher import secondary_bridge

VMI = {"spec": {
    "networks": [{"name": "default", "pod": {}}, {"name": "blue-net", "multus": {"networkName": "blue"}}],
    "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}, {"name": "blue-net", "bridge": {}}]}},
}}

async def main():
    found = await secondary_bridge.plumb(VMI, "guest", Path(sys.argv[1]))
    print(json.dumps({"macs": found.macs, "ips": found.pod_ips, "dhcp": len(found.dhcp)}), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


@dataclass
class Namespaces:
    node: str
    pod: str
    guest: str


def make(with_address: bool) -> Namespaces:
    suffix = uuid.uuid4().hex[:6]
    ns = Namespaces(f"pkvs-n-{suffix}", f"pkvs-p-{suffix}", f"pkvs-g-{suffix}")
    for name in (ns.node, ns.pod, ns.guest):
        ip("netns", "add", name)
        ip("-n", name, "link", "set", "lo", "up")
    # The secondary network as the CNI bridge plugin leaves it without isGateway: a bridge with no address.
    ip("-n", ns.node, "link", "add", "blue", "type", "bridge")
    ip("-n", ns.node, "link", "set", "blue", "up")
    ip("-n", ns.node, "link", "add", "veth0", "type", "veth", "peer", "name", POD_IFACE, "netns", ns.pod)
    ip("-n", ns.node, "link", "set", "veth0", "master", "blue", "up")
    if with_address:
        ip("-n", ns.pod, "addr", "add", f"{ADDRESS}/{PREFIX}", "dev", POD_IFACE)
    ip("-n", ns.pod, "link", "set", POD_IFACE, "up")
    return ns


@pytest.fixture
def namespaces() -> Iterator[list[Namespaces]]:
    made: list[Namespaces] = []
    try:
        yield made
    finally:
        for ns in made:
            for name in (ns.node, ns.pod, ns.guest):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def launch(ns: Namespaces, cache_dir: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
    launcher = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{ns.pod}", "--", sys.executable, "-c", PLUMB, str(cache_dir)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert launcher.stdout is not None
    line = launcher.stdout.readline()
    assert line, "the plumbing failed"
    return launcher, json.loads(line)


def test_a_secondary_interface_gets_kubevirts_devices_and_dhcp_without_a_default_route(
    namespaces: list[Namespaces], tmp_path: Path
) -> None:
    ns = make(with_address=True)
    namespaces.append(ns)
    pod_mac = json.loads(ip("-n", ns.pod, "-j", "link", "show", POD_IFACE))[0]["address"]
    launcher, learned = launch(ns, tmp_path)
    try:
        assert learned == {"macs": {"blue-net": pod_mac}, "ips": {"blue-net": [ADDRESS]}, "dhcp": 1}
        links = {link["ifname"]: link for link in json.loads(ip("-n", ns.pod, "-d", "-j", "addr", "show"))}
        nic, bridge, tap, holder = links[f"{HASH}-nic"], links[f"k6t-{HASH}"], links[f"tap{HASH}"], links[POD_IFACE]
        assert nic["master"] == tap["master"] == f"k6t-{HASH}"
        assert nic["addr_info"] == [] and nic["address"] != pod_mac
        assert holder["address"] == pod_mac and "UP" not in holder["flags"]
        assert [(a["local"], a["prefixlen"]) for a in holder["addr_info"]] == [(ADDRESS, PREFIX)]
        # The interface's index in the VMI (1) names the bridge's fake address, the DHCP server's identity.
        assert [(a["local"], a["prefixlen"]) for a in bridge["addr_info"] if a["family"] == "inet"] == [
            ("169.254.75.11", 32)
        ]

        # A stand-in guest where QEMU's tap would be, with the CNI interface's MAC.
        ip("-n", ns.pod, "link", "add", "gst0", "type", "veth", "peer", "name", "eth0", "netns", ns.guest)
        ip("-n", ns.pod, "link", "set", "gst0", "master", f"k6t-{HASH}", "up")
        ip("-n", ns.guest, "link", "set", "eth0", "address", pod_mac, "up")
        offer = in_ns(ns.guest, sys.executable, "-c", DISCOVER, pod_mac)
        assert offer.returncode == 0, offer.stderr
        answer = json.loads(offer.stdout)
        options = {int(k): bytes.fromhex(v) for k, v in answer["options"].items()}
        assert answer["yiaddr"] == ADDRESS
        assert socket.inet_ntoa(options[dhcp_server.OPT_SERVER_ID]) == "169.254.75.11"
        # No gateway on the network: no router, so the guest's default route stays on the pod network.
        assert dhcp_server.OPT_ROUTER not in options and dhcp_server.OPT_CLASSLESS_ROUTES not in options

        # A restarted launcher finds the devices, takes the interface's facts from its cache, serves the same lease.
        launcher.kill()
        launcher.wait()
        launcher, again = launch(ns, tmp_path)
        assert again == learned
        second = in_ns(ns.guest, sys.executable, "-c", DISCOVER, pod_mac)
        assert json.loads(second.stdout)["yiaddr"] == ADDRESS, second.stderr
    finally:
        launcher.kill()
        launcher.wait()


def test_without_ipam_the_guest_gets_no_dhcp(namespaces: list[Namespaces], tmp_path: Path) -> None:
    ns = make(with_address=False)
    namespaces.append(ns)
    launcher, learned = launch(ns, tmp_path)
    try:
        assert learned["dhcp"] == 0 and learned["ips"] == {"blue-net": []}
        bridge = json.loads(ip("-n", ns.pod, "-j", "addr", "show", "dev", f"k6t-{HASH}"))[0]
        assert [a for a in bridge["addr_info"] if a["family"] == "inet"] == []
    finally:
        launcher.kill()
        launcher.wait()
