"""QEMU capabilities shared between launchers on one host.

Each launcher's embedded libvirt probes QEMU's capabilities on first use, which takes seconds (3.6 s here) and would
be most of a VM's start time. libvirt keeps the result in `<root>/cache/qemu/capabilities/` and checks each cached file
against the QEMU binary, libvirt and kernel versions itself, so seeding a new root with the files an earlier launcher
wrote is safe: a stale file is simply probed again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

SHARED_DIR = Path("/var/tmp/pykubevirt/qemu-capabilities")
# A libvirtd does not accept the files an embedded driver wrote (they record the binary that probed), so the private
# daemons of migration targets share theirs separately.
DAEMON_SHARED_DIR = Path("/var/tmp/pykubevirt/qemu-capabilities-libvirtd")


def _cache_dir(root: Path) -> Path:
    return root / "cache" / "qemu" / "capabilities"


def seed(root: Path, shared: Path = SHARED_DIR) -> int:
    """Copy the shared capability files into a new embed root; returns how many were copied."""
    return seed_dir(_cache_dir(root), shared)


def seed_dir(target: Path, shared: Path = SHARED_DIR) -> int:
    """Copy the shared capability files into a libvirt capabilities cache directory (an embed root's or a daemon's)."""
    if not shared.is_dir():
        return 0
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    for source in shared.glob("*.xml"):
        destination = target / source.name
        if not destination.exists():
            with contextlib.suppress(OSError):
                shutil.copy2(source, destination)
                copied += 1
    return copied


def publish(root: Path, shared: Path = SHARED_DIR) -> int:
    """Offer this root's capability files to later launchers (atomically, so readers never see half a file)."""
    return publish_dir(_cache_dir(root), shared)


def publish_dir(cache: Path, shared: Path = SHARED_DIR) -> int:
    """Offer the capability files of a libvirt cache directory to later launchers."""
    published = 0
    for source in cache.glob("*.xml"):
        destination = shared / source.name
        with contextlib.suppress(OSError):
            if destination.exists() and destination.read_bytes() == source.read_bytes():
                continue
            shared.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=shared, suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                out.write(source.read_bytes())
            os.replace(temporary, destination)
            published += 1
    return published
