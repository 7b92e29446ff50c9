"""cloud-init volume sources: one user-data and one network-data source, each at most 2 KiB inline."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import as_str, get

# Inline data is capped because every edit ships the whole object to many nodes; larger data belongs in a Secret.
CLOUD_INIT_USER_MAX_LEN = 2048
CLOUD_INIT_NETWORK_MAX_LEN = 2048


def _decode_base64(data: str) -> bytes | None:
    """Go's base64.StdEncoding.DecodeString: padded standard alphabet; newlines are skipped."""
    cleaned = data.replace("\r", "").replace("\n", "")
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        return None


def _data_length(
    volume_path: FieldPath, source_type: str, source: Mapping[str, Any], kind: str
) -> tuple[int, int, list[Cause]]:
    """Count of set sources, the decoded length and base64 errors for `kind` ("user" or "network")."""
    causes: list[Cause] = []
    count, length = 0, 0
    if get(source, f"{kind}DataSecretRef", "name"):
        count += 1
    encoded = as_str(source.get(f"{kind}DataBase64"))
    if encoded:
        count += 1
        decoded = _decode_base64(encoded)
        if decoded is None:
            path = volume_path.child(source_type, f"{kind}DataBase64")
            causes.append(invalid(str(path), f"{path}.{source_type}.{kind}DataBase64 is not a valid base64 value."))
            # Go still counts the bytes decoded before the error; none is the closest safe answer.
            decoded = b""
        length = len(decoded)
    inline = as_str(source.get(f"{kind}Data"))
    if inline:
        count += 1
        length = len(inline.encode())
    return count, length, causes


def validate_cloud_init(volume_path: FieldPath, volume: Mapping[str, Any]) -> list[Cause]:
    """The cloud-init part of validateVolumes for one volume (NoCloud first, as upstream)."""
    if volume.get("cloudInitNoCloud") is not None:
        source_type = "cloudInitNoCloud"
    elif volume.get("cloudInitConfigDrive") is not None:
        source_type = "cloudInitConfigDrive"
    else:
        return []
    source = volume[source_type] if isinstance(volume[source_type], Mapping) else {}
    path = volume_path.child(source_type)
    causes: list[Cause] = []

    user_count, user_len, errs = _data_length(volume_path, source_type, source, "user")
    causes += errs
    if user_count > 1:
        causes.append(invalid(str(path), f"{path} must have only one userdatasource set."))
    if user_len > CLOUD_INIT_USER_MAX_LEN:
        causes.append(
            invalid(
                str(path),
                f"{path} userdata exceeds {CLOUD_INIT_USER_MAX_LEN} byte limit. "
                "Should use UserDataSecretRef for larger data.",
            )
        )

    net_count, net_len, errs = _data_length(volume_path, source_type, source, "network")
    causes += errs
    if net_count > 1:
        causes.append(invalid(str(path), f"{path} must have only one networkdata source set."))
    if net_len > CLOUD_INIT_NETWORK_MAX_LEN:
        causes.append(
            invalid(
                str(path),
                f"{path} networkdata exceeds {CLOUD_INIT_NETWORK_MAX_LEN} byte limit. "
                "Should use NetworkDataSecretRef for larger data.",
            )
        )

    if user_count == 0 and net_count == 0:
        causes.append(invalid(str(path), f"{path} must have at least one userdatasource or one networkdatasource set."))
    return causes
