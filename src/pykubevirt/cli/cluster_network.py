"""Which cluster CIDR an embedded cluster's pod network uses: a /16 of 10.0.0.0/8 that nothing on this host routes
or holds, chosen once per data dir (recorded in it) and reserved host-wide by creating the cluster's namespace.
"""

from __future__ import annotations

import fcntl
import ipaddress
import shutil
import subprocess
from pathlib import Path

from pykubevirt.node import netns
from pykubevirt.node.pod_network import LOCK_DIR, ClusterNetwork

CIDR_FILE = "cluster-cidr"
# 10.96.0.0/12 is Kubernetes' default Service range and 10.244.0.0/16 its common pod range: left to real clusters.
CANDIDATES = [f"10.{n}.0.0/16" for n in range(128, 240)]


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


def choose_cluster_cidr(data_dir: Path) -> str:
    """The data dir's cluster CIDR, choosing and reserving a free one the first time."""
    chosen = recorded_cidr(data_dir)
    if chosen:
        return chosen
    with open(f"{LOCK_DIR}/pykubevirt-cluster-cidr.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        used = _host_networks()
        for cidr in CANDIDATES:
            network = ipaddress.IPv4Network(cidr)
            if netns.exists(ClusterNetwork(cidr).netns) or any(network.overlaps(u) for u in used):
                continue
            subprocess.run(["ip", "netns", "add", ClusterNetwork(cidr).netns], check=True, capture_output=True)
            Path(data_dir).mkdir(parents=True, exist_ok=True)
            (Path(data_dir) / CIDR_FILE).write_text(cidr + "\n")
            return cidr
    raise RuntimeError("no free /16 in 10.128.0.0/9 for the pod network")


def release_cluster_network(data_dir: Path) -> None:
    """Remove the cluster's namespace (its bridges, the host veth and route go with it) and its Service proxy's nft
    table, and forget the CIDR."""
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
    (Path(data_dir) / CIDR_FILE).unlink(missing_ok=True)
