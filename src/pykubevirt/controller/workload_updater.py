"""KubeVirt's workload updater, the part that serves hotplug: a migration for each VMI whose CPU or memory changed.

Upstream: pkg/virt-controller/watch/workload-updater/workload-updater.go (doesRequireMigration, isHotplugInProgress).
A running VMI with HotVCPUChange, or HotMemoryChange=True, gets a VirtualMachineInstanceMigration to a launcher pod
rendered from its updated spec (so sized for the new vCPUs and memory); the target's virt-handler then plugs them.
KubeVirt also migrates or evicts VMIs whose launcher image is outdated; a single-version install has none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.objects import condition
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import ApiError
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import MIGRATIONS
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import is_migratable
from pykubevirt.controller.hotplug_conditions import HOT_MEMORY_CHANGE, HOT_VCPU_CHANGE

log = logging.getLogger("pykubevirt.controller.workload_updater")

WORKLOAD_UPDATE_ANNOTATION = "kubevirt.io/workloadUpdateMigration"
WORKLOAD_UPDATE_ABORTION_ANNOTATION = "kubevirt.io/workloadUpdateMigrationAbortion"
GENERATE_NAME = "kubevirt-workload-update-"
PRIORITY_USER_TRIGGERED = "user-triggered"
MIGRATION_REQUIRED = "MigrationRequired"
LIVE_MIGRATE = "LiveMigrate"


def hotplug_in_progress(vmi: Mapping[str, Any]) -> bool:
    """isHotplugInProgress: a vCPU change, or a memory or migration-required change that is True."""
    return (
        condition(vmi, HOT_VCPU_CHANGE) is not None
        or (condition(vmi, HOT_MEMORY_CHANGE) or {}).get("status") == "True"
        or (condition(vmi, MIGRATION_REQUIRED) or {}).get("status") == "True"
    )


def _migrating(vmi: Mapping[str, Any]) -> bool:
    state = (vmi.get("status") or {}).get("migrationState") or {}
    return bool(state.get("startTimestamp")) and not state.get("endTimestamp")


def needs_migration(vmi: Mapping[str, Any]) -> bool:
    """A running, migratable VMI that waits for a hotplug and is not being migrated (doesRequireMigration)."""
    meta, status = vmi.get("metadata") or {}, vmi.get("status") or {}
    if status.get("phase") != c.PHASE_RUNNING or meta.get("deletionTimestamp") or _migrating(vmi):
        return False
    if WORKLOAD_UPDATE_ABORTION_ANNOTATION in (meta.get("annotations") or {}):
        return False
    return hotplug_in_progress(vmi) and is_migratable(vmi)


def live_migrate_allowed(config: ClusterConfig) -> bool:
    """The KubeVirt CR lists LiveMigrate among its workload update methods, or sets none (then: allowed here)."""
    methods = config.workload_update_methods
    return methods is None or LIVE_MIGRATE in methods


def migration_manifest(vmi: Mapping[str, Any]) -> Object:
    """The VMIM the workload updater creates: user-triggered priority for a hotplug."""
    meta = vmi.get("metadata") or {}
    return {
        "apiVersion": c.KUBEVIRT_API_VERSION,
        "kind": c.VMIM_KIND,
        "metadata": {
            "generateName": GENERATE_NAME,
            "namespace": meta.get("namespace"),
            "annotations": {WORKLOAD_UPDATE_ANNOTATION: ""},
        },
        "spec": {"vmiName": meta.get("name"), "priority": PRIORITY_USER_TRIGGERED},
    }


class WorkloadUpdater:
    """Reconciles one VMI key: creates its hotplug migration when none is under way."""

    def __init__(
        self,
        client: KubeClient,
        *,
        vmis: Informer,
        migrations: Informer,
        recorder: EventRecorder,
        config: Callable[[], ClusterConfig] = ClusterConfig,
    ) -> None:
        self.client = client
        self.config = config
        self.vmis = vmis
        self.migrations = migrations
        self.recorder = recorder
        # VMI key → the migration created for it that the cache does not show yet (upstream's expectations).
        self._created: dict[str, str] = {}

    def keys_of_migration(self, vmim: Object) -> list[str]:
        return [f"{vmim['metadata'].get('namespace')}/{(vmim.get('spec') or {}).get('vmiName')}"]

    def _unfinished(self, vmi: Object) -> bool:
        """A migration of this VMI exists that has not ended, or one was just created."""
        namespace, name = vmi["metadata"].get("namespace"), vmi["metadata"]["name"]
        key = object_key(vmi)
        mine = [
            m
            for m in self.migrations.items()
            if m["metadata"].get("namespace") == namespace and (m.get("spec") or {}).get("vmiName") == name
        ]
        if key in self._created and any(m["metadata"]["name"] == self._created[key] for m in mine):
            del self._created[key]
        return key in self._created or any((m.get("status") or {}).get("phase") not in c.FINAL_PHASES for m in mine)

    async def reconcile(self, key: str) -> Result | None:
        vmi = self.vmis.get(key)
        if vmi is None:
            self._created.pop(key, None)
            return None
        if not needs_migration(vmi) or not live_migrate_allowed(self.config()) or self._unfinished(vmi):
            return None
        try:
            created = await self.client.create(MIGRATIONS, migration_manifest(vmi), vmi["metadata"]["namespace"])
        except ApiError as exc:
            self.recorder.event(
                vmi,
                WARNING,
                "FailedCreate",
                f"Error creating a Migration for automated workload update: {exc.message}",
            )
            return Result(requeue_after=5.0)
        name = str(created["metadata"]["name"])
        self._created[key] = name
        log.info("migrating VMI %s for a CPU or memory hotplug (%s)", key, name)
        self.recorder.event(vmi, NORMAL, "SuccessfulCreate", f"Created Migration {name} for automated workload update")
        return None
