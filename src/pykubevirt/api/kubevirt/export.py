"""export.kubevirt.io/v1: VirtualMachineExport, with the fields of KubeVirt's CRD
(staging/src/kubevirt.io/api/export/v1/types.go)."""

from __future__ import annotations

from typing import Final

from pykubevirt.api.constants import EXPORT_API_VERSION, VM_EXPORT_KIND
from pykubevirt.api.kubevirt import conditions, nullable
from pykubevirt.api.kubevirt.snapshot import typed_local_object_reference
from pykubevirt.api.schema import Schema, array, obj, string, timestamp

EXPORT_PLURAL: Final = "virtualmachineexports"
EXPORT_PHASES: Final = ("Pending", "Ready", "Terminated", "Skipped")
CONDITION_TYPES: Final = ("Ready", "PVCReady", "VolumesCreated", "OCIReady")
VOLUME_FORMATS: Final = ("raw", "gzip", "dir", "tar.gz")
MANIFEST_TYPES: Final = ("all", "auth-header-secret", "oci")
# exportv1.DefaultDurationTTL: the controller's value for an unset spec.ttlDuration (no CRD default).
DEFAULT_TTL_SECONDS: Final = 2 * 3600
V1BETA1_DEPRECATION: Final = (
    "export.kubevirt.io/v1beta1 VirtualMachineExport is now deprecated and will be removed in a future version."
)


VM_EXPORT_SPEC: Schema = obj(
    {
        "source": typed_local_object_reference(
            "TypedLocalObjectReference contains enough information to let you locate the typed referenced object "
            "inside the same namespace."
        ),
        "tokenSecretRef": string(
            "TokenSecretRef is the name of the custom-defined secret that contains the token used by the export "
            "server pod"
        ),
        "ttlDuration": string(
            "ttlDuration limits the lifetime of an export\nIf this field is set, after this duration has passed "
            "from counting from CreationTimestamp,\nthe export is eligible to be automatically deleted.\nIf this "
            "field is omitted, a reasonable default is applied."
        ),
    },
    "VirtualMachineExportSpec is the spec for a VirtualMachineExport resource",
    required=["source"],
)


def _link() -> Schema:
    volume_format = obj(
        {
            "format": string("Format is the format of the image at the specified URL", enum=VOLUME_FORMATS),
            "url": string("Url is the url that contains the volume in the format specified"),
        },
        "VirtualMachineExportVolumeFormat contains the format type and URL to get the volume in that format",
        required=["format", "url"],
    )
    volume = obj(
        {
            "formats": array(volume_format, "", list_type="map", list_map_keys=["format"]),
            "name": string("Name is the name of the exported volume"),
        },
        "VirtualMachineExportVolume contains the name and available formats for the exported volume",
        required=["name"],
    )
    manifest = obj(
        {
            "type": string("Type is the type of manifest returned", enum=MANIFEST_TYPES),
            "url": string("Url is the url of the endpoint that returns the manifest"),
        },
        "VirtualMachineExportManifest contains the type and URL of the exported manifest",
        required=["type", "url"],
    )
    return obj(
        {
            "cert": string("Cert is the public CA certificate base64 encoded"),
            "manifests": array(
                manifest,
                "Manifests is a list of available manifests for the export",
                list_type="map",
                list_map_keys=["type"],
            ),
            "volumes": array(
                volume,
                "Volumes is a list of available volumes to export",
                list_type="map",
                list_map_keys=["name"],
            ),
        },
        "VirtualMachineExportLink contains a list of volumes available for export, as well as the URLs to obtain "
        "these volumes",
        required=["cert"],
    )


def _conditions() -> Schema:
    node = conditions(" or ".join(CONDITION_TYPES) + ".")
    node["items"]["description"] = "Condition defines conditions"
    node["items"]["properties"]["type"]["description"] = "ConditionType is the const type for Conditions"
    return node


VM_EXPORT_STATUS: Schema = obj(
    {
        "conditions": _conditions(),
        "links": obj(
            {"external": _link(), "internal": _link()},
            "VirtualMachineExportLinks contains the links that point the exported VM resources",
        ),
        "phase": string("VirtualMachineExportPhase is the current phase of the VirtualMachineExport"),
        "serviceName": string(
            "ServiceName is the name of the service created associated with the Virtual Machine "
            "export. It will be used to\ncreate the internal URLs for downloading the images"
        ),
        "tokenSecretRef": string(
            "TokenSecretRef is the name of the secret that contains the token used by the export server pod"
        ),
        "ttlExpirationTime": nullable(
            timestamp(
                "The time at which the VM Export will be completely removed according to specified TTL\nFormula is "
                "CreationTimestamp + TTL"
            )
        ),
        "virtualMachineName": string(
            "VirtualMachineName shows the name of the source virtual machine if the "
            "source is either a VirtualMachine or\na VirtualMachineSnapshot. This is "
            "mainly to easily identify the source VirtualMachine in case of a\n"
            "VirtualMachineSnapshot"
        ),
    },
    "VirtualMachineExportStatus is the status for a VirtualMachineExport resource",
)

VIRTUAL_MACHINE_EXPORT: Schema = obj(
    {
        "apiVersion": string(f"API version: {EXPORT_API_VERSION}."),
        "kind": string(f"Kind: {VM_EXPORT_KIND}."),
        "metadata": obj(),
        "spec": VM_EXPORT_SPEC,
        "status": VM_EXPORT_STATUS,
    },
    "VirtualMachineExport defines the operation of exporting a VM source",
    required=["spec"],
)
