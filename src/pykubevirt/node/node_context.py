"""What every pod worker of one node shares: its clients, runtime, recorder and the way it reads a pod's objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.resources import CONFIG_MAPS, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, SECRETS
from pykubevirt.node import virtual_containers as virtual
from pykubevirt.node.containers import ProcessRuntime
from pykubevirt.node.cpu_manager import StaticCPUManager
from pykubevirt.node.env import Fetch
from pykubevirt.node.pod_network import PodNetwork
from pykubevirt.node.service_account_tokens import ServiceAccountTokens
from pykubevirt.node.stray_sweeper import StraySweeper


@dataclass
class NodeContext:
    """What every pod worker of one node shares."""

    client: KubeClient
    node_name: str
    runtime: ProcessRuntime
    puller: virtual.ImagePuller
    recorder: EventRecorder
    fetch: Fetch
    enqueue: Callable[[str], None]
    node_capacity: dict[str, str] = field(default_factory=dict)
    network: PodNetwork | None = None
    cpu_manager: StaticCPUManager | None = None
    strays: StraySweeper = field(default_factory=StraySweeper)
    tokens: ServiceAccountTokens | None = None


def api_fetch(client: KubeClient) -> Fetch:
    """A Fetch reading ConfigMaps, Secrets and claims straight from the API (volumes and env are built per start)."""
    kinds = {
        "ConfigMap": CONFIG_MAPS,
        "Secret": SECRETS,
        "PersistentVolumeClaim": PERSISTENT_VOLUME_CLAIMS,
        "PersistentVolume": PERSISTENT_VOLUMES,
    }

    async def fetch(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return await client.get_or_none(kinds[kind], name, namespace or None)

    return fetch
