"""Pod volumes as host paths: emptyDir → a directory, hostPath → the path, configMap/secret/downwardAPI → files.

There are no mount namespaces: a container learns where its volumeMounts and volumeDevices are from
`PYKUBEVIRT_MOUNTS` (container path → host path, api.pod_layout). A persistentVolumeClaim is the host path of its
bound volume (hostPath or local). A volume of another kind is reported as the error of every container that mounts it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pykubevirt.client.errors import ApiError
from pykubevirt.node.env import ConfigError, Fetch, config_data, fetch_config, field_value, resource_value
from pykubevirt.node.pod_dirs import PodDir
from pykubevirt.node.service_account_tokens import ServiceAccountTokens, TokenError

DEFAULT_FILE_MODE = 0o644
_HOST_PATH_CHECKS = {
    "Socket": stat.S_ISSOCK,
    "CharDevice": stat.S_ISCHR,
    "BlockDevice": stat.S_ISBLK,
}


@dataclass
class PreparedVolumes:
    """Host path of each usable volume, and why each other one cannot be used."""

    host_paths: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _relative(path: str) -> PurePosixPath:
    relative = PurePosixPath(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ConfigError(f"invalid volume item path {path!r}: must be relative and must not contain '..'")
    return relative


def _write_files(target: Path, files: Mapping[str, tuple[bytes, int]]) -> None:
    """Replace the volume's content with `files` (relative path → content, mode)."""
    target.mkdir(parents=True, exist_ok=True)
    wanted = {str(_relative(p)) for p in files}
    for existing in sorted(target.rglob("*"), reverse=True):
        relative = str(existing.relative_to(target))
        if existing.is_file() and relative not in wanted:
            existing.unlink()
    for relative, (content, mode) in files.items():
        path = target / _relative(relative)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        os.chmod(tmp, mode)
        os.replace(tmp, path)


def _object_files(
    obj: Mapping[str, Any] | None, kind: str, source: Mapping[str, Any], default_mode: int
) -> dict[str, tuple[bytes, int]]:
    data = config_data(obj, kind) if obj is not None else {}
    items = source.get("items")
    if not items:
        return {key: (value, default_mode) for key, value in data.items()}
    files: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key = str(item.get("key") or "")
        if key not in data:
            if obj is not None and not source.get("optional"):
                raise ConfigError(f"configmap/secret key {key!r} not found in {kind} {obj['metadata'].get('name')}")
            continue
        files[str(item.get("path") or key)] = (data[key], int(item.get("mode") or default_mode))
    return files


async def _source_files(
    pod: Mapping[str, Any], kind: str, source: Mapping[str, Any], fetch: Fetch, default_mode: int
) -> dict[str, tuple[bytes, int]]:
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    name = str((source.get("secretName") if kind == "Secret" else source.get("name")) or "")
    obj = await fetch_config(fetch, kind, namespace, name, bool(source.get("optional")))
    return _object_files(obj, kind, source, default_mode)


def _downward_files(
    pod: Mapping[str, Any], source: Mapping[str, Any], default_mode: int
) -> dict[str, tuple[bytes, int]]:
    files: dict[str, tuple[bytes, int]] = {}
    containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    for item in source.get("items") or []:
        mode = int(item.get("mode") or default_mode)
        if (ref := item.get("fieldRef")) is not None:
            value = field_value(pod, str(ref.get("fieldPath") or ""))
        elif (ref := item.get("resourceFieldRef")) is not None:
            value = resource_value(containers.get(ref.get("containerName"), {}), ref, {})
        else:
            continue
        files[str(item.get("path") or "")] = (value.encode(), mode)
    return files


def _host_path(source: Mapping[str, Any]) -> str:
    path = str(source.get("path") or "")
    kind = str(source.get("type") or "")
    target = Path(path)
    if kind == "DirectoryOrCreate":
        target.mkdir(parents=True, exist_ok=True, mode=0o755)
    elif kind == "FileOrCreate":
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch(mode=0o644, exist_ok=True)
    elif kind == "Directory" and not target.is_dir():
        raise ConfigError(f"hostPath type check failed: {path} is not a directory")
    elif kind == "File" and not target.is_file():
        raise ConfigError(f"hostPath type check failed: {path} is not a file")
    elif kind in _HOST_PATH_CHECKS:
        try:
            mode = target.stat().st_mode
        except OSError as exc:
            raise ConfigError(f"hostPath type check failed: {path}: {exc.strerror}") from exc
        if not _HOST_PATH_CHECKS[kind](mode):
            raise ConfigError(f"hostPath type check failed: {path} is not a {kind}")
    return path


async def _claim_path(pod: Mapping[str, Any], claim: str, fetch: Fetch) -> str:
    """The host path of the volume bound to the claim (the kubelet waits for the binding, as this does)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    pvc = await fetch("PersistentVolumeClaim", namespace, claim)
    if pvc is None:
        raise ConfigError(f'persistentvolumeclaim "{claim}" not found')
    volume_name = str((pvc.get("spec") or {}).get("volumeName") or "")
    if not volume_name or (pvc.get("status") or {}).get("phase") != "Bound":
        raise ConfigError(f"PersistentVolumeClaim {namespace}/{claim} is not bound")
    pv = await fetch("PersistentVolume", "", volume_name)
    if pv is None:
        raise ConfigError(f'persistentvolume "{volume_name}" not found')
    spec = pv.get("spec") or {}
    source = spec.get("hostPath") or spec.get("local")
    if not source or not source.get("path"):
        kinds = ", ".join(sorted(k for k in spec if isinstance(spec[k], dict) and k not in ("capacity", "claimRef")))
        raise ConfigError(f"volume {volume_name}: {kinds} volumes are not supported by the pykubevirt node agent")
    if spec.get("volumeMode") == "Block":
        return _host_path({"path": source["path"], "type": "File"})
    return _host_path({"path": source["path"], "type": "DirectoryOrCreate"})


async def prepare_volumes(
    pod: Mapping[str, Any], pod_dir: PodDir, fetch: Fetch, tokens: ServiceAccountTokens | None = None
) -> PreparedVolumes:
    """Create or refresh every volume of the pod; a volume that fails is recorded, not raised."""
    prepared = PreparedVolumes()
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = str(volume.get("name") or "")
        try:
            prepared.host_paths[name] = await _prepare_one(pod, pod_dir, name, volume, fetch, tokens)
        except ConfigError as exc:
            prepared.errors[name] = str(exc)
        except OSError as exc:
            prepared.errors[name] = f"volume {name!r}: {exc}"
    return prepared


# The volumes whose content comes from API objects, which the kubelet rewrites when the objects change.
REFRESHED_KINDS = ("configMap", "secret", "downwardAPI", "projected")


async def refresh_volumes(
    pod: Mapping[str, Any], pod_dir: PodDir, fetch: Fetch, tokens: ServiceAccountTokens | None = None
) -> list[str]:
    """Rewrite the configMap, secret, downwardAPI and projected volumes of a running pod from their objects now, as
    the kubelet's periodic sync does; a volume that cannot be read now keeps its content. Returns those that failed."""
    failed = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if not any(volume.get(kind) is not None for kind in REFRESHED_KINDS):
            continue
        name = str(volume.get("name") or "")
        try:
            await _prepare_one(pod, pod_dir, name, volume, fetch, tokens)
        except (ConfigError, OSError, ApiError) as exc:
            failed.append(f"{name}: {exc}")
    return failed


async def _mount_hugetlbfs(target: Path, size: str) -> None:
    """A HugePages emptyDir is a hugetlbfs mount, as the kubelet makes it (page size from `HugePages-<size>`)."""
    if os.path.ismount(target):
        return
    options = ["-o", f"pagesize={size.removesuffix('i')}"] if size else []
    process = await asyncio.create_subprocess_exec(
        "mount", "-t", "hugetlbfs", *options, "nodev", str(target),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await process.communicate()
    if process.returncode != 0:
        raise ConfigError(f"cannot mount hugetlbfs on {target}: {err.decode(errors='replace').strip()}")


async def _prepare_one(
    pod: Mapping[str, Any],
    pod_dir: PodDir,
    name: str,
    volume: Mapping[str, Any],
    fetch: Fetch,
    tokens: ServiceAccountTokens | None = None,
) -> str:
    target = pod_dir.volume_dir(name)
    if (empty := volume.get("emptyDir")) is not None:
        target.mkdir(parents=True, exist_ok=True)
        medium = str(empty.get("medium") or "")
        if medium == "HugePages" or medium.startswith("HugePages-"):
            await _mount_hugetlbfs(target, medium.removeprefix("HugePages").removeprefix("-"))
        return str(target)
    if (host := volume.get("hostPath")) is not None:
        return _host_path(host)
    if (claim := volume.get("persistentVolumeClaim")) is not None:
        return await _claim_path(pod, str(claim.get("claimName") or ""), fetch)
    files: dict[str, tuple[bytes, int]]
    if (source := volume.get("configMap")) is not None:
        files = await _source_files(
            pod, "ConfigMap", source, fetch, int(source.get("defaultMode") or DEFAULT_FILE_MODE)
        )
    elif (source := volume.get("secret")) is not None:
        files = await _source_files(pod, "Secret", source, fetch, int(source.get("defaultMode") or DEFAULT_FILE_MODE))
    elif (source := volume.get("downwardAPI")) is not None:
        files = _downward_files(pod, source, int(source.get("defaultMode") or DEFAULT_FILE_MODE))
    elif (source := volume.get("projected")) is not None:
        files = {}
        mode = int(source.get("defaultMode") or DEFAULT_FILE_MODE)
        for part in source.get("sources") or []:
            if part.get("configMap") is not None:
                files.update(await _source_files(pod, "ConfigMap", part["configMap"], fetch, mode))
            elif part.get("secret") is not None:
                secret = dict(part["secret"], secretName=part["secret"].get("name"))
                files.update(await _source_files(pod, "Secret", secret, fetch, mode))
            elif part.get("downwardAPI") is not None:
                files.update(_downward_files(pod, part["downwardAPI"], mode))
            elif (token_source := part.get("serviceAccountToken")) is not None:
                if tokens is None:
                    raise ConfigError(f"volume {name!r}: no service account tokens on this node")
                try:
                    token = await tokens.token(pod, token_source)
                except TokenError as exc:
                    raise ConfigError(f"volume {name!r}: cannot get a service account token: {exc}") from exc
                files[str(_relative(str(token_source.get("path") or "token")))] = (token.encode(), mode)
            else:
                kinds = ", ".join(sorted(part))
                raise ConfigError(f"volume {name!r}: projected {kinds} sources are not supported by the node agent")
    else:
        kinds = ", ".join(sorted(k for k in volume if k != "name")) or "empty"
        raise ConfigError(
            f"volume {name!r}: {kinds} volumes are not supported by the pykubevirt node agent "
            "(only emptyDir, hostPath, configMap, secret, downwardAPI and projected)"
        )
    _write_files(target, files)
    return str(target)


def container_mounts(container: Mapping[str, Any], prepared: PreparedVolumes) -> dict[str, str]:
    """The container's mountPath → host path map; raises ConfigError naming a mount it cannot have."""
    mounts: dict[str, str] = {}
    for mount in container.get("volumeMounts") or []:
        name = str(mount.get("name") or "")
        if name in prepared.errors:
            raise ConfigError(prepared.errors[name])
        if name not in prepared.host_paths:
            raise ConfigError(f'volumeMount "{name}" of container "{container.get("name")}" names no volume of the pod')
        host = prepared.host_paths[name]
        sub_path = str(mount.get("subPath") or "")
        if sub_path:
            host = str(Path(host) / _relative(sub_path))
            if not Path(host).exists():
                # The kubelet creates a missing subPath as a directory.
                Path(host).mkdir(parents=True, exist_ok=True)
        mounts[str(mount.get("mountPath") or "")] = host
    for device in container.get("volumeDevices") or []:
        name = str(device.get("name") or "")
        if name in prepared.errors:
            raise ConfigError(prepared.errors[name])
        if name not in prepared.host_paths:
            raise ConfigError(
                f'volumeDevice "{name}" of container "{container.get("name")}" names no volume of the pod'
            )
        mounts[str(device.get("devicePath") or "")] = prepared.host_paths[name]
    return mounts
