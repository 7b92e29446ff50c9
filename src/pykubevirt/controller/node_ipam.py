"""Node IPAM, as kube-controller-manager's node-ipam-controller with `--allocate-node-cidrs`: every Node without a
`spec.podCIDR` gets the first free /24 (`--node-cidr-mask-size`) of the cluster CIDR, set once and never changed.
A dual-stack cluster CIDR ("V4,V6", as kube's `--cluster-cidr`) gives each Node a /64 of the IPv6 one as well
(`--node-cidr-mask-size-ipv6`): `spec.podCIDRs` lists both, IPv4 first, and `spec.podCIDR` is the IPv4 one.

The last /30 of the IPv4 cluster CIDR, and the last /64 of the IPv6 one, link the host to the embedded pod network,
so the subnets holding them are never given.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.controller import Controller, Result, run_until_failure
from pykubevirt.client.errors import NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import NODES

log = logging.getLogger("pykubevirt.controller.node_ipam")

DEFAULT_NODE_MASK = 24
DEFAULT_NODE_MASK_V6 = 64


class CIDRSetFull(Exception):
    """Every node subnet of the cluster CIDR is taken (kube-controller-manager's CIDRNotAvailable)."""


def free_subnet(cluster_cidr: str, taken: set[str], mask: int = DEFAULT_NODE_MASK) -> str:
    """The first /mask of the cluster CIDR that no node has, skipping the one holding the host link."""
    network = ipaddress.IPv4Network(cluster_cidr)
    used = {ipaddress.IPv4Network(cidr) for cidr in taken if cidr and ":" not in cidr}
    host_link = ipaddress.IPv4Network(f"{network.broadcast_address - 3}/30")
    for subnet in network.subnets(new_prefix=mask):
        if subnet.overlaps(host_link) or any(subnet.overlaps(u) for u in used):
            continue
        return str(subnet)
    raise CIDRSetFull(f"no remaining /{mask} in cluster CIDR {cluster_cidr}")


def free_subnet_v6(cluster_cidr: str, taken: set[str], mask: int = DEFAULT_NODE_MASK_V6) -> str:
    """The first IPv6 /mask of the cluster CIDR that no node has, never the last one (the host link's)."""
    network = ipaddress.IPv6Network(cluster_cidr)
    used = {ipaddress.IPv6Network(cidr) for cidr in taken if cidr and ":" in cidr}
    last = network.broadcast_address
    for subnet in network.subnets(new_prefix=mask):
        if last in subnet:
            break
        if any(subnet.overlaps(u) for u in used):
            continue
        return str(subnet)
    raise CIDRSetFull(f"no remaining /{mask} in cluster CIDR {cluster_cidr}")


def split_cluster_cidr(cluster_cidr: str) -> tuple[str, str]:
    """ "V4[,V6]" as (IPv4 CIDR, IPv6 CIDR or "")."""
    ipv4 = ipv6 = ""
    for part in (p.strip() for p in cluster_cidr.split(",") if p.strip()):
        if ":" in part:
            ipv6 = ipv6 or str(ipaddress.IPv6Network(part))
        else:
            ipv4 = ipv4 or str(ipaddress.IPv4Network(part))
    if not ipv4:
        raise ValueError(f"cluster CIDR {cluster_cidr!r} has no IPv4 CIDR")
    return ipv4, ipv6


class NodeIpamController:
    """Allocates node podCIDRs; one worker, so two nodes are never given the same subnet."""

    def __init__(self, client: KubeClient, cluster_cidr: str, *, mask: int = DEFAULT_NODE_MASK) -> None:
        self.client = client
        self.cluster_cidr, self.cluster_cidr_v6 = split_cluster_cidr(cluster_cidr)
        self.mask = mask
        self.nodes = Informer(client, NODES)
        self.recorder = EventRecorder(client, "node-ipam-controller")
        # Given but maybe not yet in the cache: kept so a quick second node never gets the same subnets.
        self.allocated: dict[str, list[str]] = {}
        self.controller = Controller("node-ipam", self, workers=1).watch(self.nodes)

    def _taken(self) -> set[str]:
        taken = {str(c) for n in self.nodes.items() for c in _node_cidrs(n)}
        return taken | {c for given in self.allocated.values() for c in given}

    async def reconcile(self, key: str) -> Result | None:
        node = self.nodes.get(key)
        if node is None:
            self.allocated.pop(key, None)
            return None
        spec = node.get("spec") or {}
        if spec.get("podCIDR"):
            self.allocated[key] = _node_cidrs(node)
            return None
        if key in self.allocated:
            return None  # given already; the cache has not seen that write yet (a podCIDR is never changed)
        taken = self._taken()
        try:
            subnets = [free_subnet(self.cluster_cidr, taken, self.mask)]
            if self.cluster_cidr_v6:
                subnets.append(free_subnet_v6(self.cluster_cidr_v6, taken))
        except CIDRSetFull as exc:
            self.recorder.event(node, WARNING, "CIDRNotAvailable", f"Node {key} status is now: CIDRNotAvailable")
            log.warning("%s", exc)
            return Result(requeue_after=30.0)
        try:
            await self.client.patch(NODES, key, {"spec": {"podCIDR": subnets[0], "podCIDRs": subnets}})
        except NotFound:
            return None
        self.allocated[key] = subnets
        shown = ",".join(subnets)
        self.recorder.event(node, NORMAL, "CIDRAssignmentSucceeded", f"Node {key} got podCIDR {shown}")
        log.info("node %s: podCIDRs %s", key, shown)
        return None

    async def run(self) -> None:
        """The node informer and the controller, until cancelled."""
        tasks = [
            asyncio.create_task(self.nodes.run(), name="informer-nodes-ipam"),
            asyncio.create_task(self.controller.run(), name="node-ipam-controller"),
        ]
        await run_until_failure(tasks)


def _node_cidrs(node: dict[str, Any]) -> list[str]:
    spec = node.get("spec") or {}
    return [str(c) for c in spec.get("podCIDRs") or [] if c] or ([str(spec["podCIDR"])] if spec.get("podCIDR") else [])
