"""virt-controller's metrics under KubeVirt's names, read from its informers at each scrape.

VMI phase counts and info, launcher memory overhead, migration phase counts and outcomes, and whether this replica
leads and is ready. Labels follow KubeVirt's virt-controller collectors (pkg/monitoring/metrics/virt-controller);
`kubevirt_vmi_phase_count` keeps the labels KubeVirt gave it before it became the `node:kubevirt_vmi_phase:sum`
recording rule. The sample builders are pure; the collector only reads the caches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pykubevirt.api import constants as c
from pykubevirt.api.timestamps import parse_time
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import LIVE_MIGRATE, eviction_strategy, is_migratable
from pykubevirt.controller.compute_resources import memory_overhead
from pykubevirt.controller.vmi_detail_metrics import detail_families

Object = dict[str, Any]

# The system info KubeVirt reads from the VMI's `vm.kubevirt.io/` annotations (templates set them).
_SYSTEM_ANNOTATIONS = ("os", "workload", "flavor")
# Instancetype vendors whose names KubeVirt reports; others become "<other>".
_KNOWN_VENDORS = frozenset({"kubevirt.io", "redhat.com"})
PHASE_COUNT_LABELS = (
    "node",
    "phase",
    "os",
    "workload",
    "flavor",
    "instance_type",
    "preference",
    "guest_os_kernel_release",
    "guest_os_machine",
    "guest_os_name",
    "guest_os_version_id",
)
INFO_LABELS = (
    "node",
    "namespace",
    "name",
    "phase",
    "os",
    "workload",
    "flavor",
    "instance_type",
    "preference",
    "guest_os_kernel_release",
    "guest_os_machine",
    "guest_os_arch",
    "guest_os_name",
    "guest_os_version_id",
    "evictable",
    "outdated",
    "vmi_pod",
)
# Migration phases KubeVirt counts as running.
_RUNNING_MIGRATION_PHASES = frozenset({"Running", "Scheduled", "PreparingTarget", "TargetReady"})


def _named(annotations: Mapping[str, str], namespaced: str, cluster: str) -> str:
    """The instancetype or preference name KubeVirt's metrics report from the VMI's annotations."""
    if namespaced in annotations or cluster in annotations:
        return annotations.get(namespaced) or annotations.get(cluster) or ""
    return ""


def evictable(vmi: Mapping[str, Any], config: ClusterConfig) -> bool:
    """False for a VMI that must live-migrate on eviction but cannot (KubeVirt's isVMEvictable, which alerts)."""
    return eviction_strategy(vmi, config) != LIVE_MIGRATE or is_migratable(vmi)


def vmi_descriptive_labels(vmi: Mapping[str, Any], config: ClusterConfig | None = None) -> dict[str, str]:
    """The labels of kubevirt_vmi_info and kubevirt_vmi_phase_count read from a VMI (phase lower-cased)."""
    metadata = vmi.get("metadata") or {}
    status = vmi.get("status") or {}
    annotations = metadata.get("annotations") or {}
    guest = status.get("guestOSInfo") or {}
    labels = {
        "node": str(status.get("nodeName", "")),
        "namespace": str(metadata.get("namespace", "")),
        "name": str(metadata.get("name", "")),
        "phase": str(status.get("phase", "")).lower(),
        "instance_type": _named(annotations, c.INSTANCETYPE_NAME_ANNOTATION, c.CLUSTER_INSTANCETYPE_NAME_ANNOTATION),
        "preference": _named(annotations, c.PREFERENCE_NAME_ANNOTATION, c.CLUSTER_PREFERENCE_NAME_ANNOTATION),
        "guest_os_kernel_release": str(guest.get("kernelRelease", "")),
        "guest_os_machine": str((status.get("machine") or {}).get("type", "")),
        "guest_os_arch": str(guest.get("machine", "")),
        "guest_os_name": str(guest.get("name", "")),
        "guest_os_version_id": str(guest.get("versionId", "")),
        "evictable": "true" if evictable(vmi, config or ClusterConfig()) else "false",
        "outdated": "true" if "kubevirt.io/outdatedLauncherImage" in (metadata.get("labels") or {}) else "false",
        "vmi_pod": "",
    }
    for key in _SYSTEM_ANNOTATIONS:
        labels[key] = str(annotations.get(f"vm.kubevirt.io/{key}", ""))
    return labels


def phase_counts(vmis: Iterable[Mapping[str, Any]]) -> dict[tuple[str, ...], int]:
    """VMIs counted by kubevirt_vmi_phase_count's labels."""
    counts: dict[tuple[str, ...], int] = {}
    for vmi in vmis:
        labels = vmi_descriptive_labels(vmi)
        key = tuple(labels[name] for name in PHASE_COUNT_LABELS)
        counts[key] = counts.get(key, 0) + 1
    return counts


def migration_counts(
    migrations: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, int], list[tuple[str, str, str, bool]]]:
    """Migrations in pending, scheduling, running and unset phases, and each finished one's (vmi, vmim, namespace,
    succeeded), as KubeVirt's migration stats collector sorts them."""
    counts = {"pending": 0, "scheduling": 0, "running": 0, "unset": 0}
    finished: list[tuple[str, str, str, bool]] = []
    for migration in migrations:
        phase = (migration.get("status") or {}).get("phase") or ""
        metadata = migration.get("metadata") or {}
        ident = (
            str((migration.get("spec") or {}).get("vmiName", "")),
            str(metadata.get("name", "")),
            str(metadata.get("namespace", "")),
        )
        if phase == "":
            counts["unset"] += 1
        elif phase == "Pending":
            counts["pending"] += 1
        elif phase == "Scheduling":
            counts["scheduling"] += 1
        elif phase in _RUNNING_MIGRATION_PHASES:
            counts["running"] += 1
        else:
            finished.append((*ident, phase == "Succeeded"))
    return counts, finished


class ControllerCollector(Collector):
    """Reads the VMIs, launcher pods and migrations of virt-controller's informers, and its leadership."""

    def __init__(
        self,
        *,
        vmis: Callable[[], list[Object]],
        pods: Callable[[], list[Object]],
        migrations: Callable[[], list[Object]],
        config: Callable[[], ClusterConfig],
        leading: Callable[[], bool],
        ready: Callable[[], bool],
        snapshots: Callable[[], list[Object]] = list,
    ) -> None:
        self.vmis = vmis
        self.snapshots = snapshots
        self.pods = pods
        self.migrations = migrations
        self.config = config
        self.leading = leading
        self.ready = ready

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "kubevirt_virt_controller_leading_status",
            "Indication for an operating virt-controller.",
            value=1.0 if self.leading() else 0.0,
        )
        yield GaugeMetricFamily(
            "kubevirt_virt_controller_ready_status",
            "Indication for a virt-controller that is ready to take the lead.",
            value=1.0 if self.ready() else 0.0,
        )
        if not self.leading():
            # Only the leader's caches are filled; a candidate reports no workload, as KubeVirt's does.
            return
        vmis = self.vmis()
        migrations = self.migrations()
        yield from self._vmi_families(vmis)
        names = {str(m["metadata"].get("uid", "")): str(m["metadata"].get("name", "")) for m in migrations}
        yield from detail_families(vmis, names)
        yield from self._migration_families(migrations)
        yield snapshot_family(self.snapshots())

    def _vmi_families(self, vmis: list[Object]) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "kubevirt_vmi_phase_count",
            "Sum of VMIs per phase and node. `phase` can be one of the following: [`Pending`, `Scheduling`, "
            "`Scheduled`, `Running`, `Succeeded`, `Failed`, `Unknown`].",
            labels=list(PHASE_COUNT_LABELS),
        )
        for key, number in phase_counts(vmis).items():
            count.add_metric(list(key), number)
        info = GaugeMetricFamily(
            "kubevirt_vmi_info", "Information about VirtualMachineInstances.", labels=list(INFO_LABELS)
        )
        overhead = GaugeMetricFamily(
            "kubevirt_vmi_launcher_memory_overhead_bytes",
            "Estimation of the memory amount required for virt-launcher's infrastructure components (e.g. libvirt, "
            "QEMU).",
            labels=["namespace", "name"],
        )
        non_evictable = GaugeMetricFamily(
            "kubevirt_vmi_non_evictable",
            "Indication for a VirtualMachine that its eviction strategy is set to Live Migration but is not "
            "migratable.",
            labels=["node", "namespace", "name"],
        )
        running_pods = {
            ((p.get("metadata") or {}).get("labels") or {}).get(c.CREATED_BY_LABEL, ""): p
            for p in self.pods()
            if (p.get("status") or {}).get("phase") == "Running"
        }
        config = self.config()
        for vmi in vmis:
            labels = vmi_descriptive_labels(vmi, config)
            pod = running_pods.get(vmi["metadata"].get("uid", ""))
            if pod is not None and (pod.get("spec") or {}).get("nodeName") == labels["node"]:
                labels["vmi_pod"] = pod["metadata"]["name"]
            info.add_metric([labels[name] for name in INFO_LABELS], 1.0)
            blocked = 0.0 if labels["evictable"] == "true" else 1.0
            non_evictable.add_metric([labels["node"], labels["namespace"], labels["name"]], blocked)
            overhead.add_metric([labels["namespace"], labels["name"]], memory_overhead(vmi, config).ceil_int())
        yield from (count, info, overhead, non_evictable)

    def _migration_families(self, migrations: list[Object]) -> Iterator[Metric]:
        counts, finished = migration_counts(migrations)
        for phase, number in counts.items():
            yield GaugeMetricFamily(
                f"kubevirt_vmi_migrations_in_{phase}_phase",
                f"Number of current {phase} migrations."
                if phase != "unset"
                else "Number of current unset migrations. These are pending items the virt-controller hasn’t "
                "processed yet from the queue.",
                value=number,
            )
        succeeded = GaugeMetricFamily(
            "kubevirt_vmi_migration_succeeded",
            "Indicates if the VMI migration succeeded.",
            labels=["vmi", "vmim", "namespace"],
        )
        failed = GaugeMetricFamily(
            "kubevirt_vmi_migration_failed",
            "Indicates if the VMI migration failed.",
            labels=["vmi", "vmim", "namespace"],
        )
        for vmi, vmim, namespace, ok in finished:
            (succeeded if ok else failed).add_metric([vmi, vmim, namespace], 1.0)
        yield from (succeeded, failed)


def snapshot_family(snapshots: Iterable[Mapping[str, Any]]) -> Metric:
    """When each Succeeded VirtualMachineSnapshot was taken (KubeVirt's HandleSucceededVMSnapshot)."""
    family = GaugeMetricFamily(
        "kubevirt_vmsnapshot_succeeded_timestamp_seconds",
        "Returns the timestamp of successful virtual machine snapshot.",
        labels=["name", "snapshot_name", "namespace"],
    )
    for snapshot in snapshots:
        status = snapshot.get("status") or {}
        taken = parse_time(status.get("creationTime"))
        if status.get("phase") != "Succeeded" or taken is None:
            continue
        meta = snapshot.get("metadata") or {}
        source = ((snapshot.get("spec") or {}).get("source") or {}).get("name", "")
        family.add_metric([str(source), str(meta.get("name", "")), str(meta.get("namespace", ""))], taken.timestamp())
    return family
