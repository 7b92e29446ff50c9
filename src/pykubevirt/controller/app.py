"""virt-controller: informers, the VM, VMI and node controllers, behind Lease-based leader election."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, own_key, owner_keys, run_until_failure
from pykubevirt.client.events import EventRecorder
from pykubevirt.client.informer import EventHandler, Informer, field_index, object_key, owner_uid_index
from pykubevirt.client.leader_election import LeaderElector
from pykubevirt.client.resources import (
    CONTROLLER_REVISIONS,
    DATA_VOLUMES,
    KUBEVIRTS,
    MIGRATION_POLICIES,
    MIGRATIONS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    STORAGE_CLASSES,
    VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINE_POOLS,
    VIRTUAL_MACHINES,
    VM_SNAPSHOTS,
)
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import active_kubevirt, cluster_config
from pykubevirt.controller.backend_storage import claim_owner_keys
from pykubevirt.controller.cluster_metrics import ControllerCollector
from pykubevirt.controller.evacuation_controller import VMI_EVACUATION_INDEX, EvacuationController
from pykubevirt.controller.launcher_pod import LauncherSettings
from pykubevirt.controller.migration_controller import MigrationController
from pykubevirt.controller.node_controller import (
    DEFAULT_HEARTBEAT_TIMEOUT_SECONDS,
    POD_NODE_INDEX,
    VMI_NODE_INDEX,
    NodeController,
)
from pykubevirt.controller.owned_objects import NAMESPACE_INDEX, namespace_of_object
from pykubevirt.controller.replica_set_controller import ReplicaSetController
from pykubevirt.controller.snapshot_controllers import SharedCaches, snapshot_controllers
from pykubevirt.controller.vm_controller import VMController
from pykubevirt.controller.vm_export_controller import ExternalLinks, export_controller
from pykubevirt.controller.vm_pool_controller import VMPoolController
from pykubevirt.controller.vm_revisions import OWNER_INDEX
from pykubevirt.controller.vmi_controller import POD_OWNER_INDEX, VMIController, controller_uid_index
from pykubevirt.controller.volume_status import CLAIMS_INDEX, claim_names
from pykubevirt.controller.workload_updater import WorkloadUpdater
from pykubevirt.log import set_verbosity

log = logging.getLogger("pykubevirt.controller")

LEASE_NAME = "virt-controller"
LEASE_NAMESPACE = "kubevirt"

_node_of_vmi = field_index("status.nodeName")
VMI_CLAIM_INDEX = CLAIMS_INDEX


VM_CLAIM_INDEX = CLAIMS_INDEX


def _claims_of_vm(vm: Object) -> list[str]:
    namespace = (vm.get("metadata") or {}).get("namespace", "")
    template = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
    return [f"{namespace}/{name}" for name in claim_names({"spec": template})]


def _claims_of_vmi(vmi: Object) -> list[str]:
    namespace = (vmi.get("metadata") or {}).get("namespace", "")
    return [f"{namespace}/{name}" for name in claim_names(vmi)]


def _no_keys(obj: Object) -> list[str]:
    return []


@dataclass(slots=True)
class ControllerOptions:
    # Reconcile tasks per controller (KubeVirt: threads, 3 for VMs and 10 for VMIs). A task mostly waits for the API
    # server, whose writes answer after its queue and fsync, so concurrency, not CPU, bounds a controller: at 50 VM
    # starts a second (four VM reconciles each) 10 let the VM controller's queue grow without end (p99 5–24 s over
    # 4,000–8,000 starts); 20 kept up (p99 1.4–5 s), and 32 or 50 did no better.
    workers: int = 20
    # The command line's configuration; the cluster's KubeVirt object overrides what it sets.
    config: ClusterConfig = field(default_factory=ClusterConfig)
    launcher: LauncherSettings | None = None
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT_SECONDS
    node_recheck: float = 10.0
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    leader_election: bool = True
    # Where exports' external links point (the embedded API server's export proxy); none in cluster mode.
    export_links: ExternalLinks | None = None
    # More work the leader runs beside the controllers (the embedded cluster's storage controllers).
    extra: tuple[Callable[[], Coroutine[Any, Any, None]], ...] = ()


class VirtController:
    """Everything virt-controller runs, wired to one API client."""

    def __init__(self, client: KubeClient, options: ControllerOptions | None = None) -> None:
        self.client = client
        self.options = options or ControllerOptions()
        opts = self.options
        self.recorder = EventRecorder(client, "virtualmachine-controller")
        self.node_recorder = EventRecorder(client, "virt-controller")
        self.elector: LeaderElector | None = None
        # Whether this replica runs the controllers now (kubevirt_virt_controller_leading_status).
        self.leading = False
        self.vms = Informer(client, VIRTUAL_MACHINES)
        self.vmis = Informer(client, VIRTUAL_MACHINE_INSTANCES)
        self.pods = Informer(client, PODS, label_selector=f"{c.APP_LABEL}={c.LAUNCHER_LABEL_VALUE}")
        self.data_volumes = Informer(client, DATA_VOLUMES)
        self.revisions = Informer(client, CONTROLLER_REVISIONS)
        self.nodes = Informer(client, NODES)
        self.pvcs = Informer(client, PERSISTENT_VOLUME_CLAIMS)
        self.storage_classes = Informer(client, STORAGE_CLASSES)
        self.kubevirts = Informer(client, KUBEVIRTS)
        self.migrations = Informer(client, MIGRATIONS)
        self.migration_policies = Informer(client, MIGRATION_POLICIES)
        self.namespaces = Informer(client, NAMESPACES)
        self.replica_sets = Informer(client, VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS)
        self.replica_sets.add_indexer(NAMESPACE_INDEX, namespace_of_object)
        self.vmis.add_indexer(NAMESPACE_INDEX, namespace_of_object)
        self.pools = Informer(client, VIRTUAL_MACHINE_POOLS)
        self.vms.add_indexer(NAMESPACE_INDEX, namespace_of_object)
        self.pods.add_indexer(POD_OWNER_INDEX, controller_uid_index)
        self.pods.add_indexer(POD_NODE_INDEX, field_index("spec.nodeName"))
        self.vmis.add_indexer(VMI_NODE_INDEX, _node_of_vmi)
        self.vmis.add_indexer(VMI_EVACUATION_INDEX, field_index("status.evacuationNodeName"))
        self.vmis.add_indexer(VMI_CLAIM_INDEX, _claims_of_vmi)
        self.vms.add_indexer(VM_CLAIM_INDEX, _claims_of_vm)
        self.revisions.add_indexer(OWNER_INDEX, owner_uid_index)
        self.vm_reconciler = VMController(
            client,
            vms=self.vms,
            vmis=self.vmis,
            data_volumes=self.data_volumes,
            revisions=self.revisions,
            pvcs=self.pvcs,
            recorder=self.recorder,
            config=opts.config,
        )
        self.vmi_reconciler = VMIController(
            client,
            vmis=self.vmis,
            pods=self.pods,
            vms=self.vms,
            recorder=self.recorder,
            settings=opts.launcher or LauncherSettings(cluster=opts.config),
            claims=self.pvcs,
            data_volumes=self.data_volumes,
            storage_classes=self.storage_classes,
        )
        self.node_reconciler = NodeController(
            client,
            nodes=self.nodes,
            vmis=self.vmis,
            pods=self.pods,
            recorder=self.node_recorder,
            heartbeat_timeout=opts.heartbeat_timeout,
            recheck=opts.node_recheck,
        )
        self.migration_reconciler = MigrationController(
            client,
            migrations=self.migrations,
            vmis=self.vmis,
            pods=self.pods,
            recorder=EventRecorder(client, "migration-controller"),
            settings=lambda: self.vmi_reconciler.settings,
            policies=self.migration_policies,
            namespaces=self.namespaces,
        )
        self.migration_controller = Controller("migration", self.migration_reconciler, workers=opts.workers)
        self.evacuation_reconciler = EvacuationController(
            client,
            nodes=self.nodes,
            vmis=self.vmis,
            pods=self.pods,
            migrations=self.migrations,
            recorder=EventRecorder(client, "disruptionbudget-controller"),
            config=lambda: self.config,
            pod_owner_index=POD_OWNER_INDEX,
        )
        self.workload_reconciler = WorkloadUpdater(
            client,
            vmis=self.vmis,
            migrations=self.migrations,
            recorder=EventRecorder(client, "workload-update-controller"),
            config=lambda: self.config,
        )
        self.workload_controller = Controller("workload-update", self.workload_reconciler, workers=1)
        self.replica_set_reconciler = ReplicaSetController(
            client,
            replica_sets=self.replica_sets,
            vmis=self.vmis,
            recorder=EventRecorder(client, "virtualmachinereplicaset-controller"),
        )
        self.replica_set_controller = Controller("replicaset", self.replica_set_reconciler, workers=3)
        self.pool_reconciler = VMPoolController(
            client,
            pools=self.pools,
            vms=self.vms,
            vmis=self.vmis,
            revisions=self.revisions,
            recorder=EventRecorder(client, "virtualmachinepool-controller"),
        )
        self.pool_controller = Controller("pool", self.pool_reconciler, workers=3)
        self.vm_controller = Controller("virtualmachine", self.vm_reconciler, workers=opts.workers)
        self.vmi_controller = Controller("virtualmachineinstance", self.vmi_reconciler, workers=opts.workers)
        self.node_controller = Controller("node", self.node_reconciler, workers=1)
        self.evacuation_controller = Controller("evacuation", self.evacuation_reconciler, workers=1)
        self._wire()
        self.informers = [
            *(self.vms, self.vmis, self.pods, self.data_volumes, self.revisions, self.nodes, self.pvcs),
            self.storage_classes,
            self.kubevirts,
            self.migrations,
            self.migration_policies,
            self.namespaces,
            self.replica_sets,
            self.pools,
        ]
        # Snapshots and restores, once discovery has said which of their APIs the cluster serves.
        self.snapshotting: tuple[list[Informer], list[Controller], Any] | None = None
        self.metrics = ControllerCollector(
            vmis=self.vmis.items,
            pods=self.pods.items,
            migrations=self.migrations.items,
            config=lambda: self.config,
            leading=lambda: self.leading,
            # A candidate is ready to take the lead; the leader once its caches are filled.
            ready=lambda: not self.leading or self.leading_with_caches(),
            snapshots=self._snapshots,
        )

    def leading_with_caches(self) -> bool:
        """Whether this replica leads and its informers have filled their caches (KubeVirt's `/leader` says so)."""
        return self.leading and all(i.synced.is_set() for i in self.informers)

    def _snapshots(self) -> list[Object]:
        """The VirtualMachineSnapshots in the cache (none where the API is not served)."""
        running = self.snapshotting[0] if self.snapshotting is not None else []
        return next((i.items() for i in running if i.resource == VM_SNAPSHOTS), [])

    def _wire(self) -> None:
        vm = self.vm_reconciler
        # Expectations must see VMI events before the VM key is reconciled, so they are registered first.
        self.vmis.add_handler(
            EventHandler(on_add=vm.on_vmi_add, on_update=vm.on_vmi_update, on_delete=vm.on_vmi_delete)
        )
        vm_key = owner_keys(c.VM_KIND)
        self.vm_controller.watch(self.vms).watch(self.vmis, vm_key).watch(self.data_volumes, vm_key)
        # A VM's printable status follows its claims (WaitingForVolumeBinding until they bind).
        self.vm_controller.watch(
            self.pvcs, lambda pvc: [object_key(vm) for vm in self.vms.by_index(VM_CLAIM_INDEX, object_key(pvc))]
        )
        vmi = self.vmi_reconciler
        self.pods.add_handler(
            EventHandler(on_add=vmi.on_pod_add, on_update=vmi.on_pod_update, on_delete=vmi.on_pod_delete)
        )
        self.vmi_controller.watch(self.vmis, own_key).watch(self.pods, owner_keys(c.VMI_KIND)).watch(self.vms, own_key)
        # A claim appearing, binding or growing concerns the VMIs that use it (pod creation, volumeStatus).

        def by_claim(obj: Object) -> list[str]:
            return [object_key(vmi) for vmi in self.vmis.by_index(VMI_CLAIM_INDEX, object_key(obj))]

        self.vmi_controller.watch(self.pvcs, by_claim).watch(self.data_volumes, by_claim)
        # A VMI waits for its backend-storage claim to reach the cache, and to bind.
        if (backend := vmi.backend_storage) is not None:
            self.pvcs.add_handler(EventHandler(on_add=backend.on_claim_add))
            self.vmi_controller.watch(self.pvcs, claim_owner_keys)
        self.node_controller.watch(self.nodes).watch(self.vmis, _node_of_vmi)
        migration = self.migration_reconciler
        self.migration_controller.watch(self.migrations).watch(self.vmis, migration.keys_for_vmi)
        self.migration_controller.watch(self.pods, migration.keys_for_pod)
        workload = self.workload_reconciler
        self.workload_controller.watch(self.vmis, own_key).watch(self.migrations, workload.keys_of_migration)
        evacuation = self.evacuation_reconciler
        self.evacuation_controller.watch(self.nodes).watch(self.vmis, evacuation.node_keys_of_vmi)
        self.evacuation_controller.watch(self.migrations, evacuation.node_keys_of_migration)
        self.evacuation_controller.watch(self.kubevirts, _no_keys)
        replica_set = self.replica_set_reconciler
        # As for VMs: expectations see VMI events before the replica set's key is reconciled.
        for owned, children in ((replica_set.owned, self.vmis), (self.pool_reconciler.owned, self.vms)):
            children.add_handler(
                EventHandler(on_add=owned.on_add, on_update=owned.on_update, on_delete=owned.on_delete)
            )
        self.replica_set_controller.watch(self.replica_sets).watch(self.vmis, replica_set.keys_for_vmi)
        pool = self.pool_reconciler
        self.revisions.add_handler(EventHandler(on_add=pool.on_revision_add))
        self.pool_controller.watch(self.pools).watch(self.vms, pool.keys_for_vm).watch(self.vmis, pool.keys_for_vmi)
        self.pool_controller.watch(self.revisions, pool.keys_for_revision)
        # The KubeVirt object's configuration, followed as virt-config's informer does; the VM and VMI controllers
        # wait for this cache too, so they never act on the command line's values alone when an object exists.
        apply = EventHandler(
            on_add=lambda _: self._apply_config(),
            on_update=lambda _old, _new: self._apply_config(),
            on_delete=lambda _: self._apply_config(),
        )
        self.kubevirts.add_handler(apply)
        self.vm_controller.watch(self.kubevirts, _no_keys)
        self.vmi_controller.watch(self.kubevirts, _no_keys)

    @property
    def config(self) -> ClusterConfig:
        """The cluster configuration in effect."""
        return self.vm_reconciler.config

    def _apply_config(self) -> None:
        config = cluster_config(active_kubevirt(self.kubevirts.items()), self.options.config)
        if config == self.vm_reconciler.config:
            return
        set_verbosity(config.verbosity("virtController"))
        log.info("cluster configuration changed: %s", config)
        self.vm_reconciler.config = config
        self.vmi_reconciler.settings = dataclasses.replace(self.vmi_reconciler.settings, cluster=config)

    async def run_controllers(self) -> None:
        """Informers and controllers until cancelled (the leader's work)."""
        if self.snapshotting is None:
            shared = SharedCaches(
                vms=self.vms,
                vmis=self.vmis,
                pods=self.pods,
                pvcs=self.pvcs,
                data_volumes=self.data_volumes,
                storage_classes=self.storage_classes,
                revisions=self.revisions,
            )
            self.snapshotting = await snapshot_controllers(self.client, shared)
            self.informers += self.snapshotting[0]
            self.vm_reconciler.snapshot_statuses = self.snapshotting[2]
            export_informers, exporting = await export_controller(
                self.client,
                pvcs=self.pvcs,
                vms=self.vms,
                vmis=self.vmis,
                data_volumes=self.data_volumes,
                external=self.options.export_links,
            )
            self.informers += export_informers
            self.snapshotting[1].extend(exporting)
        tasks = [asyncio.create_task(i.run(), name=f"informer-{i.resource.plural}") for i in self.informers]
        tasks += [asyncio.create_task(ctl.run(), name=f"{ctl.name}-controller") for ctl in self.snapshotting[1]]
        tasks += [
            asyncio.create_task(self.vm_controller.run(), name="vm-controller"),
            asyncio.create_task(self.vmi_controller.run(), name="vmi-controller"),
            asyncio.create_task(self.node_controller.run(), name="node-controller"),
            asyncio.create_task(self.migration_controller.run(), name="migration-controller"),
            asyncio.create_task(self.evacuation_controller.run(), name="evacuation-controller"),
            asyncio.create_task(self.workload_controller.run(), name="workload-update-controller"),
            asyncio.create_task(self.replica_set_controller.run(), name="replicaset-controller"),
            asyncio.create_task(self.pool_controller.run(), name="pool-controller"),
        ]
        tasks += [asyncio.create_task(run(), name=f"extra-{i}") for i, run in enumerate(self.options.extra)]
        self.leading = True
        try:
            await run_until_failure(tasks)
        finally:
            self.leading = False

    async def run(self) -> None:
        """Elect a leader among replicas; the leader runs the controllers until it loses the lease."""
        if not self.options.leader_election:
            await self.run_controllers()
            return
        identity = self.options.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.elector = LeaderElector(
            self.client,
            name=LEASE_NAME,
            namespace=LEASE_NAMESPACE,
            identity=identity,
            lease_duration=self.options.lease_duration,
            renew_deadline=self.options.renew_deadline,
            retry_period=self.options.retry_period,
        )
        await self.elector.run(self.run_controllers)

    async def shutdown(self) -> None:
        await self.recorder.flush()
        await self.node_recorder.flush()
        if self.elector is not None:
            await self.elector.release()
