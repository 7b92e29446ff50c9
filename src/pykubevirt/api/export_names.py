"""The names of a VirtualMachineExport's objects (pkg/storage/export/export)."""

from __future__ import annotations

from typing import Final

from pykubevirt.api.generated_names import DNS1035_LABEL_MAX as DNS1035_MAX
from pykubevirt.api.generated_names import generated_name

EXPORT_PREFIX: Final = "virt-export"
SERVICE_LABEL: Final = "kubevirt.io.virt-export-service"
# Where virt-controller records the exporter's loopback address for the export proxy (pykubevirt's: no Service).
SERVER_URL_ANNOTATION: Final = "export.pykubevirt.io/server-url"


def exporter_pod_name(export: str) -> str:
    return generated_name(EXPORT_PREFIX, export)


def service_name(export: str) -> str:
    """getExportServiceName: dots become dashes (a DNS-1035 label), and a name that would start with `-` is cut."""
    suffix = export.replace(".", "-")
    if len(suffix) == DNS1035_MAX - 10:
        suffix = suffix[:-1]
    return generated_name(EXPORT_PREFIX, suffix)


def token_secret_name(export: str) -> str:
    return generated_name("export-token", export)


def service_label_value(export: str) -> str:
    return export if len(export) <= DNS1035_MAX else generated_name(EXPORT_PREFIX, export)


def pod_volume_name(claim: str) -> str:
    """The exporter pod's volume (and mount directory) of a claim."""
    name = claim.replace(".", "-")
    return name if len(name) <= DNS1035_MAX else generated_name(EXPORT_PREFIX, name)


def manifest_config_map_name(export: str) -> str:
    return f"exporter-vm-manifest-{export}"
