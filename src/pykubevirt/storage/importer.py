"""`pykubevirt cdi-importer`: the importer pod's process, after CDI's `cmd/cdi-importer` for `blank` and clones.

It finds its volumes through PYKUBEVIRT_MOUNTS: the target claim at /data (`disk.img`) or /dev/cdi-block-volume,
a clone's source claim at /source. Blank filesystem volumes get a sparse raw `disk.img` of the usable space
(the claim's size less CDI's filesystem overhead); clones are copied with `qemu-img convert` and then grown to
the usable space, never shrunk. Failures exit 1 with `Unable to process data: …`, and the pod restarts (OnFailure).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.api.volume_binding import to_bytes
from pykubevirt.storage.datavolume_claim import DATA_DIR, SOURCE_DIR, usable_space

DISK_IMG = "disk.img"
BLOCK_DEVICE = "/dev/cdi-block-volume"


class ImporterError(Exception):
    """The data cannot be processed; the message ends the pod's log."""


def _qemu_img(*args: str) -> str:
    result = subprocess.run(["qemu-img", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImporterError(f"qemu-img {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def _virtual_size(path: Path) -> int:
    return int(json.loads(_qemu_img("info", "--output=json", str(path)))["virtual-size"])


def _target(mounts: dict[str, str]) -> tuple[Path, bool]:
    if BLOCK_DEVICE in mounts:
        return Path(mounts[BLOCK_DEVICE]), True
    if DATA_DIR not in mounts:
        raise ImporterError(f"no volume mounted at {DATA_DIR} or {BLOCK_DEVICE}")
    return Path(mounts[DATA_DIR]) / DISK_IMG, False


def import_volume(environ: dict[str, str]) -> str:
    """Fill the target volume as IMPORTER_SOURCE says; returns the completion message."""
    mounts = pod_layout.mounts_from_env(environ)
    target, block = _target(mounts)
    size = to_bytes(environ.get("IMPORTER_IMAGE_SIZE"))
    overhead = float(environ.get("FILESYSTEM_OVERHEAD") or "0")
    if block:
        usable = os.path.getsize(target) or size
    else:
        stats = os.statvfs(target.parent)
        available = min(size, stats.f_bavail * stats.f_frsize) if size else stats.f_bavail * stats.f_frsize
        usable = usable_space(available, overhead)
    source = environ.get("IMPORTER_SOURCE", "none")
    if source == "none":
        if not block:
            _qemu_img("create", "-f", "raw", str(target), str(usable))
        return "Import Complete"
    if source != "pvc":
        raise ImporterError(f"unknown source {source}")
    if SOURCE_DIR not in mounts:
        raise ImporterError(f"no source volume mounted at {SOURCE_DIR}")
    origin = Path(mounts[SOURCE_DIR])
    origin = origin / DISK_IMG if origin.is_dir() else origin
    needed = _virtual_size(origin)
    if needed > usable:
        raise ImporterError(
            f"virtual image size {needed} is larger than the reported available storage {usable}. "
            "A larger PVC is required"
        )
    partial = target.with_name(f".{target.name}.partial") if not block else target
    _qemu_img("convert", "-p", "-O", "raw", str(origin), str(partial))
    if not block:
        if usable > _virtual_size(partial):
            _qemu_img("resize", "-f", "raw", str(partial), str(usable))
        os.chmod(partial, 0o660)
        # Only a complete copy becomes disk.img, so a failed clone never leaves a good-looking image behind.
        os.replace(partial, target)
    return "Clone Complete"


def run() -> int:
    try:
        message = import_volume(dict(os.environ))
    except (ImporterError, OSError, ValueError) as exc:
        print(f"Unable to process data: {exc}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"scratchSpaceRequired": False, "preallocationApplied": False, "message": message}), flush=True)
    return 0
