"""The names of a VirtualMachineExport's objects (pkg/storage/export/export), with library-go's naming.GetName."""

from __future__ import annotations

from typing import Final

DNS1035_MAX: Final = 63
EXPORT_PREFIX: Final = "virt-export"
SERVICE_LABEL: Final = "kubevirt.io.virt-export-service"
# Where virt-controller records the exporter's loopback address for the export proxy (pykubevirt's: no Service).
SERVER_URL_ANNOTATION: Final = "export.pykubevirt.io/server-url"


def _fnv32a(text: str) -> str:
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return f"{value:08x}"


def generated_name(base: str, suffix: str, max_length: int = DNS1035_MAX) -> str:
    """naming.GetName: `base-suffix`, or when too long a shortened base with a hash so the name stays unique."""
    name = f"{base}-{suffix}"
    if len(name) <= max_length:
        return name
    base_length = max_length - 10 - len(suffix)
    if base_length < 0:
        prefix = base[: min(len(base), max(0, max_length - 9))]
        short = f"{prefix}-{_fnv32a(name)}"
        return short[: min(max_length, len(short))]
    return f"{base[:base_length]}-{_fnv32a(base)}-{suffix}"


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
