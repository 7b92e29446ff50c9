"""Node IPAM, as kube-controller-manager's node-ipam-controller with `--allocate-node-cidrs`: every Node without a
`spec.podCIDR` gets the first free /24 (`--node-cidr-mask-size`) of the cluster CIDR, set once and never changed.

The last /30 of the cluster CIDR links the host to the embedded pod network, so the subnet holding it is never given.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging

from pykubevirt.client.api import KubeClient
from pykubevirt.client.controller import Controller, Result, run_until_failure
from pykubevirt.client.errors import NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import NODES

log = logging.getLogger("pykubevirt.controller.node_ipam")

DEFAULT_NODE_MASK = 24


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


class NodeIpamController:
    """Allocates node podCIDRs; one worker, so two nodes are never given the same subnet."""

    def __init__(self, client: KubeClient, cluster_cidr: str, *, mask: int = DEFAULT_NODE_MASK) -> None:
        self.client = client
        self.cluster_cidr = str(ipaddress.IPv4Network(cluster_cidr))
        self.mask = mask
        self.nodes = Informer(client, NODES)
        self.recorder = EventRecorder(client, "node-ipam-controller")
        # Given but maybe not yet in the cache: kept so a quick second node never gets the same subnet.
        self.allocated: dict[str, str] = {}
        self.controller = Controller("node-ipam", self, workers=1).watch(self.nodes)

    async def reconcile(self, key: str) -> Result | None:
        node = self.nodes.get(key)
        if node is None:
            self.allocated.pop(key, None)
            return None
        spec = node.get("spec") or {}
        if spec.get("podCIDR"):
            self.allocated[key] = str(spec["podCIDR"])
            return None
        if key in self.allocated:
            return None  # given already; the cache has not seen that write yet (a podCIDR is never changed)
        taken = {str((n.get("spec") or {}).get("podCIDR") or "") for n in self.nodes.items()}
        try:
            subnet = free_subnet(self.cluster_cidr, taken | set(self.allocated.values()), self.mask)
        except CIDRSetFull as exc:
            self.recorder.event(node, WARNING, "CIDRNotAvailable", f"Node {key} status is now: CIDRNotAvailable")
            log.warning("%s", exc)
            return Result(requeue_after=30.0)
        try:
            await self.client.patch(NODES, key, {"spec": {"podCIDR": subnet, "podCIDRs": [subnet]}})
        except NotFound:
            return None
        self.allocated[key] = subnet
        self.recorder.event(node, NORMAL, "CIDRAssignmentSucceeded", f"Node {key} got podCIDR {subnet}")
        log.info("node %s: podCIDR %s", key, subnet)
        return None

    async def run(self) -> None:
        """The node informer and the controller, until cancelled."""
        tasks = [
            asyncio.create_task(self.nodes.run(), name="informer-nodes-ipam"),
            asyncio.create_task(self.controller.run(), name="node-ipam-controller"),
        ]
        await run_until_failure(tasks)
