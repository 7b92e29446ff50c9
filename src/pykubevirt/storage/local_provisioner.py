"""The embedded provisioner `pykubevirt.io/local-path`, after rancher's local-path-provisioner.

Every node of the embedded cluster is a directory tree on this host, so the provisioner creates volumes itself
(rancher's runs a helper pod on the node): one directory per PV under `<storage dir>/<node>/`, named
`<pv>_<namespace>_<claim>` as rancher names them, with node affinity to that node. Block volumes are sparse files.
The `shared` class keeps its volumes under `<storage dir>/shared/` with no node affinity: every node mounts them.
Snapshots (the CSI snapshotter's part) are sparse copies of a volume's directory under `<storage dir>/snapshots/`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import volume_binding as vb
from pykubevirt.api.objects import metadata

log = logging.getLogger("pykubevirt.storage.provisioner")

PROVISIONER_NAME = "pykubevirt.io/local-path"
LOCAL_CLASS = "local"
SHARED_CLASS = "shared"
SNAPSHOT_CLASS = "local-snapshots"
# The class parameter that puts volumes in the shared directory instead of on the chosen node.
SHARED_PARAMETER = "shared"
SHARED_DIR = "shared"
SNAPSHOTS_DIR = "snapshots"
BLOCK_FILE = "block.img"
DISK_FILE = "disk.img"


def name_of(obj: dict[str, Any]) -> str:
    return str(metadata(obj).get("name", ""))


class ProvisioningError(Exception):
    """The volume cannot be created; the message goes into a ProvisioningFailed event."""


def default_classes() -> list[dict[str, Any]]:
    """The StorageClasses an embedded cluster starts with: `local` (the default) and `shared` (RWX, Immediate)."""
    local = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": LOCAL_CLASS, "annotations": {vb.DEFAULT_CLASS_ANNOTATIONS[0]: "true"}},
        "provisioner": PROVISIONER_NAME,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": vb.WAIT_FOR_FIRST_CONSUMER,
        "allowVolumeExpansion": True,
    }
    shared = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": SHARED_CLASS},
        "provisioner": PROVISIONER_NAME,
        "parameters": {SHARED_PARAMETER: "true"},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": True,
    }
    return [local, shared]


def default_snapshot_classes() -> list[dict[str, Any]]:
    """The VolumeSnapshotClass an embedded cluster starts with: `local-snapshots`, the default for our driver."""
    return [
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {
                "name": SNAPSHOT_CLASS,
                "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"},
            },
            "driver": PROVISIONER_NAME,
            "deletionPolicy": "Delete",
        }
    ]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new volume goes: its directory and the node it is tied to ("" for shared volumes)."""

    path: Path
    node: str


class LocalPathProvisioner:
    """Creates, grows and deletes the volumes of classes whose provisioner is `pykubevirt.io/local-path`."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir

    def placement(self, pvc: dict[str, Any], sc: dict[str, Any], pv_name: str, node: str) -> Placement:
        meta = pvc.get("metadata") or {}
        leaf = f"{pv_name}_{meta.get('namespace', '')}_{meta.get('name', '')}"
        if (sc.get("parameters") or {}).get(SHARED_PARAMETER) == "true":
            return Placement(self.base_dir / SHARED_DIR / leaf, "")
        if not node:
            raise ProvisioningError("configuration error, no node was specified")
        return Placement(self.base_dir / node / leaf, node)

    def free_bytes(self) -> int:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(self.base_dir).free

    async def provision(
        self, pvc: dict[str, Any], sc: dict[str, Any], node: str, source: Path | None = None
    ) -> dict[str, Any]:
        """Create the volume's directory (or sparse file), filled from snapshot data `source` if given, and return
        the PersistentVolume for it."""
        meta = pvc.get("metadata") or {}
        pv_name = f"pvc-{meta.get('uid', '')}"
        place = self.placement(pvc, sc, pv_name, node)
        size = vb.requested_bytes(pvc)
        free = await asyncio.to_thread(self.free_bytes)
        if size > free:
            raise ProvisioningError(
                f"not enough free space under {self.base_dir}: the claim requests {size} bytes, {free} bytes are free"
            )
        block = vb.volume_mode(pvc) == "Block"
        if source is not None:
            await _restore(source, place.path, block)
        await asyncio.to_thread(_create, place.path, size if block else None)
        spec: dict[str, Any] = {
            "accessModes": list((pvc.get("spec") or {}).get("accessModes") or []),
            "capacity": {"storage": str(((pvc["spec"].get("resources") or {}).get("requests") or {})["storage"])},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "hostPath": {
                "path": str(place.path / BLOCK_FILE if block else place.path),
                "type": "File" if block else "DirectoryOrCreate",
            },
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy") or "Delete",
            "storageClassName": name_of(sc),
            "volumeMode": vb.volume_mode(pvc),
        }
        if place.node:
            spec["nodeAffinity"] = vb.hostname_affinity(place.node)
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {vb.PROVISIONED_BY: PROVISIONER_NAME}},
            "spec": spec,
        }

    def volume_dir(self, pv: dict[str, Any]) -> Path | None:
        """The directory a volume of ours lives in; None for a volume outside the storage dir."""
        path = Path(str(((pv.get("spec") or {}).get("hostPath") or {}).get("path") or ""))
        if path.name == BLOCK_FILE:
            path = path.parent
        try:
            path.resolve().relative_to(self.base_dir.resolve())
        except ValueError:
            return None
        return path if path != self.base_dir else None

    async def delete(self, pv: dict[str, Any]) -> None:
        """Remove the volume's directory and everything in it."""
        directory = self.volume_dir(pv)
        if directory is None:
            raise ProvisioningError(f"volume {name_of(pv)} is not under {self.base_dir}")
        await asyncio.to_thread(shutil.rmtree, directory, True)
        log.info("deleted volume %s (%s)", name_of(pv), directory)

    async def expand(self, pv: dict[str, Any], size: int) -> None:
        """Grow a volume: a directory has no size of its own; a block volume's sparse file grows."""
        grow = size - vb.capacity_bytes(pv)
        free = await asyncio.to_thread(self.free_bytes)
        if grow > free:
            raise ProvisioningError(f"not enough free space under {self.base_dir} to grow by {grow} bytes: {free} free")
        directory = self.volume_dir(pv)
        if directory is not None and vb.volume_mode(pv) == "Block":
            await asyncio.to_thread(os.truncate, directory / BLOCK_FILE, size)

    def snapshot_dir(self, handle: str) -> Path:
        """Where a snapshot's data lives; its handle is one path component (the content's name)."""
        if not handle or "/" in handle or handle in (".", ".."):
            raise ProvisioningError(f"invalid snapshot handle {handle!r}")
        return self.base_dir / SNAPSHOTS_DIR / handle

    async def create_snapshot(self, pv: dict[str, Any], handle: str) -> None:
        """Copy the volume's files into the snapshot's directory (sparse; a copy that breaks off leaves nothing)."""
        directory = self.volume_dir(pv)
        if directory is None:
            raise ProvisioningError(f"volume {name_of(pv)} is not under {self.base_dir}")
        target = self.snapshot_dir(handle)
        if target.is_dir():
            return
        partial = target.with_name(f".{handle}.partial")
        await asyncio.to_thread(shutil.rmtree, partial, True)
        partial.mkdir(parents=True)
        await _copy_tree(directory, partial)
        await asyncio.to_thread(partial.rename, target)
        log.info("created snapshot %s of volume %s", handle, name_of(pv))

    def snapshot_size(self, handle: str) -> int:
        """A pre-provisioned snapshot's size: its largest image's length (an image is a whole volume)."""
        directory = self.snapshot_dir(handle)
        if not directory.is_dir():
            raise ProvisioningError(f"snapshot data {directory} is missing")
        return max((p.stat().st_size for p in directory.iterdir() if p.is_file()), default=0)

    async def delete_snapshot(self, handle: str) -> None:
        """Remove a snapshot's data (nothing to do when it is gone already)."""
        await asyncio.to_thread(shutil.rmtree, self.snapshot_dir(handle), True)
        log.info("deleted snapshot %s", handle)


async def _copy_tree(source: Path, target: Path) -> None:
    """`cp --sparse=always --reflink=auto` in a subprocess: disk images are GiBs and mostly holes."""
    process = await asyncio.create_subprocess_exec(
        "cp",
        "-a",
        "--sparse=always",
        "--reflink=auto",
        f"{source}/.",
        f"{target}/",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await process.communicate()
    if process.returncode != 0:
        raise ProvisioningError(stderr.decode(errors="replace").strip() or f"cp exited with {process.returncode}")


async def _restore(source: Path, target: Path, block: bool) -> None:
    """Fill a new volume from snapshot data; a snapshot of the other volume mode keeps its image under our name."""
    if not source.is_dir():
        raise ProvisioningError(f"snapshot data {source} is missing")
    target.mkdir(parents=True, exist_ok=True)
    await _copy_tree(source, target)
    wanted, other = (BLOCK_FILE, DISK_FILE) if block else (DISK_FILE, BLOCK_FILE)
    if not (target / wanted).exists() and (target / other).exists():
        await asyncio.to_thread((target / other).rename, target / wanted)


def _create(path: Path, block_size: int | None) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o777)
    # Pods of any user write here, as rancher's helper makes the directory 0777.
    os.chmod(path, 0o777)
    if block_size is not None:
        block = path / BLOCK_FILE
        with open(block, "ab") as handle:
            handle.truncate(max(block_size, block.stat().st_size))
