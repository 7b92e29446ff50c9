"""Which cluster CIDR an embedded cluster's pod network uses: a /16 of 10.0.0.0/8 that nothing on this host routes
or holds, chosen once per data dir (recorded in it) and reserved host-wide by creating the cluster's namespace.
`down --all` releases it, but the data dir remembers it, and the next `up` takes it again if it is still free.

Where the host has IPv6 the cluster is dual-stack: next to 10.N.0.0/16 it takes the unique local /48 `fd70:6b76:N::`
("pkv"), recorded as kube's `--cluster-cidr` takes both, "10.N.0.0/16,fd70:6b76:N::/48". A host with IPv6 disabled,
or whose own routes hold that /48, gets the IPv4 CIDR alone and runs the pod network IPv4 only.
"""

from __future__ import annotations

import fcntl
import ipaddress
import shutil
import subprocess
from pathlib import Path

from pykubevirt.node import netns
from pykubevirt.node.pod_network import LOCK_DIR, ClusterNetwork, ipv6_enabled, split_cidrs

CIDR_FILE = "cluster-cidr"
# The CIDR a `down --all` released: the next `up` takes it again when it is still free, so the data dir's Nodes keep
# their podCIDRs.
RELEASED_CIDR_FILE = "cluster-cidr.released"
# 10.96.0.0/12 is Kubernetes' default Service range and 10.244.0.0/16 its common pod range: left to real clusters.
CANDIDATES = [f"10.{n}.0.0/16" for n in range(128, 240)]
IPV6_PREFIX = "fd70:6b76"


def ipv6_cidr_for(ipv4_cidr: str) -> str:
    """The unique local /48 paired with the cluster's 10.N.0.0/16."""
    second = ipaddress.IPv4Network(ipv4_cidr).network_address.packed[1]
    return f"{IPV6_PREFIX}:{second:x}::/48"


def recorded_cidr(data_dir: Path) -> str:
    """The cluster CIDR this data dir's cluster uses ("" when it has no pod network)."""
    try:
        return (Path(data_dir) / CIDR_FILE).read_text().strip()
    except OSError:
        return ""


def _host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 destination and address the host's own namespace knows."""
    found = []
    for argv in (["ip", "-o", "-4", "route", "show", "table", "all"], ["ip", "-o", "-4", "addr"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            for word in line.split():
                if word[0].isdigit():
                    try:
                        found.append(ipaddress.IPv4Network(word, strict=False))
                    except ValueError:
                        continue
    return found


def _host_networks_v6() -> list[ipaddress.IPv6Network]:
    """Every IPv6 destination and address the host's own namespace knows."""
    found = []
    for argv in (["ip", "-o", "-6", "route", "show", "table", "all"], ["ip", "-o", "-6", "addr"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            for word in line.split():
                if ":" in word:
                    try:
                        network = ipaddress.IPv6Network(word, strict=False)
                    except ValueError:
                        continue
                    if network.prefixlen > 0 and not network.is_link_local and not network.is_multicast:
                        found.append(network)
    return found


def dual_stack(ipv4_cidr: str) -> str:
    """The cluster CIDR to record: "V4,V6" where the host has IPv6 and nothing of it holds the /48, else "V4"."""
    if not ipv6_enabled():
        return ipv4_cidr
    ipv6 = ipaddress.IPv6Network(ipv6_cidr_for(ipv4_cidr))
    if any(ipv6.overlaps(used) for used in _host_networks_v6()):
        return ipv4_cidr
    return f"{ipv4_cidr},{ipv6}"


def choose_cluster_cidr(data_dir: Path) -> str:
    """The data dir's cluster CIDR, choosing and reserving a free one the first time."""
    chosen = recorded_cidr(data_dir)
    if chosen:
        return chosen
    with open(f"{LOCK_DIR}/pykubevirt-cluster-cidr.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = _host_networks()
        for cidr in _preferred_first(data_dir):
            network = ipaddress.IPv4Network(cidr)
            if netns.exists(ClusterNetwork(cidr).netns) or any(network.overlaps(u) for u in used):
                continue
            subprocess.run(["ip", "netns", "add", ClusterNetwork(cidr).netns], check=True, capture_output=True)
            Path(data_dir).mkdir(parents=True, exist_ok=True)
            chosen = dual_stack(cidr)
            (Path(data_dir) / CIDR_FILE).write_text(chosen + "\n")
            return chosen
    raise RuntimeError("no free /16 in 10.128.0.0/9 for the pod network")


def _preferred_first(data_dir: Path) -> list[str]:
    """The candidates, the CIDR this data dir released last (if any) first."""
    try:
        released = split_cidrs((Path(data_dir) / RELEASED_CIDR_FILE).read_text().strip())[0]
    except OSError:
        released = ""
    return sorted(CANDIDATES, key=lambda cidr: cidr != released)


def release_cluster_network(data_dir: Path) -> None:
    """Remove the cluster's namespace (its bridges, the host veth and route go with it) and its Service proxy's nft
    table; the CIDR is no longer reserved, but remembered as the one to take again."""
    cidr = recorded_cidr(data_dir)
    if not cidr:
        return
    cluster = ClusterNetwork(cidr)
    if netns.exists(cluster.netns):
        subprocess.run(["ip", "netns", "delete", cluster.netns], check=False, capture_output=True)
    if netns.link_exists(cluster.host_veth):
        subprocess.run(["ip", "link", "delete", cluster.host_veth], check=False, capture_output=True)
    shutil.rmtree(cluster.shared_ipam_dir, ignore_errors=True)
    # The Service proxy's rules on the host (absent when it never ran: nft then fails, harmlessly).
    subprocess.run(["nft", "delete", "table", "ip", cluster.nft_table], check=False, capture_output=True)
    (Path(data_dir) / CIDR_FILE).replace(Path(data_dir) / RELEASED_CIDR_FILE)
