"""Direct kernel boot in the launcher: the kernel and initrd of `firmware.kernelBoot.container` where the domain
expects them, `<container-disks>/kernel-boot/<basename>` (upstream's virt-handler bind-mounts them there from the
kernel-boot container's root filesystem, which the node runtime exposes here as `kernel-boot.root`)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pykubevirt.api.kernel_boot import KERNEL_BOOT_NAME, KERNEL_BOOT_ROOT_SUFFIX, artifacts


class KernelBootError(Exception):
    """The kernel-boot image is not there yet, or lacks a file the VMI names."""


def link_kernel_artifacts(vmi: Mapping[str, Any], container_disk_dir: Path) -> list[Path]:
    """Link each artifact into `<container_disk_dir>/kernel-boot/`; returns the links (none without kernel boot)."""
    wanted = artifacts(vmi)
    if not wanted:
        return []
    root = container_disk_dir / (KERNEL_BOOT_NAME + KERNEL_BOOT_ROOT_SUFFIX)
    if not root.is_dir():
        raise KernelBootError("kernelboot container not yet ready")
    target_dir = container_disk_dir / KERNEL_BOOT_NAME
    target_dir.mkdir(mode=0o755, exist_ok=True)
    links = []
    for artifact in wanted:
        source = root / posixpath.normpath("/" + artifact).lstrip("/")
        if not source.is_file():
            # KubeVirt's containerdisk.GetImage, naming the path inside the image rather than on the node.
            raise KernelBootError(f"No image on path {artifact}")
        link = target_dir / posixpath.basename(artifact)
        tmp = link.with_name(link.name + ".tmp")
        tmp.unlink(missing_ok=True)
        # The resolved file: QEMU opens it directly, and the link survives the tree being replaced by a new pull.
        tmp.symlink_to(source.resolve())
        os.replace(tmp, link)
        links.append(link)
    return links
