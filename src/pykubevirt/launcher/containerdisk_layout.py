"""containerDisk images (KubeVirt's pkg/container-disk rules): the one file under `/disk` of an OCI image, found
by replaying the layers of an OCI layout (whiteouts applied, links followed). Shared by the node's image store and
the CDI importer's registry source.
"""

from __future__ import annotations

import json
import posixpath
import re
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

DISK_DIR = "disk"
NO_DISK_MESSAGE = "no file found in folder /disk, no disk present"
MANY_DISKS_MESSAGE = "more than one file found in folder /disk, only one disk is allowed"
_LAYER_TYPES = (
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
)
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


class DiskImageError(Exception):
    """The OCI image is malformed or does not hold exactly one disk under /disk."""


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = str(digest).partition(":")
    if not algorithm or not re.fullmatch(r"[a-f0-9]+", hexdigest or ""):
        raise DiskImageError(f"invalid digest {digest!r} in the image")
    return layout / "blobs" / algorithm / hexdigest


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DiskImageError(f"cannot read {path.name}: {exc}") from exc
    if not isinstance(data, dict):
        raise DiskImageError(f"{path.name} is not a JSON object")
    return data


def read_oci_layers(layout: Path, tag: str | None = None) -> list[Path]:
    """The layer tarballs, bottom first, of the image tagged `tag` (or the only image) in an OCI layout."""
    index = _read_json(layout / "index.json")
    manifests = [m for m in index.get("manifests") or [] if isinstance(m, dict)]
    chosen = [m for m in manifests if (m.get("annotations") or {}).get("org.opencontainers.image.ref.name") == tag]
    if not (chosen or manifests):
        raise DiskImageError("the image layout has no manifest")
    descriptor = (chosen or manifests)[0]
    manifest = _read_json(_blob_path(layout, descriptor.get("digest", "")))
    if manifest.get("manifests"):
        # A nested index (multi-platform image): take its first manifest, skopeo already chose the platform.
        manifest = _read_json(_blob_path(layout, manifest["manifests"][0].get("digest", "")))
    layers = []
    for layer in manifest.get("layers") or []:
        media_type = str(layer.get("mediaType", ""))
        if media_type not in _LAYER_TYPES:
            raise DiskImageError(f"unsupported layer media type {media_type}")
        layers.append(_blob_path(layout, layer.get("digest", "")))
    return layers


def _clean(name: str) -> str:
    return posixpath.normpath("/" + name).lstrip("/")


DiskStager = Callable[[str, Path, str, IO[bytes]], None]


def in_disk_dir(path: str) -> bool:
    return posixpath.dirname(path) == DISK_DIR


def replay_layers(
    layers: list[Path], stage: DiskStager | None = None, staged: Callable[[str], bool] = in_disk_dir
) -> dict[str, tuple[Path, tarfile.TarInfo]]:
    """The image's file tree after its layers (whiteouts applied): path → (layer, member). `stage` gets each regular
    file `staged` selects (by default those directly under /disk) while its layer streams by, so a disk is read once
    even from a gzip layer."""
    entries: dict[str, tuple[Path, tarfile.TarInfo]] = {}
    for layer in layers:
        try:
            with tarfile.open(layer, mode="r|*") as archive:
                for member in archive:
                    path = _clean(member.name)
                    parent, base = posixpath.split(path)
                    if base == _OPAQUE:
                        prefix = parent + "/" if parent else ""
                        for old in [p for p in entries if p.startswith(prefix)]:
                            del entries[old]
                        continue
                    if base.startswith(_WHITEOUT):
                        gone = posixpath.join(parent, base[len(_WHITEOUT) :])
                        for old in [p for p in entries if p == gone or p.startswith(gone + "/")]:
                            del entries[old]
                        continue
                    entries[path] = (layer, member)
                    if stage is not None and member.isfile() and staged(path):
                        data = archive.extractfile(member)
                        if data is not None:
                            stage(path, layer, member.name, data)
        except (OSError, tarfile.TarError) as exc:
            raise DiskImageError(f"cannot read layer {layer.name}: {exc}") from exc
    return entries


def disk_entry(entries: dict[str, tuple[Path, tarfile.TarInfo]]) -> tuple[str, Path, str]:
    """(path in the image, layer, member) of the regular file behind the one entry in /disk (links followed)."""
    in_disk = [p for p in entries if in_disk_dir(p)]
    if not in_disk:
        raise DiskImageError(NO_DISK_MESSAGE)
    if len(in_disk) > 1:
        raise DiskImageError(MANY_DISKS_MESSAGE)
    resolved = resolve_entry(entries, in_disk[0])
    if resolved is None:
        raise DiskImageError(NO_DISK_MESSAGE)
    return resolved


def resolve_entry(entries: dict[str, tuple[Path, tarfile.TarInfo]], path: str) -> tuple[str, Path, str] | None:
    """(path, layer, member) of the regular file behind `path` in the image (links followed), or None."""
    path = _clean(path)
    for _ in range(16):
        if path not in entries:
            return None
        layer, member = entries[path]
        if member.isfile():
            return path, layer, member.name
        if member.islnk():
            path = _clean(member.linkname)
        elif member.issym():
            path = _clean(posixpath.join(posixpath.dirname(path), member.linkname))
        else:
            return None
    return None
