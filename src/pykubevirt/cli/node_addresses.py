"""The loopback address each embedded node registers as its InternalIP, so traffic between nodes crosses addresses.

A cluster's nodes share 127.A.B.0/24 with A.B taken from a hash of the cluster's data directory, node N (from 1)
getting 127.A.B.N: two clusters on one host get different addresses, while restarts keep theirs. Linux routes all
of 127.0.0.0/8 to the loopback interface, so nothing needs configuring and nothing is reachable off the host.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
from pathlib import Path

DEFAULT_NODE_IP = "127.0.0.1"
MAX_NODES = 254
# 127.0.0.0/24 (the API server's 127.0.0.1) and 127.0.1.0/24 (Debian's hostname entry) are left to the host.
_RESERVED_SUBNETS = 2


def cluster_subnet(data_dir: Path) -> ipaddress.IPv4Network:
    """The /24 inside 127.0.0.0/8 this cluster's nodes take their addresses from."""
    digest = hashlib.sha256(str(Path(data_dir).resolve()).encode()).digest()
    index = _RESERVED_SUBNETS + int.from_bytes(digest[:4], "big") % (2**16 - _RESERVED_SUBNETS)
    return ipaddress.IPv4Network((0x7F000000 | (index << 8), 24))


def node_ip(data_dir: Path, ordinal: int) -> str:
    """The InternalIP of the cluster's node number `ordinal` (1-based)."""
    if not 1 <= ordinal <= MAX_NODES:
        raise ValueError(f"node number {ordinal}: an embedded cluster has 1 to {MAX_NODES} nodes")
    return str(cluster_subnet(data_dir).network_address + ordinal)


def loopback_ip(value: str) -> str:
    """argparse type of --node-ip: loopback only, as the node's log and handler endpoints are unauthenticated."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address") from None
    if not address.is_loopback:
        raise argparse.ArgumentTypeError(f"{value} is not a loopback address (embedded nodes listen only on loopback)")
    return str(address)


def any_ip(value: str) -> str:
    """argparse type of an --node-ip that may leave loopback (checked against the other flags by the command)."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address") from None


def is_loopback(value: str) -> bool:
    return ipaddress.ip_address(value).is_loopback


def add_node_ip_flag(parser: argparse.ArgumentParser, *, loopback_only: bool = True, help: str = "") -> None:
    parser.add_argument(
        "--node-ip",
        type=loopback_ip if loopback_only else any_ip,
        default=DEFAULT_NODE_IP,
        help=help or f"the node's InternalIP, a loopback address its endpoints listen on (default {DEFAULT_NODE_IP})",
    )
