"""The embedded cluster's Service proxy, as kube-proxy's nftables mode: it watches Services, Endpoints and Nodes and
keeps two nft tables of pykubevirt's own (rendered by service_rules) equal to them, one on the host and one in the
cluster namespace where the node bridges end, each replaced in one `nft -f` transaction whenever it changes.

`pykubevirt down --all` deletes the host's table; the cluster namespace's goes with the namespace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, Result, run_until_failure
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import ENDPOINTS, NODES, SERVICES
from pykubevirt.node import netns
from pykubevirt.node.pod_network import ClusterNetwork
from pykubevirt.node.service_rules import FAMILY, node_ips, render_pod_table, render_table, service_ports

log = logging.getLogger("pykubevirt.node.service_proxy")

NFT = "nft"
KEY = "all"
# How soon the cluster namespace's rules are retried while no node agent has made the namespace yet.
NAMESPACE_RETRY = 2.0


async def nft(script: str, *, prefix: Sequence[str] = ()) -> None:
    """Run an nft script as one transaction (in a namespace through `prefix`); RuntimeError when it is refused."""
    process = await asyncio.create_subprocess_exec(
        *prefix,
        NFT,
        "-f",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await process.communicate(script.encode())
    if process.returncode != 0:
        raise RuntimeError(f"nft -f: {err.decode(errors='replace').strip()}")


class ServiceProxy:
    """Rewrites the host's and the cluster namespace's tables whenever the rules they render change."""

    def __init__(self, client: KubeClient, network: ClusterNetwork) -> None:
        self.client = client
        self.network = network
        self.table = network.nft_table
        self.service_cidr = network.service_cidr
        self.services = Informer(client, SERVICES)
        self.endpoints = Informer(client, ENDPOINTS)
        self.nodes = Informer(client, NODES)
        self.applied = ""
        self.applied_pods = ""
        self.controller = Controller("service-proxy", self).watch(self.services, self._all)
        self.controller.watch(self.endpoints, self._all)
        self.controller.watch(self.nodes, self._all)

    @staticmethod
    def _all(obj: Object) -> list[str]:
        # One key: the tables are rendered whole, and bursts of changes coalesce into one rewrite.
        return [KEY]

    def render(self) -> tuple[str, str]:
        """The host's script and the cluster namespace's."""
        by_key = {object_key(e): e for e in self.endpoints.items()}
        ports = service_ports(self.services.items(), by_key)
        nodes = node_ips(self.nodes.items())
        return (
            render_table(self.table, self.service_cidr, ports, nodes),
            render_pod_table(self.table, self.service_cidr, ports),
        )

    async def reconcile(self, key: str) -> Result | None:
        script, pod_script = self.render()
        if script != self.applied:
            await nft(script)
            self.applied = script
            log.info("service rules updated in nft table %s %s", FAMILY, self.table)
        if pod_script == self.applied_pods:
            return None
        if not netns.exists(self.network.netns):
            # The node agents make the cluster namespace; until one has, pods cannot exist either.
            return Result(requeue_after=NAMESPACE_RETRY)
        await nft(pod_script, prefix=netns.enter_argv(self.network.netns))
        self.applied_pods = pod_script
        log.info("pod service rules updated in %s", self.network.netns)
        return None

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.services.run(), name="informer-services-proxy"),
            asyncio.create_task(self.endpoints.run(), name="informer-endpoints-proxy"),
            asyncio.create_task(self.nodes.run(), name="informer-nodes-proxy"),
            asyncio.create_task(self.controller.run(), name="service-proxy"),
        ]
        # An empty cluster still gets its reject rules.
        self.controller.queue.add(KEY)
        await run_until_failure(tasks)
