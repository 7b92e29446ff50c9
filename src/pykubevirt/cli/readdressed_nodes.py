"""Nodes left with a podCIDR of the data dir's former cluster CIDR, retired before the node agents start.

`up` takes the CIDR its `down --all` released when it is still free; when another cluster on the host took it
meanwhile, it takes another, and the Nodes in the API server's store keep podCIDRs the host no longer routes into
this cluster. A podCIDR never changes, and a kubelet may not delete its own Node, so the supervisor does, as the
cluster's administrator would: each node agent then registers its Node anew and node IPAM gives it a podCIDR of the
new CIDR. Labels and taints set on the old Nodes go with them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pykubevirt.cli.component_client import admin_client
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import NODES
from pykubevirt.node.pod_network import node_pod_cidrs, outside_cluster

log = logging.getLogger("pykubevirt.cli.readdressed_nodes")


async def retire_readdressed_nodes(client: KubeClient, cluster_cidr: str) -> list[str]:
    """Delete the Nodes whose podCIDRs lie outside `cluster_cidr`; returns their names."""
    retired = []
    for node in (await client.list(NODES))["items"]:
        name, given = str(node["metadata"]["name"]), node_pod_cidrs(node)
        if not outside_cluster(given, cluster_cidr):
            continue
        log.warning(
            "node %s has podCIDRs %s outside the cluster CIDR %s: deleting it, so that it registers anew",
            name,
            given,
            cluster_cidr,
            extra={"node": name},
        )
        try:
            await client.delete(NODES, name)
        except NotFound:
            continue
        retired.append(name)
    return retired


async def retire_with_kubeconfig(kubeconfig: Path, cluster_cidr: str) -> list[str]:
    """The same through the admin kubeconfig; a failure is logged, and the node agents start regardless."""
    client = admin_client(kubeconfig, "pykubevirt-supervisor")
    if client is None:
        log.warning("cannot look for readdressed nodes: no admin kubeconfig at %s", kubeconfig)
        return []
    try:
        return await retire_readdressed_nodes(client, cluster_cidr)
    except (ApiError, OSError) as exc:
        log.warning("cannot look for readdressed nodes: %s", exc)
        return []
    finally:
        await client.close()
