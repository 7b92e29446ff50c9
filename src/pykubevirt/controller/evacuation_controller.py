"""KubeVirt's evacuation controller (`pkg/virt-controller/watch/drain/evacuation`): migrations off a node.

Per node: the VMIs marked for evacuation from it (`status.evacuationNodeName`, set by the eviction webhook), or all
its VMIs when the node carries the `<nodeDrainTaintKey>:NoSchedule` taint, get a VirtualMachineInstanceMigration
each, as many at once as `parallelMigrationsPerCluster` and `parallelOutboundMigrationsPerNode` leave room for.
The migration controller runs them; when one ends, the node is looked at again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import MIGRATIONS
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import LIVE_MIGRATE, LIVE_MIGRATE_IF_POSSIBLE, eviction_strategy, is_migratable
from pykubevirt.controller.node_controller import VMI_NODE_INDEX

log = logging.getLogger("pykubevirt.controller.evacuation")

EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"
EVICTION_SOURCE_ANNOTATION = "kubevirt.io/eviction-source"
GENERATE_NAME = "kubevirt-evacuation-"
PRIORITY_CRITICAL = "system-critical"
PRIORITY_MAINTENANCE = "system-maintenance"
# How soon a node waiting for migration capacity is looked at again (upstream's 5 s requeue).
CAPACITY_RECHECK_SECONDS = 5.0
MIGRATING_STRATEGIES = frozenset({LIVE_MIGRATE, LIVE_MIGRATE_IF_POSSIBLE})
# The VMI informer's index on status.evacuationNodeName: on a node without the drain taint only the VMIs marked for
# evacuation from it can need a migration, so a reconcile does not walk every VMI of the node.
VMI_EVACUATION_INDEX = "evacuation-node-name"


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def migration_active(vmim: Mapping[str, Any]) -> bool:
    return _status(vmim).get("phase") not in c.FINAL_PHASES


def vmi_migrating(vmi: Mapping[str, Any]) -> bool:
    """A migration of the VMI has been handed off and has not ended (IsMigrating-ish, by migrationState)."""
    state = _status(vmi).get("migrationState") or {}
    return bool(state) and not state.get("completed") and not state.get("failed")


def drain_tainted(node: Mapping[str, Any] | None, taint_key: str) -> bool:
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return any(t.get("key") == taint_key and t.get("effect") == "NoSchedule" for t in taints)


@dataclass(frozen=True, slots=True)
class Capacity:
    """Room for new migrations: cluster-wide and out of this node."""

    cluster: int
    node: int

    @property
    def available(self) -> int:
        return max(0, min(self.cluster, self.node))


def capacity(
    config: ClusterConfig,
    migrations: Iterable[Mapping[str, Any]],
    vmi_node: Callable[[Mapping[str, Any]], str | None],
    node: str,
) -> Capacity:
    """What the limits leave: running migrations count cluster-wide, those whose VMI is on `node` per node."""
    active = [m for m in migrations if migration_active(m)]
    from_node = sum(1 for m in active if vmi_node(m) == node)
    settings = config.migrations
    return Capacity(
        settings.parallel_migrations_per_cluster - len(active),
        settings.parallel_outbound_migrations_per_node - from_node,
    )


def needs_evacuation(vmi: Mapping[str, Any], node: str, tainted: bool, strategy: str) -> bool:
    """Whether the VMI on `node` should get an evacuation migration (before the active-migration checks)."""
    status = _status(vmi)
    if status.get("nodeName") != node or status.get("phase") in c.FINAL_PHASES:
        return False
    if not tainted and status.get("evacuationNodeName") != node:
        return False
    if strategy not in MIGRATING_STRATEGIES:
        return False
    return is_migratable(vmi)


def migration_manifest(vmi: Mapping[str, Any], node: str) -> Object:
    """The VMIM KubeVirt creates for an evacuation."""
    meta = vmi.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    descheduled = annotations.get(EVICTION_SOURCE_ANNOTATION) == "descheduler"
    return {
        "apiVersion": c.KUBEVIRT_API_VERSION,
        "kind": c.VMIM_KIND,
        "metadata": {
            "generateName": GENERATE_NAME,
            "namespace": meta.get("namespace"),
            "annotations": {EVACUATION_ANNOTATION: node},
        },
        "spec": {"vmiName": meta.get("name"), "priority": PRIORITY_MAINTENANCE if descheduled else PRIORITY_CRITICAL},
    }


class EvacuationController:
    """Reconciles one node key: creates the evacuation migrations its VMIs need and the limits allow."""

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Informer,
        vmis: Informer,
        pods: Informer,
        migrations: Informer,
        recorder: EventRecorder,
        config: Callable[[], ClusterConfig],
        pod_owner_index: str,
    ) -> None:
        self.client = client
        self.nodes = nodes
        self.vmis = vmis
        self.pods = pods
        self.migrations = migrations
        self.recorder = recorder
        self.config = config
        self.pod_owner_index = pod_owner_index
        # VMIs (namespace/name) whose migration was created but is not in the cache yet: upstream's expectations.
        self._created: dict[str, str] = {}

    def node_keys_of_vmi(self, vmi: Object) -> list[str]:
        status = _status(vmi)
        return sorted({str(n) for n in (status.get("nodeName"), status.get("evacuationNodeName")) if n})

    def node_keys_of_migration(self, vmim: Object) -> list[str]:
        vmi = self.vmis.get(
            f"{(vmim.get('metadata') or {}).get('namespace')}/{(vmim.get('spec') or {}).get('vmiName')}"
        )
        return self.node_keys_of_vmi(vmi) if vmi else []

    def _vmi_of(self, vmim: Mapping[str, Any]) -> Object | None:
        meta, spec = vmim.get("metadata") or {}, vmim.get("spec") or {}
        return self.vmis.get(f"{meta.get('namespace')}/{spec.get('vmiName')}")

    def _vmi_node(self, vmim: Mapping[str, Any]) -> str | None:
        vmi = self._vmi_of(vmim)
        return str(_status(vmi).get("nodeName") or "") if vmi else None

    def _has_active_migration(self, vmi: Object, migrations: list[Object]) -> bool:
        meta = vmi.get("metadata") or {}
        key = object_key(vmi)
        mine = [
            m
            for m in migrations
            if (m.get("metadata") or {}).get("namespace") == meta.get("namespace")
            and (m.get("spec") or {}).get("vmiName") == meta.get("name")
        ]
        return key in self._created or any(migration_active(m) for m in mine) or vmi_migrating(vmi)

    def _pending(self, migrations: list[Object]) -> dict[str, str]:
        """Created migrations the cache does not show yet, by VMI key; those it shows are forgotten."""
        seen = {
            f"{(m.get('metadata') or {}).get('namespace')}/{(m.get('metadata') or {}).get('name')}" for m in migrations
        }
        for vmi_key, name in list(self._created.items()):
            if f"{vmi_key.split('/', 1)[0]}/{name}" in seen or self.vmis.get(vmi_key) is None:
                del self._created[vmi_key]
        return self._created

    def _active_pods(self, vmi: Object) -> int:
        uid = str((vmi.get("metadata") or {}).get("uid"))
        return sum(
            1 for p in self.pods.by_index(self.pod_owner_index, uid) if _status(p).get("phase") not in c.FINAL_PHASES
        )

    async def reconcile(self, node: str) -> Result | None:
        config = self.config()
        tainted = drain_tainted(self.nodes.get(node), config.migrations.node_drain_taint_key)
        migrations = self.migrations.items()
        pending = self._pending(migrations)
        candidates = [
            vmi
            for vmi in self.vmis.by_index(VMI_NODE_INDEX if tainted else VMI_EVACUATION_INDEX, node)
            if needs_evacuation(vmi, node, tainted, eviction_strategy(vmi, config))
            and not self._has_active_migration(vmi, migrations)
            and self._active_pods(vmi) <= 1
        ]
        if not candidates:
            return None
        limits = capacity(config, migrations, self._vmi_node, node)
        # Creations the cache does not show yet count against the limits too.
        from_node = sum(1 for key in pending if _status(self.vmis.get(key) or {}).get("nodeName") == node)
        room = Capacity(limits.cluster - len(pending), limits.node - from_node).available
        candidates.sort(key=object_key)
        for vmi in candidates[: max(0, room)]:
            await self._create(vmi, node)
        if len(candidates) > room:
            log.info("node %s: %d VMIs wait for migration capacity", node, len(candidates) - max(0, room))
            return Result(requeue_after=CAPACITY_RECHECK_SECONDS)
        return None

    async def _create(self, vmi: Object, node: str) -> None:
        try:
            created = await self.client.create(MIGRATIONS, migration_manifest(vmi, node))
        except Exception as exc:
            self.recorder.event(vmi, "Warning", "FailedCreate", f"Error creating a Migration: {exc}")
            raise
        name = str(created["metadata"]["name"])
        self._created[object_key(vmi)] = name
        self.recorder.event(vmi, "Normal", "SuccessfulCreate", f"Created Migration {name}")
