"""cloud-init data and ISOs for a VMI, as KubeVirt's pkg/cloud-init/cloud-init.go builds them.

NoCloud ISOs (`cidata`) carry user-data, meta-data and network-config; ConfigDrive ISOs (`config-2`) carry
openstack/latest/{user_data,meta_data.json,network_data.json}. Both meta-data files are JSON, as upstream writes them.
"""

from __future__ import annotations

import base64
import binascii
import json
import string
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pykubevirt.api.constants import CLUSTER_INSTANCETYPE_NAME_ANNOTATION, INSTANCETYPE_NAME_ANNOTATION
from pykubevirt.launcher.iso_image import write_iso

NO_CLOUD: Final = "noCloud"
CONFIG_DRIVE: Final = "configDrive"
VOLUME_SOURCES: Final = {NO_CLOUD: "cloudInitNoCloud", CONFIG_DRIVE: "cloudInitConfigDrive"}
ISO_LABELS: Final = {NO_CLOUD: "cidata", CONFIG_DRIVE: "config-2"}
USER_DATA_KEYS: Final = ("userdata", "userData")
NETWORK_DATA_KEYS: Final = ("networkdata", "networkData")
DNS1123_LABEL_MAX_LENGTH: Final = 63

# ISO paths per source: (user data, meta data, network data).
_LAYOUT: Final = {
    NO_CLOUD: ("user-data", "meta-data", "network-config"),
    CONFIG_DRIVE: (
        "openstack/latest/user_data",
        "openstack/latest/meta_data.json",
        "openstack/latest/network_data.json",
    ),
}
# Field order of upstream's Go structs, so json.Marshal's output is reproduced byte for byte.
_NO_CLOUD_FIELDS: Final = ("instance-type", "instance-id", "local-hostname", "public-keys")
_CONFIG_DRIVE_FIELDS: Final = (
    "instance_type",
    "instance_id",
    "local_hostname",
    "hostname",
    "uuid",
    "devices",
    "public_keys",
)
_REQUIRED_FIELDS: Final = {"instance-id", "instance_id"}
_BASE64_ALPHABET: Final = frozenset(string.ascii_letters + string.digits + "+/")


@dataclass
class CloudInitData:
    """What goes on one cloud-init ISO; `devices` (ConfigDrive's tagged devices) is known once the domain exists."""

    source_type: str
    user_data: bytes
    network_data: bytes
    metadata: dict[str, Any]
    volume_name: str = ""
    devices: list[dict[str, Any]] | None = None


def normalize_source_type(source_type: str) -> str:
    """`noCloud`/`configDrive`, also accepting the volume source keys `cloudInitNoCloud`/`cloudInitConfigDrive`."""
    for kind, key in VOLUME_SOURCES.items():
        if source_type in (kind, key):
            return kind
    raise ValueError(f"invalid cloud-init data source: {source_type!r}")


def hostname(vmi: Mapping[str, Any]) -> str:
    """`spec.hostname`, else the name's first DNS label cut to 63 characters (dns.SanitizeHostname)."""
    spec_hostname = (vmi.get("spec") or {}).get("hostname")
    if spec_hostname:
        return str(spec_hostname)
    return str(vmi["metadata"]["name"]).split(".")[0][:DNS1123_LABEL_MAX_LENGTH]


def instance_type(vmi: Mapping[str, Any]) -> str:
    """The cluster instancetype annotation, else the namespaced one, else ""."""
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    return str(
        annotations.get(CLUSTER_INSTANCETYPE_NAME_ANNOTATION) or annotations.get(INSTANCETYPE_NAME_ANNOTATION) or ""
    )


def firmware_uuid(vmi: Mapping[str, Any]) -> str:
    """spec.domain.firmware.uuid; upstream falls back to a random UUID when no firmware is set."""
    firmware = ((vmi.get("spec") or {}).get("domain") or {}).get("firmware")
    if firmware is None:
        return str(uuid.uuid4())
    return str(firmware.get("uuid") or "")


def public_keys(
    vmi: Mapping[str, Any], source_type: str, secrets: Mapping[str, Mapping[str, bytes]] | None = None
) -> dict[str, str]:
    """SSH keys of accessCredentials propagated through this source: every non-empty secret value, numbered from 0."""
    method = normalize_source_type(source_type)
    secrets = secrets or {}
    keys: dict[str, str] = {}
    for credential in (vmi.get("spec") or {}).get("accessCredentials") or []:
        ssh = credential.get("sshPublicKey") or {}
        if (ssh.get("propagationMethod") or {}).get(method) is None:
            continue
        secret_name = ((ssh.get("source") or {}).get("secret") or {}).get("secretName")
        if not secret_name:
            continue
        if secret_name not in secrets:
            raise ValueError(f'secret "{secret_name}" of accessCredentials sshPublicKey was not found')
        # A mounted secret lists its keys as files in name order; the `..data` links are skipped as upstream does.
        for key in sorted(secrets[secret_name]):
            value = secrets[secret_name][key]
            if key.startswith("..") or not value:
                continue
            keys[str(len(keys))] = value.decode("utf-8", errors="replace")
    return keys


def metadata(
    vmi: Mapping[str, Any],
    source_type: str,
    secrets: Mapping[str, Mapping[str, bytes]] | None = None,
) -> dict[str, Any]:
    """The meta-data document (NoCloud) or meta_data.json (ConfigDrive) without ConfigDrive's `devices`."""
    kind = normalize_source_type(source_type)
    keys = public_keys(vmi, kind, secrets)
    itype = instance_type(vmi)
    if kind == NO_CLOUD:
        fields: dict[str, Any] = {
            "instance-type": itype,
            "instance-id": firmware_uuid(vmi),
            "local-hostname": hostname(vmi),
            "public-keys": keys,
        }
    else:
        meta = vmi.get("metadata") or {}
        fields = {
            "instance_type": itype,
            "instance_id": f"{meta.get('name', '')}.{meta.get('namespace', '')}",
            "hostname": hostname(vmi),
            "uuid": firmware_uuid(vmi),
            "public_keys": keys,
        }
    # Go's omitempty: empty strings and maps are left out, except the always-present instance id.
    return {key: value for key, value in fields.items() if value or key in _REQUIRED_FIELDS}


def metadata_json(data: CloudInitData) -> bytes:
    """The metadata file as upstream's json.Marshal writes it: struct field order, compact, HTML-safe escapes."""
    kind = normalize_source_type(data.source_type)
    meta = dict(data.metadata)
    order = _NO_CLOUD_FIELDS if kind == NO_CLOUD else _CONFIG_DRIVE_FIELDS
    if kind == CONFIG_DRIVE and data.devices is not None:
        meta["devices"] = data.devices
    ordered = {key: meta[key] for key in order if key in meta}
    ordered.update({key: value for key, value in meta.items() if key not in ordered})
    for map_key in ("public-keys", "public_keys"):
        if isinstance(ordered.get(map_key), Mapping):
            ordered[map_key] = dict(sorted(ordered[map_key].items()))  # Go marshals maps with sorted keys
    text = json.dumps(ordered, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text.encode()


def _decode_base64(value: str, what: str, volume_name: str) -> bytes:
    """Go's base64.StdEncoding.DecodeString (padded, newlines skipped), with its error wording."""
    cleaned = value.replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        position = next((i for i, char in enumerate(cleaned) if char not in _BASE64_ALPHABET and char != "="), None)
        if position is None:
            position = len(cleaned) - len(cleaned) % 4 if len(cleaned) % 4 else cleaned.find("=")
        raise ValueError(
            f'cloud-init volume "{volume_name}": {what} is not valid base64: '
            f"illegal base64 data at input byte {position}"
        ) from None


def _secret_value(
    secrets: Mapping[str, Mapping[str, bytes]], secret_name: str, keys: tuple[str, ...], volume_name: str
) -> bytes | None:
    """The first present key of a referenced secret; None when it has none of them."""
    if secret_name not in secrets:
        raise ValueError(f'secret "{secret_name}" referenced by cloud-init volume "{volume_name}" was not found')
    for key in keys:
        if key in secrets[secret_name]:
            return bytes(secrets[secret_name][key])
    return None


def _source_data(source: Mapping[str, Any], kind: str, resolved: bytes | None, volume_name: str) -> bytes:
    """Secret data if resolved and non-empty, else inline `<kind>Data`, else decoded `<kind>DataBase64`."""
    if resolved:
        return resolved
    if inline := source.get(f"{kind}Data"):
        return str(inline).encode()
    if encoded := source.get(f"{kind}DataBase64"):
        return _decode_base64(str(encoded), f"{kind}DataBase64", volume_name)
    return b""


def find_cloud_init_volume(vmi: Mapping[str, Any], source_type: str | None = None) -> tuple[str, dict[str, Any]] | None:
    """The first cloud-init volume (of `source_type` if given) as (source type, volume); NoCloud first per volume."""
    wanted = normalize_source_type(source_type) if source_type else None
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        for kind, key in VOLUME_SOURCES.items():
            if volume.get(key) is not None and wanted in (None, kind):
                return kind, volume
    return None


def cloud_init_data(
    vmi: Mapping[str, Any],
    source_type: str,
    secrets: Mapping[str, Mapping[str, bytes]] | None = None,
) -> CloudInitData:
    """User, network and meta data of the VMI's first `source_type` volume; `secrets` maps name -> key -> bytes.

    Raises ValueError for a missing volume or secret, bad base64, or no data at all, with upstream's wording.
    """
    kind = normalize_source_type(source_type)
    found = find_cloud_init_volume(vmi, kind)
    if found is None:
        raise ValueError(f"VMI has no {VOLUME_SOURCES[kind]} volume")
    _, volume = found
    volume_name = str(volume.get("name", ""))
    source = volume[VOLUME_SOURCES[kind]]
    secrets = secrets or {}

    user_secret = network_secret = None
    refs = [
        (ref_name, keys)
        for ref_name, keys in (
            ((source.get("userDataSecretRef") or {}).get("name"), USER_DATA_KEYS),
            ((source.get("networkDataSecretRef") or {}).get("name"), NETWORK_DATA_KEYS),
        )
        if ref_name
    ]
    if refs:
        values = [_secret_value(secrets, name, keys, volume_name) for name, keys in refs]
        # Upstream tolerates one unreadable reference as long as the other one resolves.
        if all(value is None for value in values):
            wanted = "; ".join(f'secret "{name}" has no key {" or ".join(keys)}' for name, keys in refs)
            raise ValueError(f"no cloud-init data-source found at volume: {volume_name} ({wanted})")
        for (_, keys), value in zip(refs, values, strict=True):
            if keys is USER_DATA_KEYS:
                user_secret = value
            else:
                network_secret = value

    user_data = _source_data(source, "user", user_secret, volume_name)
    network_data = _source_data(source, "network", network_secret, volume_name)
    if not user_data and not network_data:
        raise ValueError(
            "userDataBase64, userData, networkDataBase64 or networkData is required for a cloud-init data source"
        )
    return CloudInitData(
        source_type=kind,
        user_data=user_data,
        network_data=network_data,
        metadata=metadata(vmi, kind, secrets),
        volume_name=volume_name,
    )


def _iso_files(data: CloudInitData) -> Iterator[tuple[str, bytes]]:
    """(path, content) pairs; network data only when present, as upstream."""
    user_path, meta_path, network_path = _LAYOUT[normalize_source_type(data.source_type)]
    yield user_path, data.user_data
    yield meta_path, metadata_json(data)
    if data.network_data:
        yield network_path, data.network_data


def build_iso(data: CloudInitData, target: Path) -> None:
    """Write the ISO (Rock Ridge + Joliet) to `<target>.staging`, then rename it over `target` in one step."""
    kind = normalize_source_type(data.source_type)
    if not data.user_data and not data.network_data:
        raise ValueError("UserData or NetworkData is required for cloud-init data source")
    write_iso(_iso_files(data), ISO_LABELS[kind], target)
