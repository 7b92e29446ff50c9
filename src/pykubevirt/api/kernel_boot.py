"""Direct kernel boot (`spec.domain.firmware.kernelBoot`): KubeVirt's names and paths shared by the controller, the
node agent and the launcher (pkg/container-disk: KernelBootName, KernelBootVolumeName).

The launcher pod serves the kernel image through a containerDisk-like container `volumekernel-boot-volume` (and its
`-init` pre-pull); the launcher finds the kernel and initrd at `<container-disks>/kernel-boot/<basename>`.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.json_lookup import get

KERNEL_BOOT_NAME = "kernel-boot"
KERNEL_BOOT_VOLUME_NAME = KERNEL_BOOT_NAME + "-volume"
KERNEL_BOOT_CONTAINER = "volume" + KERNEL_BOOT_VOLUME_NAME
KERNEL_BOOT_INIT_CONTAINER = KERNEL_BOOT_CONTAINER + "-init"
# Where the node runtime exposes the kernel image's files (the container's root filesystem), next to the
# `kernel-boot` directory the launcher fills; upstream's virt-handler finds the root through the container's socket.
KERNEL_BOOT_ROOT_SUFFIX = ".root"


def kernel_boot_container(vmi: Mapping[str, Any]) -> dict[str, Any] | None:
    """`firmware.kernelBoot.container` when it names an image (KubeVirt's HasKernelBootContainerImage)."""
    container = get(vmi, "spec", "domain", "firmware", "kernelBoot", "container")
    if isinstance(container, dict) and container.get("image"):
        return container
    return None


def kernel_boot_volume(vmi: Mapping[str, Any]) -> dict[str, Any] | None:
    """The containerDisk volume upstream renders the kernel-boot container from (path `/`, the image's root)."""
    container = kernel_boot_container(vmi)
    if container is None:
        return None
    source = {"image": container["image"], "path": "/"}
    for key in ("imagePullSecret", "imagePullPolicy"):
        if container.get(key):
            source[key] = container[key]
    return {"name": KERNEL_BOOT_VOLUME_NAME, "containerDisk": source}


def artifact_path(container_disk_dir: str, artifact: str) -> str:
    """Where the launcher finds a kernel or initrd: `<container-disks>/kernel-boot/<basename>`."""
    return posixpath.join(container_disk_dir, KERNEL_BOOT_NAME, posixpath.basename(artifact))


def artifacts(vmi: Mapping[str, Any]) -> list[str]:
    """The image paths of the kernel and initrd the VMI boots (either may be absent)."""
    container = kernel_boot_container(vmi) or {}
    return [str(container[key]) for key in ("kernelPath", "initrdPath") if container.get(key)]
