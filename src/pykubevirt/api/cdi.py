"""CDI's DataVolume (cdi.kubevirt.io/v1beta1): a PVC populated from an import, clone or upload source.

DATA_VOLUME_SPEC is also the spec of a VM's `dataVolumeTemplates`.
"""

from __future__ import annotations

from pykubevirt.api.constants import CDI_API_VERSION, DATA_VOLUME_KIND
from pykubevirt.api.kubevirt import atomic
from pykubevirt.api.kubevirt.pod_shapes import LABEL_SELECTOR
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    extend,
    integer,
    obj,
    resource_requirements,
    string,
    timestamp,
)

# Claim templates: `storage` lets CDI fill in access modes and volume mode, `pvc` is taken as written.

_DATA_SOURCE = atomic(
    obj(
        {
            "apiGroup": string("API group of the source; empty for the core group."),
            "kind": string("Kind of the source: PersistentVolumeClaim, VolumeSnapshot…"),
            "name": string("Name of the source."),
        },
        "An object the volume is populated from.",
        required=["kind", "name"],
    )
)

_DATA_SOURCE_REF = obj(
    {
        "apiGroup": string("API group of the populator source; empty for the core group."),
        "kind": string("Kind of the populator source."),
        "name": string("Name of the populator source."),
        "namespace": string("Namespace of the source (cross-namespace data sources)."),
    },
    "An object a volume populator fills the volume from.",
    required=["kind", "name"],
)

_RESOURCES = resource_requirements("Storage requested for the claim (requests.storage).")
_RESOURCES["properties"]["limits"]["description"] = "Most storage the claim may use."
_RESOURCES["properties"]["requests"]["description"] = "Storage the claim asks for, e.g. storage: 10Gi."

STORAGE_SPEC: Schema = obj(
    {
        "accessModes": array(string(), "ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod."),
        "dataSource": _DATA_SOURCE,
        "dataSourceRef": _DATA_SOURCE_REF,
        "resources": _RESOURCES,
        "selector": describe(LABEL_SELECTOR, "Labels of the PersistentVolumes the claim may bind."),
        "storageClassName": string("StorageClass of the claim."),
        "volumeMode": string("Filesystem or Block."),
        "volumeName": string("PersistentVolume to bind."),
    },
    "Claim template; CDI fills in unset access modes and volume mode from the StorageClass.",
)

PVC_SPEC: Schema = describe(
    extend(
        STORAGE_SPEC,
        {
            "accessModes": array(
                string(), "ReadWriteOnce, ReadOnlyMany, ReadWriteMany or ReadWriteOncePod.", list_type="atomic"
            ),
            "volumeAttributesClassName": string("VolumeAttributesClass of the claim."),
        },
    ),
    "PersistentVolumeClaim spec, used as written.",
)


def _url_source(description: str, *, required: tuple[str, ...] = (), **extra: Schema) -> Schema:
    return obj(
        {
            "certConfigMap": string("ConfigMap with the CA bundle for TLS."),
            "secretRef": string("Secret with the access credentials."),
            "url": string("Address of the source."),
            **extra,
        },
        description,
        required=["url", *required],
    )


_NAMESPACED_NAME: dict[str, Schema] = {
    "name": string("Name of the source."),
    "namespace": string("Namespace of the source."),
}

DATA_VOLUME_SOURCE: Schema = obj(
    {
        "blank": obj(description="An empty volume."),
        "gcs": obj(
            {"secretRef": string("Secret with the access credentials."), "url": string("gs:// URL of the image.")},
            "Import from Google Cloud Storage.",
            required=["url"],
        ),
        "http": _url_source(
            "Import from an HTTP(S) URL.",
            extraHeaders=array(string(), "Extra request headers, as 'Name: value'."),
            secretExtraHeaders=array(string(), "Secrets holding extra request headers."),
            checksum=string("Expected digest of the body: md5:, sha1:, sha256: or sha512: and the hex digest."),
            insecureSkipVerify=boolean("Skip TLS verification."),
        ),
        "imageio": _url_source(
            "Import from oVirt imageio.",
            required=("diskId",),
            diskId=string("Id of the disk to import."),
            insecureSkipVerify=boolean("Skip TLS verification."),
        ),
        "pvc": obj(_NAMESPACED_NAME, "Clone a PersistentVolumeClaim.", required=["name", "namespace"]),
        "registry": obj(
            {
                "certConfigMap": string("ConfigMap with the CA bundle for TLS."),
                "imageStream": string("OpenShift ImageStream to import from."),
                "platform": obj(
                    {"architecture": string("Architecture of the image to pick from a multi-arch index.")},
                    "Platform of the image to pick.",
                ),
                "pullMethod": string("pod (default) or node: how the image is pulled."),
                "secretRef": string("Secret with the registry credentials."),
                "url": string("docker:// or oci-archive:// URL of a containerdisk image."),
            },
            "Import a disk image from a container registry.",
        ),
        "s3": _url_source("Import from S3."),
        "snapshot": obj(_NAMESPACED_NAME, "Restore from a VolumeSnapshot.", required=["name", "namespace"]),
        "upload": obj(description="Wait for an upload through the upload proxy."),
        "vddk": obj(
            {
                "backingFile": string("Path of the VMDK in the datastore."),
                "extraArgs": string("ConfigMap with extra VDDK arguments."),
                "initImageURL": string("Image providing the VDDK library."),
                "secretRef": string("Secret with the vCenter credentials."),
                "thumbprint": string("Certificate thumbprint of the ESX host."),
                "url": string("vCenter or ESX URL."),
                "uuid": string("UUID of the virtual machine."),
            },
            "Import from VMware through VDDK.",
        ),
    },
    "Where the volume's content comes from; exactly one source.",
)

DATA_VOLUME_SPEC: Schema = obj(
    {
        "checkpoints": array(
            obj(
                {
                    "current": string("Checkpoint to import."),
                    "previous": string("Checkpoint it is relative to; empty for the first."),
                },
                required=["current", "previous"],
            ),
            "Snapshots to import in order (multi-stage import).",
        ),
        "contentType": string("kubevirt (a disk image, default) or archive (a tar).", enum=["kubevirt", "archive"]),
        "finalCheckpoint": boolean("Whether the last checkpoint is the final one."),
        "preallocation": boolean("Preallocate the volume's space."),
        "priorityClassName": string("PriorityClass of the importer, cloner or upload pods."),
        "pvc": PVC_SPEC,
        "source": DATA_VOLUME_SOURCE,
        "sourceRef": obj(
            {
                "kind": string("DataSource."),
                "name": string("Name of the DataSource."),
                "namespace": string("Namespace of the DataSource; the DataVolume's by default."),
            },
            "A DataSource to populate from, instead of source.",
            required=["kind", "name"],
        ),
        "storage": STORAGE_SPEC,
    },
    "The volume to create (pvc or storage) and where its data comes from (source or sourceRef).",
)

DATA_VOLUME_STATUS: Schema = obj(
    {
        "claimName": string("Name of the PersistentVolumeClaim created."),
        "conditions": array(
            obj(
                {
                    "lastHeartbeatTime": timestamp("When the condition was last probed."),
                    "lastTransitionTime": timestamp("When the status last changed."),
                    "message": string("Human-readable detail."),
                    "reason": string("Machine-readable reason."),
                    "status": string("True, False or Unknown."),
                    "type": string("Ready, Bound or Running."),
                },
                required=["type", "status"],
            ),
            "Conditions of the DataVolume.",
        ),
        "phase": string("Progress phase: Pending, ImportScheduled, ImportInProgress, Succeeded, Failed, …"),
        "progress": string("Progress of the population, e.g. 45.3%."),
        "restartCount": integer("How often the importer, cloner or upload pod restarted."),
    },
    "Observed state of the DataVolume.",
)

DATA_VOLUME: Schema = obj(
    {
        "apiVersion": string(f"API version: {CDI_API_VERSION}."),
        "kind": string(f"Kind: {DATA_VOLUME_KIND}."),
        "metadata": obj(),
        "spec": DATA_VOLUME_SPEC,
        "status": DATA_VOLUME_STATUS,
    },
    "A PersistentVolumeClaim that CDI populates from an import, clone or upload source.",
    required=["spec"],
)

# DataSource: a named pointer to a volume (a PVC or a snapshot) that DataVolumes clone through `sourceRef`.

_DATA_SOURCE_SOURCE = obj(
    {
        "pvc": obj(
            _NAMESPACED_NAME, "A PersistentVolumeClaim; the DataSource's namespace by default.", required=["name"]
        ),
        "snapshot": obj(
            _NAMESPACED_NAME, "A VolumeSnapshot; the DataSource's namespace by default.", required=["name"]
        ),
        "dataSource": obj(_NAMESPACED_NAME, "Another DataSource of the same namespace (one level).", required=["name"]),
    },
    "Where the DataSource's data is: exactly one of pvc, snapshot or dataSource.",
)

DATA_SOURCE: Schema = obj(
    {
        "apiVersion": string(f"API version: {CDI_API_VERSION}."),
        "kind": string("Kind: DataSource."),
        "metadata": obj(),
        "spec": obj({"source": _DATA_SOURCE_SOURCE}, "The DataSource's source.", required=["source"]),
        "status": obj(
            {
                "conditions": array(
                    obj(
                        {
                            "lastHeartbeatTime": timestamp("When the condition was last probed."),
                            "lastTransitionTime": timestamp("When the status last changed."),
                            "message": string("Human-readable detail."),
                            "reason": string("Machine-readable reason: Ready, NotFound, NoSource…"),
                            "status": string("True, False or Unknown."),
                            "type": string("Ready."),
                        },
                        required=["type", "status"],
                    ),
                    "Conditions of the DataSource.",
                ),
                "source": _DATA_SOURCE_SOURCE,
            },
            "Observed state: Ready, and the source resolved through a referenced DataSource.",
        ),
    },
    "A named source (a PVC or a snapshot) that DataVolumes populate from with `sourceRef`.",
    required=["spec"],
)
