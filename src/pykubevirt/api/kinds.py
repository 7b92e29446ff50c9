"""The kinds pykubevirt serves: names, scope, printer columns and schema of each, in one catalogue."""

from __future__ import annotations

from dataclasses import dataclass

from pykubevirt.api import cdi, constants, instancetype
from pykubevirt.api.kubevirt import (
    clone,
    export,
    kubevirt_cr,
    migration,
    migration_policy,
    replica_set,
    snapshot,
    vm,
    vm_pool,
    vmi,
)
from pykubevirt.api.scale import ScaleSubresource
from pykubevirt.api.schema import Schema

AGE_COLUMN_PATH = ".metadata.creationTimestamp"


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0
    format: str = ""

    def to_crd(self) -> dict[str, object]:
        column: dict[str, object] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.format:
            column["format"] = self.format
        if self.priority:
            column["priority"] = self.priority
        return column


@dataclass(frozen=True, slots=True)
class OlderVersion:
    """A version the kind is still served in besides its storage version, with the same schema (KubeVirt's)."""

    name: str
    # Set for a deprecated version: the Warning each of its requests gets.
    deprecation_warning: str = ""


# KubeVirt's core kinds are served as kubevirt.io/v1alpha3 too (staging/src/kubevirt.io/api/core/v1/register.go).
V1ALPHA3 = OlderVersion(
    "v1alpha3", deprecation_warning="kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."
)


@dataclass(frozen=True, slots=True)
class KindSpec:
    """Everything needed to serve a kind: its CRD names and its schema."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    schema: Schema
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[PrinterColumn, ...] = ()
    status_subresource: bool = True
    scale: ScaleSubresource | None = None
    older_versions: tuple[OlderVersion, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


def _age() -> PrinterColumn:
    return PrinterColumn("Age", "date", AGE_COLUMN_PATH)


def _condition(name: str, condition: str, priority: int = 0) -> PrinterColumn:
    return PrinterColumn(name, "string", f".status.conditions[?(@.type=='{condition}')].status", priority=priority)


VIRTUAL_MACHINE = KindSpec(
    group=constants.KUBEVIRT_GROUP,
    version=constants.KUBEVIRT_VERSION,
    kind=constants.VM_KIND,
    plural="virtualmachines",
    singular="virtualmachine",
    schema=vm.VIRTUAL_MACHINE,
    short_names=("vm", "vms"),
    categories=("all",),
    printer_columns=(
        _age(),
        PrinterColumn("Status", "string", ".status.printableStatus", description="Human Readable Status"),
        _condition("Ready", "Ready"),
    ),
    older_versions=(V1ALPHA3,),
)

# KubeVirt's VMI CRD has no status subresource: the VMI mutator sets status.phase on create and the controller and
# handler write status through the main resource, which the update admitter guards.
VIRTUAL_MACHINE_INSTANCE = KindSpec(
    group=constants.KUBEVIRT_GROUP,
    version=constants.KUBEVIRT_VERSION,
    kind=constants.VMI_KIND,
    plural="virtualmachineinstances",
    singular="virtualmachineinstance",
    schema=vmi.VIRTUAL_MACHINE_INSTANCE,
    short_names=("vmi", "vmis"),
    categories=("all",),
    status_subresource=False,
    printer_columns=(
        _age(),
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("IP", "string", ".status.interfaces[0].ipAddress"),
        PrinterColumn("NodeName", "string", ".status.nodeName"),
        _condition("Ready", "Ready"),
        _condition("Live-Migratable", "LiveMigratable", priority=1),
        _condition("Paused", "Paused", priority=1),
    ),
    older_versions=(V1ALPHA3,),
)


def _replica_columns(members: str) -> tuple[PrinterColumn, ...]:
    """KubeVirt's columns for a kind that keeps a number of `members` (VMIs or VMs)."""
    return (
        PrinterColumn("Desired", "integer", ".spec.replicas", description=f"Number of desired {members}"),
        PrinterColumn(
            "Current",
            "integer",
            ".status.replicas",
            description=f"Number of managed and not final or deleted {members}",
        ),
        PrinterColumn(
            "Ready",
            "integer",
            ".status.readyReplicas",
            description=f"Number of managed {members} which are ready to receive traffic",
        ),
        _age(),
    )


_REPLICAS_SCALE = ScaleSubresource(".spec.replicas", ".status.replicas", ".status.labelSelector")

VIRTUAL_MACHINE_INSTANCE_REPLICA_SET = KindSpec(
    group=constants.KUBEVIRT_GROUP,
    version=constants.KUBEVIRT_VERSION,
    kind=constants.VMIRS_KIND,
    plural="virtualmachineinstancereplicasets",
    singular="virtualmachineinstancereplicaset",
    schema=replica_set.VIRTUAL_MACHINE_INSTANCE_REPLICA_SET,
    short_names=("vmirs", "vmirss"),
    categories=("all",),
    printer_columns=_replica_columns("VirtualMachineInstances"),
    scale=_REPLICAS_SCALE,
    older_versions=(V1ALPHA3,),
)

VIRTUAL_MACHINE_POOL = KindSpec(
    group=constants.POOL_GROUP,
    version=constants.POOL_VERSION,
    kind=constants.VM_POOL_KIND,
    plural="virtualmachinepools",
    singular="virtualmachinepool",
    schema=vm_pool.VIRTUAL_MACHINE_POOL,
    short_names=("vmpool", "vmpools"),
    categories=("all",),
    printer_columns=_replica_columns("VirtualMachines"),
    scale=_REPLICAS_SCALE,
    older_versions=(OlderVersion(constants.POOL_OLDER_VERSION),),
)

VIRTUAL_MACHINE_INSTANCE_MIGRATION = KindSpec(
    group=constants.KUBEVIRT_GROUP,
    version=constants.KUBEVIRT_VERSION,
    kind=constants.VMIM_KIND,
    plural="virtualmachineinstancemigrations",
    singular="virtualmachineinstancemigration",
    schema=migration.VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    short_names=("vmim", "vmims"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", description="The current phase of VM instance migration"),
        PrinterColumn("VMI", "string", ".spec.vmiName", description="The name of the VMI to perform the migration on"),
    ),
    older_versions=(V1ALPHA3,),
)

VIRTUAL_MACHINE_INSTANCETYPE = KindSpec(
    group=constants.INSTANCETYPE_GROUP,
    version=constants.INSTANCETYPE_VERSION,
    kind=constants.INSTANCETYPE_KIND,
    plural="virtualmachineinstancetypes",
    singular="virtualmachineinstancetype",
    schema=instancetype.VIRTUAL_MACHINE_INSTANCETYPE,
    short_names=("vminstancetype", "vminstancetypes", "vmf", "vmfs"),
    categories=("all",),
    status_subresource=False,
)

VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE = KindSpec(
    group=constants.INSTANCETYPE_GROUP,
    version=constants.INSTANCETYPE_VERSION,
    kind=constants.CLUSTER_INSTANCETYPE_KIND,
    plural="virtualmachineclusterinstancetypes",
    singular="virtualmachineclusterinstancetype",
    schema=instancetype.VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE,
    namespaced=False,
    short_names=("vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"),
    status_subresource=False,
)

VIRTUAL_MACHINE_PREFERENCE = KindSpec(
    group=constants.INSTANCETYPE_GROUP,
    version=constants.INSTANCETYPE_VERSION,
    kind=constants.PREFERENCE_KIND,
    plural="virtualmachinepreferences",
    singular="virtualmachinepreference",
    schema=instancetype.VIRTUAL_MACHINE_PREFERENCE,
    short_names=("vmpref", "vmprefs", "vmp", "vmps"),
    categories=("all",),
    status_subresource=False,
)

VIRTUAL_MACHINE_CLUSTER_PREFERENCE = KindSpec(
    group=constants.INSTANCETYPE_GROUP,
    version=constants.INSTANCETYPE_VERSION,
    kind=constants.CLUSTER_PREFERENCE_KIND,
    plural="virtualmachineclusterpreferences",
    singular="virtualmachineclusterpreference",
    schema=instancetype.VIRTUAL_MACHINE_CLUSTER_PREFERENCE,
    namespaced=False,
    short_names=("vmcp", "vmcps"),
    status_subresource=False,
)

DATA_VOLUME = KindSpec(
    group=constants.CDI_GROUP,
    version=constants.CDI_VERSION,
    kind=constants.DATA_VOLUME_KIND,
    plural="datavolumes",
    singular="datavolume",
    schema=cdi.DATA_VOLUME,
    short_names=("dv", "dvs"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", description="Where the import or clone stands"),
        PrinterColumn("Progress", "string", ".status.progress", description="Percent of the data copied, when known"),
        PrinterColumn("Restarts", "integer", ".status.restartCount", description="How often the transfer restarted"),
        _age(),
    ),
)

DATA_SOURCE = KindSpec(
    group=constants.CDI_GROUP,
    version=constants.CDI_VERSION,
    kind=constants.DATA_SOURCE_KIND,
    plural="datasources",
    singular="datasource",
    schema=cdi.DATA_SOURCE,
    short_names=("das",),
    categories=("all",),
    printer_columns=(_age(),),
    # CDI's DataSource has no status subresource: its controller updates the whole object.
    status_subresource=False,
)

KUBEVIRT = KindSpec(
    group=constants.KUBEVIRT_GROUP,
    version=constants.KUBEVIRT_VERSION,
    kind=constants.KUBEVIRT_KIND,
    plural="kubevirts",
    singular="kubevirt",
    schema=kubevirt_cr.KUBEVIRT,
    short_names=("kv", "kvs"),
    categories=("all",),
    printer_columns=(_age(), PrinterColumn("Phase", "string", ".status.phase")),
    older_versions=(V1ALPHA3,),
)

MIGRATION_POLICY = KindSpec(
    group=migration_policy.MIGRATIONS_GROUP,
    version=migration_policy.MIGRATIONS_VERSION,
    kind=migration_policy.MIGRATION_POLICY_KIND,
    plural="migrationpolicies",
    singular="migrationpolicy",
    schema=migration_policy.MIGRATION_POLICY,
    namespaced=False,
    categories=("all",),
    printer_columns=(_age(),),
)

# snapshot.kubevirt.io: KubeVirt's CRDs (crds.go) list no Age column, so kubectl shows none for these kinds.
_SNAPSHOT_V1ALPHA1 = OlderVersion(constants.SNAPSHOT_OLDER_VERSION)
_SNAPSHOT_READY_COLUMNS = (
    PrinterColumn("ReadyToUse", "boolean", ".status.readyToUse"),
    PrinterColumn("CreationTime", "date", ".status.creationTime"),
    PrinterColumn("Error", "string", ".status.error.message"),
)

VIRTUAL_MACHINE_SNAPSHOT = KindSpec(
    group=constants.SNAPSHOT_GROUP,
    version=constants.SNAPSHOT_VERSION,
    kind=constants.VM_SNAPSHOT_KIND,
    plural="virtualmachinesnapshots",
    singular="virtualmachinesnapshot",
    schema=snapshot.VIRTUAL_MACHINE_SNAPSHOT,
    short_names=("vmsnapshot", "vmsnapshots"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("SourceKind", "string", ".spec.source.kind"),
        PrinterColumn("SourceName", "string", ".spec.source.name"),
        PrinterColumn("Phase", "string", ".status.phase"),
        *_SNAPSHOT_READY_COLUMNS,
    ),
    older_versions=(_SNAPSHOT_V1ALPHA1,),
)

VIRTUAL_MACHINE_SNAPSHOT_CONTENT = KindSpec(
    group=constants.SNAPSHOT_GROUP,
    version=constants.SNAPSHOT_VERSION,
    kind=constants.VM_SNAPSHOT_CONTENT_KIND,
    plural="virtualmachinesnapshotcontents",
    singular="virtualmachinesnapshotcontent",
    schema=snapshot.VIRTUAL_MACHINE_SNAPSHOT_CONTENT,
    short_names=("vmsnapshotcontent", "vmsnapshotcontents"),
    categories=("all",),
    printer_columns=_SNAPSHOT_READY_COLUMNS,
    older_versions=(_SNAPSHOT_V1ALPHA1,),
)

VIRTUAL_MACHINE_RESTORE = KindSpec(
    group=constants.SNAPSHOT_GROUP,
    version=constants.SNAPSHOT_VERSION,
    kind=constants.VM_RESTORE_KIND,
    plural="virtualmachinerestores",
    singular="virtualmachinerestore",
    schema=snapshot.VIRTUAL_MACHINE_RESTORE,
    short_names=("vmrestore", "vmrestores"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("TargetKind", "string", ".spec.target.kind"),
        PrinterColumn("TargetName", "string", ".spec.target.name"),
        PrinterColumn("Complete", "boolean", ".status.complete"),
        PrinterColumn("RestoreTime", "date", ".status.restoreTime"),
    ),
    older_versions=(_SNAPSHOT_V1ALPHA1,),
)

# clone.kubevirt.io: KubeVirt's CRD lists Phase, source and target names and no Age column, as the snapshot kinds.
VIRTUAL_MACHINE_CLONE = KindSpec(
    group=constants.CLONE_GROUP,
    version=constants.CLONE_VERSION,
    kind=constants.VM_CLONE_KIND,
    plural=clone.CLONE_PLURAL,
    singular="virtualmachineclone",
    schema=clone.VIRTUAL_MACHINE_CLONE,
    short_names=("vmclone", "vmclones"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase"),
        PrinterColumn("SourceVirtualMachine", "string", ".spec.source.name"),
        PrinterColumn("TargetVirtualMachine", "string", ".spec.target.name"),
    ),
    older_versions=(OlderVersion(clone.CLONE_OLDER_VERSION),),
)

# export.kubevirt.io: KubeVirt's CRD (NewVirtualMachineExportCrd) stores v1 and still serves v1beta1, deprecated.
VIRTUAL_MACHINE_EXPORT = KindSpec(
    group=constants.EXPORT_GROUP,
    version=constants.EXPORT_VERSION,
    kind=constants.VM_EXPORT_KIND,
    plural=export.EXPORT_PLURAL,
    singular="virtualmachineexport",
    schema=export.VIRTUAL_MACHINE_EXPORT,
    short_names=("vmexport", "vmexports"),
    categories=("all",),
    printer_columns=(
        PrinterColumn("SourceKind", "string", ".spec.source.kind"),
        PrinterColumn("SourceName", "string", ".spec.source.name"),
        PrinterColumn("Phase", "string", ".status.phase"),
    ),
    older_versions=(OlderVersion(constants.EXPORT_OLDER_VERSION, deprecation_warning=export.V1BETA1_DEPRECATION),),
)

ALL_KINDS: tuple[KindSpec, ...] = (
    VIRTUAL_MACHINE,
    VIRTUAL_MACHINE_INSTANCE,
    VIRTUAL_MACHINE_INSTANCE_REPLICA_SET,
    VIRTUAL_MACHINE_POOL,
    VIRTUAL_MACHINE_INSTANCE_MIGRATION,
    MIGRATION_POLICY,
    VIRTUAL_MACHINE_INSTANCETYPE,
    VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE,
    VIRTUAL_MACHINE_PREFERENCE,
    VIRTUAL_MACHINE_CLUSTER_PREFERENCE,
    VIRTUAL_MACHINE_SNAPSHOT,
    VIRTUAL_MACHINE_SNAPSHOT_CONTENT,
    VIRTUAL_MACHINE_RESTORE,
    VIRTUAL_MACHINE_CLONE,
    VIRTUAL_MACHINE_EXPORT,
    DATA_VOLUME,
    DATA_SOURCE,
    KUBEVIRT,
)

_BY_GVK = {(k.group, k.kind): k for k in ALL_KINDS}
OUR_GROUPS = frozenset(k.group for k in ALL_KINDS)


def kind_for(api_version: str, kind: str) -> KindSpec | None:
    """The kind served for `apiVersion`/`kind`, or None when it is not one of ours."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    spec = _BY_GVK.get((group, kind))
    if spec is not None and api_version == spec.api_version:
        return spec
    return None
