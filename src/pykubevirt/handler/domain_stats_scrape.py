"""virt-handler's /metrics: one `domainstats` request to each launcher on the node per scrape, gathered concurrently.

Each launcher owns its libvirt (`qemu:///embed`), so there is no node-wide libvirt whose bulk stats call could cover
every domain at once; KubeVirt's handler likewise asks each launcher for its domain's stats (GetDomainStats) through
a concurrent collector with a bounded number of requests in flight and a collection timeout. A launcher that does not
answer in time leaves its VMI out of this scrape instead of delaying the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import REGISTRY, generate_latest

from pykubevirt.api import constants as c
from pykubevirt.handler import domain_metrics
from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient, LauncherUnavailable, ProtocolMismatch
from pykubevirt.handler.vmi_reconciler import active_pod_uid
from pykubevirt.launcher.protocol import Command
from pykubevirt.metrics.exposition import Descriptor, Sample, families, render

log = logging.getLogger("pykubevirt.handler.metrics")

# Requests in flight at once (KubeVirt's --max-metric-requests is 3 for its gRPC calls; these are cheap unix-socket
# lines answered from a worker thread, and a node's whole scrape should stay well under Prometheus' timeout).
MAX_REQUESTS_IN_FLIGHT = 32
# A launcher's answer after this is dropped from the scrape (KubeVirt's CollectionTimeout is 10 s for all of it).
COLLECTION_TIMEOUT_SECONDS = 5.0
HANDLER_UP = "kubevirt_virt_handler_up"
CATALOG = (
    *domain_metrics.CATALOG,
    Descriptor(HANDLER_UP, "gauge", "The number of virt-handler pods that are up."),
)
# Phases in which a VMI's launcher may have a domain to report.
_REPORTED_PHASES = frozenset({c.PHASE_SCHEDULED, c.PHASE_RUNNING})


class VMIStore(Protocol):
    """The VMIs of this node (the handler's informer)."""

    def items(self) -> list[dict[str, Any]]: ...


class DomainStatsScraper:
    """Collects the per-VMI domain metrics of the VMIs the node's informer holds."""

    def __init__(self, *, node: str, pods_dir: Path, vmis: VMIStore) -> None:
        self.node = node
        self.pods_dir = pods_dir
        self.vmis = vmis
        self._in_flight = asyncio.Semaphore(MAX_REQUESTS_IN_FLIGHT)

    async def _stats(self, vmi: dict[str, Any]) -> Mapping[str, Any] | None:
        pod_uid = active_pod_uid(vmi, self.node, self.pods_dir)
        if not pod_uid:
            return None
        launcher = LauncherClient.of_pod(self.pods_dir, pod_uid)
        async with self._in_flight:
            try:
                return await asyncio.wait_for(launcher.request(Command.DOMAIN_STATS), COLLECTION_TIMEOUT_SECONDS)
            except (LauncherUnavailable, CommandFailed, ProtocolMismatch, TimeoutError) as exc:
                log.debug("no domain stats for %s: %s", vmi["metadata"].get("name"), exc)
                return None

    async def samples(self) -> list[Sample]:
        vmis = [
            vmi
            for vmi in self.vmis.items()
            if (vmi.get("status") or {}).get("phase") in _REPORTED_PHASES
            and (vmi.get("status") or {}).get("nodeName") == self.node
        ]
        replies = await asyncio.gather(*(self._stats(vmi) for vmi in vmis))
        samples = [Sample(HANDLER_UP, {}, 1.0)]
        for vmi, reply in zip(vmis, replies, strict=True):
            if reply is not None:
                samples.extend(domain_metrics.vmi_samples(vmi, reply))
        return samples

    async def exposition(self) -> bytes:
        """The scrape's body in Prometheus' text format: the domain metrics, then the process-wide ones (REST
        client and work queues under KubeVirt's names, and the process' own)."""
        return render(families(CATALOG, await self.samples())) + generate_latest(REGISTRY)
