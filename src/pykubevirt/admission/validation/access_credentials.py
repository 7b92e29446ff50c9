"""accessCredentials: one credential type, one source, one propagation method, and the volumes it needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import as_list, as_map, get


def validate_access_credentials(field: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """`field` is the accessCredentials list path."""
    volumes = [as_map(v) for v in as_list(spec.get("volumes"))]
    has_no_cloud = any(v.get("cloudInitNoCloud") is not None for v in volumes)
    has_config_drive = any(v.get("cloudInitConfigDrive") is not None for v in volumes)
    causes: list[Cause] = []
    for idx, raw in enumerate(as_list(spec.get("accessCredentials"))):
        cred = as_map(raw)
        path = field.index(idx)
        count = 0
        ssh = cred.get("sshPublicKey")
        if ssh is not None:
            count += 1
            causes += _ssh_public_key(path, as_map(ssh), has_no_cloud, has_config_drive)
        password = cred.get("userPassword")
        if password is not None:
            count += 1
            sources = get(password, "source", "secret") is not None
            methods = get(password, "propagationMethod", "qemuGuestAgent") is not None
            if not sources:
                causes.append(
                    invalid(str(path.child("userPassword", "source")), f"{path} must have exactly one source set")
                )
            if not methods:
                causes.append(
                    invalid(
                        str(path.child("userPassword", "propagationMethod")),
                        f"{path} must have exactly one propagationMethod set",
                    )
                )
        if count != 1:
            causes.append(invalid(str(path), f"{path} must have exactly one access credential type set"))
    return causes


def _ssh_public_key(path: FieldPath, ssh: Mapping[str, Any], has_no_cloud: bool, has_config_drive: bool) -> list[Cause]:
    causes: list[Cause] = []
    method_path = path.child("sshPublicKey", "propagationMethod")
    methods = 0
    if get(ssh, "propagationMethod", "noCloud") is not None:
        methods += 1
        if not has_no_cloud:
            causes.append(
                invalid(
                    str(method_path),
                    f"{path} requires a noCloud volume to exist when the noCloud propagationMethod is in use.",
                )
            )
    if get(ssh, "propagationMethod", "configDrive") is not None:
        methods += 1
        if not has_config_drive:
            causes.append(
                invalid(
                    str(method_path),
                    f"{path} requires a configDrive volume to exist when the configDrive propagationMethod is in use.",
                )
            )
    agent = get(ssh, "propagationMethod", "qemuGuestAgent")
    if agent is not None:
        if not as_list(get(agent, "users")):
            causes.append(
                invalid(
                    str(method_path.child("qemuGuestAgent", "users")),
                    f"{path} requires at least one user to be present in the users list",
                )
            )
        methods += 1
    if get(ssh, "source", "secret") is None:
        causes.append(invalid(str(path.child("sshPublicKey", "source")), f"{path} must have exactly one source set"))
    if methods != 1:
        causes.append(invalid(str(method_path), f"{path} must have exactly one propagationMethod set"))
    return causes
