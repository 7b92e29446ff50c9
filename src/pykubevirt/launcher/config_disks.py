"""ConfigMap, Secret, DownwardAPI, ServiceAccount and Sysprep volumes as ISO disks, as KubeVirt's `pkg/config` makes
them in the launcher: the files the pod mounts for the volume (every key, nested paths kept) on an ISO labelled with
the volume's `volumeLabel` (else `cfgdata`; `unattendCD` for sysprep), where the converter's disk points.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.launcher.converter.disks import (
    CONFIG_DISK_DIRS,
    SERVICE_ACCOUNT_DISK,
    SYSPREP_DISK_DIR,
)
from pykubevirt.launcher.iso_image import write_iso

DEFAULT_LABEL = "cfgdata"
SYSPREP_LABEL = "unattendCD"
UNATTEND_FILES = ("autounattend.xml", "unattend.xml")


class ConfigDiskError(Exception):
    """A config volume's ISO could not be made; the message says why."""


@dataclass(frozen=True, slots=True)
class ConfigDisk:
    """One ISO to make: from the files under `source` (a pod path), at `iso` under the private dir."""

    volume: str
    source: str
    iso: str
    label: str
    sysprep: bool = False


def config_disks(vmi: Mapping[str, Any]) -> list[ConfigDisk]:
    """The VMI's config volumes that a disk uses (sysprep volumes always), in volume order."""
    spec = vmi.get("spec") or {}
    disk_names = {d.get("name") for d in ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []}
    found: list[ConfigDisk] = []
    for volume in spec.get("volumes") or []:
        name = str(volume.get("name"))
        sysprep = volume.get("sysprep")
        if isinstance(sysprep, Mapping) and (sysprep.get("configMap") or sysprep.get("secret")):
            source = posixpath.join(pod_layout.CONFIG_SOURCE_DIRS["sysprep"], name)
            iso = posixpath.join(SYSPREP_DISK_DIR, f"{name}.iso")
            found.append(ConfigDisk(name, source, iso, SYSPREP_LABEL, sysprep=True))
            continue
        if name not in disk_names:
            continue
        if isinstance(volume.get("serviceAccount"), Mapping):
            found.append(ConfigDisk(name, pod_layout.SERVICE_ACCOUNT_DIR, SERVICE_ACCOUNT_DISK, DEFAULT_LABEL))
            continue
        for kind, iso_dir in CONFIG_DISK_DIRS.items():
            source_spec = volume.get(kind)
            if isinstance(source_spec, Mapping):
                source = posixpath.join(pod_layout.CONFIG_SOURCE_DIRS[kind], name)
                label = str(source_spec.get("volumeLabel") or DEFAULT_LABEL)
                found.append(ConfigDisk(name, source, posixpath.join(iso_dir, f"{name}.iso"), label))
    return found


def _files(root: Path) -> Iterator[tuple[str, bytes]]:
    """Every file under `root`, links followed, by relative path; the kubelet's `..data` bookkeeping left out."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith("..") for part in relative.parts) or not path.is_file():
            continue
        yield relative.as_posix(), path.read_bytes()


def _build(disk: ConfigDisk, source: Path, target: Path) -> None:
    if not source.is_dir():
        raise ConfigDiskError(f"volume {disk.volume}: nothing is mounted at {disk.source}")
    files = list(_files(source))
    if disk.sysprep and not any(name.lower() in UNATTEND_FILES for name, _ in files if "/" not in name):
        raise ConfigDiskError("Sysprep drive should contain autounattend.xml or unattend.xml but neither were found.")
    write_iso(files, disk.label, target)


async def prepare_config_disks(vmi: Mapping[str, Any], host: Callable[[str], Path], private_dir: Path) -> None:
    """Make every config disk's ISO from what the pod mounts (`host` maps a pod path to this host's)."""
    for disk in config_disks(vmi):
        try:
            await asyncio.to_thread(_build, disk, host(disk.source), private_dir / disk.iso)
        except OSError as exc:
            raise ConfigDiskError(f"volume {disk.volume}: {exc}") from exc
