"""VMI volumes and their sources, plus the volume-related status pieces of VMI and VM."""

from __future__ import annotations

from pykubevirt.api.kubevirt import atomic, nullable, uint32
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    int64,
    integer,
    map_of,
    obj,
    quantity,
    string,
    timestamp,
)


def _local_reference(description: str) -> Schema:
    return atomic(obj({"name": string("Name of the referent.", default="")}, description))


# Sources.

CONTAINER_DISK: Schema = obj(
    {
        "image": string("Container image holding the disk image."),
        "imagePullPolicy": string("Always, Never or IfNotPresent; Always for :latest or untagged images."),
        "imagePullSecret": string("Secret used to pull the image."),
        "path": string("Path of the disk image inside the container; the first image under /disk by default."),
    },
    "An ephemeral disk copied from a container image; changes are lost on restart.",
    required=["image"],
)

_CLOUD_INIT_PROPERTIES: dict[str, Schema] = {
    "networkData": string("Inline network configuration (at most 2048 bytes)."),
    "networkDataBase64": string("Network configuration, base64-encoded."),
    "networkDataSecretRef": _local_reference("Secret holding the network configuration (key networkdata)."),
    "secretRef": _local_reference("Secret holding the user data (key userdata)."),
    "userData": string("Inline user data (at most 2048 bytes)."),
    "userDataBase64": string("User data, base64-encoded."),
}

CLOUD_INIT_NO_CLOUD: Schema = obj(_CLOUD_INIT_PROPERTIES, "A cloud-init NoCloud (cidata) disk.")

CLOUD_INIT_CONFIG_DRIVE: Schema = obj(_CLOUD_INIT_PROPERTIES, "A cloud-init ConfigDrive (config-2) disk.")

CONFIG_MAP: Schema = atomic(
    obj(
        {
            "name": string("Name of the ConfigMap.", default=""),
            "optional": boolean("Start even if the ConfigMap or its keys are missing."),
            "volumeLabel": string("Label of the ISO filesystem exposed to the guest."),
        },
        "A ConfigMap exposed to the guest as a disk.",
    )
)

SECRET: Schema = obj(
    {
        "optional": boolean("Start even if the Secret or its keys are missing."),
        "secretName": string("Name of the Secret."),
        "volumeLabel": string("Label of the ISO filesystem exposed to the guest."),
    },
    "A Secret exposed to the guest as a disk.",
)

CONTAINER_PATH: Schema = obj(
    {
        "path": {
            **string("Absolute path in the virt-launcher container to expose.", max_length=4096),
            "x-kubernetes-validations": [
                {"message": "path must be absolute (start with '/')", "rule": "self.startsWith('/')"},
                {"message": "path must not contain '..'", "rule": "!self.contains('..')"},
            ],
        },
        "readOnly": {
            **boolean("Must be true: write access is not supported.", default=True),
            "x-kubernetes-validations": [
                {"message": "readOnly must be true, write access is not supported", "rule": "self == true"}
            ],
        },
    },
    "A path of the virt-launcher container shared with the guest.",
    required=["path"],
)

DATA_VOLUME_SOURCE: Schema = obj(
    {
        "hotpluggable": boolean("Attach the volume through a hotplug pod."),
        "name": string("Name of the DataVolume in the VMI's namespace."),
    },
    "The PVC of a CDI DataVolume.",
    required=["name"],
)

PVC_SOURCE: Schema = obj(
    {
        "claimName": string("Name of the PersistentVolumeClaim in the VMI's namespace."),
        "hotpluggable": boolean("Attach the volume through a hotplug pod."),
        "readOnly": boolean("Mount the claim read-only."),
    },
    "A PersistentVolumeClaim.",
    required=["claimName"],
)

_FIELD_REF = atomic(
    obj(
        {
            "apiVersion": string("Schema version fieldPath is written in; v1 by default."),
            "fieldPath": string("Field to expose, e.g. metadata.labels."),
        },
        "A field of the VMI.",
        required=["fieldPath"],
    )
)

_RESOURCE_FIELD_REF = atomic(
    obj(
        {
            "containerName": string("Container whose resource is exposed."),
            "divisor": quantity("Unit the value is divided by; 1 by default."),
            "resource": string("Resource to expose, e.g. limits.memory."),
        },
        "A resource of a container.",
        required=["resource"],
    )
)

DOWNWARD_API: Schema = obj(
    {
        "fields": array(
            obj(
                {
                    "fieldRef": _FIELD_REF,
                    "mode": integer("File mode bits (0000-0777)."),
                    "path": string("Relative file path of the value."),
                    "resourceFieldRef": _RESOURCE_FIELD_REF,
                },
                required=["path"],
            ),
            "Files of the disk and the value each holds.",
        ),
        "volumeLabel": string("Label of the ISO filesystem exposed to the guest."),
    },
    "Metadata of the VMI exposed to the guest as a disk.",
)

EMPTY_DISK: Schema = obj(
    {"capacity": quantity("Size of the disk.")},
    "A blank ephemeral disk, discarded when the VMI stops.",
    required=["capacity"],
)

EPHEMERAL: Schema = obj(
    {
        "persistentVolumeClaim": obj(
            {
                "claimName": string("Name of the PersistentVolumeClaim."),
                "readOnly": boolean("Mount the claim read-only."),
            },
            "The claim used as the read-only base.",
            required=["claimName"],
        )
    },
    "A PVC used read-only behind a discarded copy-on-write overlay.",
)

HOST_DISK: Schema = obj(
    {
        "capacity": quantity("Size of the image created with type DiskOrCreate."),
        "path": string("Path of the disk image on the node."),
        "shared": boolean("Whether the image is shared between nodes (for live migration)."),
        "type": string("Disk (must exist) or DiskOrCreate."),
    },
    "A disk image on the node (HostDisk feature gate).",
    required=["path", "type"],
)

MEMORY_DUMP: Schema = obj(
    {
        "claimName": string("Name of the PersistentVolumeClaim receiving the dump."),
        "hotpluggable": boolean("Attach the volume through a hotplug pod."),
        "readOnly": boolean("Mount the claim read-only."),
    },
    "A PVC receiving a memory dump of the guest.",
    required=["claimName"],
)

SYSPREP: Schema = obj(
    {
        "configMap": _local_reference("ConfigMap holding autounattend.xml or unattend.xml."),
        "secret": _local_reference("Secret holding autounattend.xml or unattend.xml."),
    },
    "Windows Sysprep answer files (one source).",
)

VOLUME: Schema = obj(
    {
        "cloudInitConfigDrive": CLOUD_INIT_CONFIG_DRIVE,
        "cloudInitNoCloud": CLOUD_INIT_NO_CLOUD,
        "configMap": CONFIG_MAP,
        "containerDisk": CONTAINER_DISK,
        "containerPath": CONTAINER_PATH,
        "dataVolume": DATA_VOLUME_SOURCE,
        "downwardAPI": DOWNWARD_API,
        "downwardMetrics": obj(description="Host metrics exposed to the guest as a disk."),
        "emptyDisk": EMPTY_DISK,
        "ephemeral": EPHEMERAL,
        "hostDisk": HOST_DISK,
        "memoryDump": MEMORY_DUMP,
        "name": string("Volume name (DNS label), referred to by a disk or filesystem."),
        "persistentVolumeClaim": PVC_SOURCE,
        "secret": SECRET,
        "serviceAccount": obj(
            {"serviceAccountName": string("Name of the ServiceAccount.")},
            "A ServiceAccount's token and CA exposed to the guest as a disk.",
        ),
        "sysprep": SYSPREP,
    },
    "A named storage source; exactly one source type may be set.",
    required=["name"],
)

VOLUMES: Schema = array(VOLUME, "Storage the VMI's disks and filesystems are backed by.", max_items=256)

UTILITY_VOLUMES: Schema = array(
    obj(
        {
            "claimName": string("Name of the PersistentVolumeClaim."),
            "name": string("Volume name."),
            "readOnly": boolean("Mount the claim read-only."),
            "type": string("What the volume is for."),
        },
        required=["claimName", "name"],
    ),
    "PVCs attached to the launcher pod for KubeVirt's own use, not exposed to the guest.",
    list_type="map",
    list_map_keys=["name"],
    max_items=256,
)

HOTPLUG_VOLUME_SOURCE: Schema = obj(
    {"dataVolume": DATA_VOLUME_SOURCE, "persistentVolumeClaim": PVC_SOURCE},
    "Source of a hotplugged volume: dataVolume or persistentVolumeClaim.",
)

# Status.

PVC_INFO: Schema = obj(
    {
        "accessModes": array(string(), "Access modes of the claim.", list_type="atomic"),
        "capacity": map_of(quantity(), "Capacity of the bound volume."),
        "claimName": string("Name of the claim."),
        "filesystemOverhead": string(
            "Share of a filesystem volume the filesystem uses, from 0 to 1.", pattern=r"^(0(?:\.\d{1,3})?|1)$"
        ),
        "preallocated": boolean("Whether the volume is preallocated."),
        "requests": map_of(quantity(), "Resources the claim requests."),
        "volumeMode": string("Filesystem or Block."),
    },
    "What is known of a PersistentVolumeClaim.",
)

MIGRATED_VOLUMES: Schema = array(
    obj(
        {
            "destinationPVCInfo": describe(PVC_INFO, "The claim the volume moves to."),
            "sourcePVCInfo": describe(PVC_INFO, "The claim the volume moves from."),
            "volumeName": string("Name of the volume."),
        },
        required=["volumeName"],
    ),
    "Volumes being moved to other claims by a storage migration.",
    list_type="atomic",
)

VOLUME_STATUS: Schema = array(
    obj(
        {
            "containerDiskVolume": obj(
                {"checksum": uint32("Checksum of the disk image.")}, "Details of a containerDisk volume."
            ),
            "hotplugVolume": obj(
                {
                    "attachPodName": string("Pod that attaches the volume."),
                    "attachPodUID": string("UID of that pod."),
                },
                "Details of a hotplugged volume.",
            ),
            "memoryDumpVolume": obj(
                {
                    "claimName": string("Claim receiving the dump."),
                    "endTimestamp": timestamp("When the dump finished."),
                    "startTimestamp": timestamp("When the dump started."),
                    "targetFileName": string("Dump file name in the claim."),
                },
                "Details of a memory dump volume.",
            ),
            "message": string("Human-readable detail of the volume's state."),
            "name": string("Name of the volume."),
            "persistentVolumeClaimInfo": describe(PVC_INFO, "The claim backing the volume."),
            "phase": string("Attachment phase of a hotplugged volume."),
            "reason": string("Machine-readable reason of the volume's state."),
            "size": int64("Size of the volume in bytes."),
            "target": string("Device name of the disk in the guest, e.g. vda."),
        },
        required=["name", "target"],
    ),
    "State of each volume of the VMI.",
    list_type="atomic",
)

CHANGED_BLOCK_TRACKING_STATUS: Schema = nullable(
    obj(
        {
            "backupStatus": nullable(
                obj(
                    {
                        "backupMsg": string("Human-readable message of the backup."),
                        "backupName": string("Name of the backup."),
                        "checkpointName": string("Checkpoint the backup created."),
                        "completed": boolean("Whether the backup completed."),
                        "endTimestamp": timestamp("When the backup ended."),
                        "failed": boolean("Whether the backup failed."),
                        "quiesceStatus": string("Whether the guest filesystems were frozen for the backup."),
                        "startTimestamp": timestamp("When the backup started."),
                        "volumes": array(
                            obj({"volumeName": string("Name of the volume.")}, required=["volumeName"]),
                            "Volumes included in the backup.",
                            list_type="atomic",
                        ),
                    },
                    "State of the latest backup.",
                )
            ),
            "state": string("Whether changed block tracking is enabled, pending or disabled."),
        },
        "Changed block tracking state of the disks.",
        required=["state"],
    )
)
