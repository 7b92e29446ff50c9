"""Preparing a VMI's disks before the domain starts: containerDisk overlays, emptyDisks and cloud-init ISOs."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pykubevirt.api.quantity import MI, Quantity
from pykubevirt.launcher import cloudinit
from pykubevirt.launcher.image_format import probed_format

QEMU_IMG = "qemu-img"


class DiskError(Exception):
    """A disk could not be prepared; the message is shown on the VMI."""


async def _run(*command: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        raise DiskError(f"{command[0]} {command[1]} failed: {err.decode(errors='replace').strip()}")
    return out.decode()


async def image_format(path: Path) -> str:
    probed = probed_format(path)
    if probed is not None:
        return probed
    info = json.loads(await _run(QEMU_IMG, "info", "--output=json", "--force-share", str(path)))
    return str(info.get("format", "raw"))


def container_disk_source(container_disk_dir: Path, index: int) -> Path:
    """Where the runtime put volume `index`'s image file (the containerDisk container's --copy-path + .img)."""
    return container_disk_dir / f"disk_{index}.img"


async def prepare_container_disk(source: Path, overlay: Path, shown_as: str = "") -> tuple[str, str]:
    """A qcow2 overlay over the image, so writes vanish with the VMI; returns (backing file, its format)."""
    if not source.exists():
        raise DiskError(f"no supported file disk found for volume found in: {shown_as or source}")
    backing = source.resolve()
    fmt = await image_format(backing)
    overlay.parent.mkdir(parents=True, exist_ok=True)
    if not overlay.exists():
        await _run(QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", fmt, "-b", str(backing), str(overlay))
    return str(backing), fmt


async def prepare_empty_disk(path: Path, capacity: str) -> None:
    """A qcow2 of the capacity rounded up to whole MiB, as KubeVirt creates it."""
    if path.exists():
        return
    size = Quantity.parse(capacity).ceil_int()
    aligned = -(-size // MI) * MI
    path.parent.mkdir(parents=True, exist_ok=True)
    await _run(QEMU_IMG, "create", "-q", "-f", "qcow2", str(path), str(aligned))


async def prepare_cloud_init(
    vmi: dict[str, Any], source_type: str, target: Path, secrets: Mapping[str, Mapping[str, bytes]] | None = None
) -> None:
    try:
        data = cloudinit.cloud_init_data(vmi, source_type, secrets)
    except ValueError as exc:
        raise DiskError(str(exc)) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(cloudinit.build_iso, data, target)


def direct_io_supported(directory: Path) -> bool:
    """Whether files in `directory` can be opened with O_DIRECT (cache=none needs it; tmpfs cannot)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / ".o_direct_probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | getattr(os, "O_DIRECT", 0), 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink(missing_ok=True)
    return True
