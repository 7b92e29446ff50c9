"""Images kept as their files rather than one disk: what a kernel-boot container's root filesystem holds.

The store keeps each regular file of such an image as a content-addressed blob and records path → blob; a tree
directory of links (`trees/<digest>/boot/vmlinuz` → its blob) is the root filesystem the node runtime exposes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

from pykubevirt.launcher.containerdisk_layout import read_oci_layers, replay_layers, resolve_entry

# Stores one stream as a blob: (digest, blob path, size).
BlobWriter = Callable[[IO[bytes], str], tuple[str, Path, int]]


def clean_image_path(path: str) -> str:
    """An image path as the index keys it: relative, normalized (`/boot/../boot/vmlinuz` → `boot/vmlinuz`)."""
    cleaned = posixpath.normpath("/" + str(path)).lstrip("/")
    if not cleaned or cleaned == ".":
        raise ValueError(f"{path!r} names no file in the image")
    return cleaned


def tree_digest(files: Mapping[str, str]) -> str:
    """The digest of an image tree: over its sorted paths and the blobs (content digests) they hold."""
    canonical = json.dumps(sorted(files.items()), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def extract_tree(layout: Path, tag: str, blobs: Path, write_blob: BlobWriter) -> tuple[dict[str, str], int]:
    """Every regular file of the OCI image at `layout` as blobs (links resolved): (path → blob name, total size)."""
    # path → (layer, member, temporary file, hex digest, size), hashed while its layer streams by.
    staged: dict[str, tuple[Path, str, Path]] = {}

    def stage(path: str, layer: Path, member: str, data: IO[bytes]) -> None:
        fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".incoming.")
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(data, out, 1 << 20)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        previous = staged.get(path)
        if previous is not None:
            previous[2].unlink(missing_ok=True)
        staged[path] = (layer, member, Path(tmp))

    try:
        entries = replay_layers(read_oci_layers(layout, tag), stage, staged=lambda _path: True)
        files: dict[str, str] = {}
        total = 0
        stored: dict[str, tuple[str, int]] = {}  # image path of a staged file → (blob name, size)
        for path in sorted(entries):
            resolved = resolve_entry(entries, path)
            if resolved is None:
                continue  # directories, devices, dangling links
            target, layer, member = resolved
            hit = staged.get(target)
            if hit is None or (hit[0], hit[1]) != (layer, member):
                continue
            if target not in stored:
                with hit[2].open("rb") as data:
                    _, blob, size = write_blob(data, posixpath.basename(target))
                stored[target] = (blob.name, size)
            files[path] = stored[target][0]
            total += stored[target][1]
        return files, total
    finally:
        for _, _, tmp in staged.values():
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()


def materialize(trees: Path, blobs: Path, files: Mapping[str, str]) -> Path:
    """The tree directory of links for `files` under `trees`, made once (atomically) per distinct tree."""
    root = trees / tree_digest(files).removeprefix("sha256:")
    if root.is_dir():
        return root
    trees.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=trees, prefix=".tree-"))
    try:
        for path, blob in files.items():
            link = tmp / clean_image_path(path)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(blobs / blob)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, root)
        except OSError:
            if not root.is_dir():
                raise
            shutil.rmtree(tmp)  # another process made the same tree meanwhile
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root
