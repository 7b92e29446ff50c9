"""The resources components use, named by group, version and plural (what URLs are built from)."""

from __future__ import annotations

from dataclasses import dataclass

from pykubevirt.api import constants as c


@dataclass(frozen=True, slots=True)
class ResourceRef:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


VIRTUAL_MACHINES = ResourceRef(c.KUBEVIRT_GROUP, c.KUBEVIRT_VERSION, "virtualmachines", c.VM_KIND)
VIRTUAL_MACHINE_INSTANCES = ResourceRef(c.KUBEVIRT_GROUP, c.KUBEVIRT_VERSION, "virtualmachineinstances", c.VMI_KIND)
VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS = ResourceRef(
    c.KUBEVIRT_GROUP, c.KUBEVIRT_VERSION, "virtualmachineinstancereplicasets", c.VMIRS_KIND
)
VIRTUAL_MACHINE_POOLS = ResourceRef(c.POOL_GROUP, c.POOL_VERSION, "virtualmachinepools", c.VM_POOL_KIND)
MIGRATIONS = ResourceRef(c.KUBEVIRT_GROUP, c.KUBEVIRT_VERSION, "virtualmachineinstancemigrations", c.VMIM_KIND)
INSTANCETYPES = ResourceRef(
    c.INSTANCETYPE_GROUP, c.INSTANCETYPE_VERSION, "virtualmachineinstancetypes", c.INSTANCETYPE_KIND
)
CLUSTER_INSTANCETYPES = ResourceRef(
    c.INSTANCETYPE_GROUP,
    c.INSTANCETYPE_VERSION,
    "virtualmachineclusterinstancetypes",
    c.CLUSTER_INSTANCETYPE_KIND,
    False,
)
PREFERENCES = ResourceRef(c.INSTANCETYPE_GROUP, c.INSTANCETYPE_VERSION, "virtualmachinepreferences", c.PREFERENCE_KIND)
CLUSTER_PREFERENCES = ResourceRef(
    c.INSTANCETYPE_GROUP, c.INSTANCETYPE_VERSION, "virtualmachineclusterpreferences", c.CLUSTER_PREFERENCE_KIND, False
)
KUBEVIRTS = ResourceRef(c.KUBEVIRT_GROUP, c.KUBEVIRT_VERSION, "kubevirts", c.KUBEVIRT_KIND)
DATA_VOLUMES = ResourceRef(c.CDI_GROUP, c.CDI_VERSION, "datavolumes", c.DATA_VOLUME_KIND)
DATA_SOURCES = ResourceRef(c.CDI_GROUP, c.CDI_VERSION, "datasources", c.DATA_SOURCE_KIND)
VM_SNAPSHOTS = ResourceRef(c.SNAPSHOT_GROUP, c.SNAPSHOT_VERSION, "virtualmachinesnapshots", c.VM_SNAPSHOT_KIND)
VM_SNAPSHOT_CONTENTS = ResourceRef(
    c.SNAPSHOT_GROUP, c.SNAPSHOT_VERSION, "virtualmachinesnapshotcontents", c.VM_SNAPSHOT_CONTENT_KIND
)
VM_RESTORES = ResourceRef(c.SNAPSHOT_GROUP, c.SNAPSHOT_VERSION, "virtualmachinerestores", c.VM_RESTORE_KIND)
VM_CLONES = ResourceRef(c.CLONE_GROUP, c.CLONE_VERSION, "virtualmachineclones", c.VM_CLONE_KIND)
VM_EXPORTS = ResourceRef(c.EXPORT_GROUP, c.EXPORT_VERSION, "virtualmachineexports", c.VM_EXPORT_KIND)
VOLUME_SNAPSHOTS = ResourceRef(
    c.VOLUME_SNAPSHOT_GROUP, c.VOLUME_SNAPSHOT_VERSION, "volumesnapshots", c.VOLUME_SNAPSHOT_KIND
)
VOLUME_SNAPSHOT_CONTENTS = ResourceRef(
    c.VOLUME_SNAPSHOT_GROUP, c.VOLUME_SNAPSHOT_VERSION, "volumesnapshotcontents", c.VOLUME_SNAPSHOT_CONTENT_KIND, False
)
VOLUME_SNAPSHOT_CLASSES = ResourceRef(
    c.VOLUME_SNAPSHOT_GROUP, c.VOLUME_SNAPSHOT_VERSION, "volumesnapshotclasses", c.VOLUME_SNAPSHOT_CLASS_KIND, False
)
PODS = ResourceRef("", "v1", "pods", "Pod")
NETWORK_ATTACHMENT_DEFINITIONS = ResourceRef(
    "k8s.cni.cncf.io", "v1", "network-attachment-definitions", "NetworkAttachmentDefinition"
)
NODES = ResourceRef("", "v1", "nodes", "Node", False)
EVENTS = ResourceRef("", "v1", "events", "Event")
NAMESPACES = ResourceRef("", "v1", "namespaces", "Namespace", False)
MIGRATION_POLICIES = ResourceRef("migrations.kubevirt.io", "v1alpha1", "migrationpolicies", "MigrationPolicy", False)
PERSISTENT_VOLUME_CLAIMS = ResourceRef("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
PERSISTENT_VOLUMES = ResourceRef("", "v1", "persistentvolumes", "PersistentVolume", False)
STORAGE_CLASSES = ResourceRef("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)
CONFIG_MAPS = ResourceRef("", "v1", "configmaps", "ConfigMap")
SECRETS = ResourceRef("", "v1", "secrets", "Secret")
SERVICE_ACCOUNTS = ResourceRef("", "v1", "serviceaccounts", "ServiceAccount")
CONTROLLER_REVISIONS = ResourceRef("apps", "v1", "controllerrevisions", "ControllerRevision")
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", "Lease")
SERVICES = ResourceRef("", "v1", "services", "Service")
ENDPOINTS = ResourceRef("", "v1", "endpoints", "Endpoints")
ENDPOINT_SLICES = ResourceRef("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
