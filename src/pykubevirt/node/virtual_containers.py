"""Containers that run no process: KubeVirt's containerDisk containers, served from the node's image store.

`/usr/bin/container-disk --copy-path <dir>/disk_<n>` (the `volume<name>` container) pulls its image and links the
disk file at the host path of `<dir>/disk_<n>.img`, then stays `running` as upstream's container-disk server does;
`/usr/bin/container-disk --no-op` (its `-init` container) only pulls and completes. `container-disk-binary`
(`/usr/bin/cp … /usr/bin/container-disk …`) completes at once: there is no binary to copy. The kernel-boot
container (`volumekernel-boot-volume`, same binary) serves its image's root filesystem instead of a disk: the link
`<copy-path>.root` is the image's file tree, where the launcher finds the kernel and initrd. Failed pulls are
reported as ErrImagePull, then ImagePullBackOff while the kubelet's back-off (10 s doubling, at most 300 s) runs.
`/usr/bin/virt-tail --logfile <file>` (the guest-console-log sidecar) is running from its start until the pod ends;
its log is `<file>` itself, resolved through its volumeMounts, so no tail process runs per VM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.api.kernel_boot import KERNEL_BOOT_CONTAINER, KERNEL_BOOT_INIT_CONTAINER, KERNEL_BOOT_ROOT_SUFFIX
from pykubevirt.api.pod_defaults import default_pull_policy
from pykubevirt.node.image_store import ImagePullError, ImageStore

log = logging.getLogger("pykubevirt.node.virtual_containers")

CONTAINER_DISK_BINARY = "/usr/bin/container-disk"
COPY_BINARY = "/usr/bin/cp"
VIRT_TAIL_BINARY = "/usr/bin/virt-tail"
DISK_SUFFIX = ".img"
PULL_BACKOFF_INITIAL_SECONDS = 10.0
PULL_BACKOFF_MAX_SECONDS = 300.0
# How long a failed pull shows as ErrImagePull before the status turns to ImagePullBackOff.
ERR_IMAGE_PULL_SHOWN_SECONDS = 2.0

ERR_IMAGE_PULL = "ErrImagePull"
IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
CONTAINER_DISK = "container-disk"
CONTAINER_DISK_INIT = "container-disk-init"
KERNEL_BOOT = "kernel-boot"
KERNEL_BOOT_INIT = "kernel-boot-init"
BINARY_COPY = "container-disk-binary"
CONSOLE_LOG = "console-log"


def virtual_kind(container: Mapping[str, Any]) -> str | None:
    """Which virtual container this is, or None for one that runs its command as a process."""
    command = [str(x) for x in container.get("command") or []]
    args = [str(x) for x in container.get("args") or []]
    if command[:1] == [CONTAINER_DISK_BINARY]:
        init = "--no-op" in [*command[1:], *args]
        if container.get("name") in (KERNEL_BOOT_CONTAINER, KERNEL_BOOT_INIT_CONTAINER):
            return KERNEL_BOOT_INIT if init else KERNEL_BOOT
        return CONTAINER_DISK_INIT if init else CONTAINER_DISK
    if command[:1] == [COPY_BINARY] and any(arg.endswith(CONTAINER_DISK_BINARY) for arg in [*command[1:], *args]):
        return BINARY_COPY
    if command[:1] == [VIRT_TAIL_BINARY]:
        return CONSOLE_LOG
    return None


def is_restartable(container: Mapping[str, Any]) -> bool:
    """A native sidecar: an init container with `restartPolicy: Always`."""
    return container.get("restartPolicy") == "Always"


def pull_policy(container: Mapping[str, Any]) -> str:
    return str(container.get("imagePullPolicy") or default_pull_policy(str(container.get("image") or "")))


def _host_path_of_flag(container: Mapping[str, Any], flag: str, mounts: Mapping[str, str]) -> str:
    """The host path of the container path following `flag`, resolved through the container's volumeMounts."""
    argv = [str(x) for x in [*(container.get("command") or []), *(container.get("args") or [])]]
    if flag not in argv or argv.index(flag) + 1 >= len(argv):
        raise ValueError(f"{argv[0] if argv else 'container'} without {flag}")
    path = argv[argv.index(flag) + 1]
    host = pod_layout.host_path(path, mounts)
    if host == path:
        raise ValueError(f"{flag} {path} is in none of the container's volumeMounts")
    return host


def wants_tree(kind: str) -> bool:
    """Whether the container uses its image's files (kernel boot) rather than its one disk."""
    return kind in (KERNEL_BOOT, KERNEL_BOOT_INIT)


def disk_link_path(container: Mapping[str, Any], mounts: Mapping[str, str], kind: str = CONTAINER_DISK) -> str:
    """The host path of `--copy-path` + `.img` (+ `.root` for the kernel-boot tree), through the volumeMounts."""
    suffix = KERNEL_BOOT_ROOT_SUFFIX if kind == KERNEL_BOOT else DISK_SUFFIX
    return _host_path_of_flag(container, "--copy-path", mounts) + suffix


def console_log_path(container: Mapping[str, Any], mounts: Mapping[str, str]) -> str:
    """The host path of virt-tail's `--logfile`, resolved through the container's volumeMounts."""
    return _host_path_of_flag(container, "--logfile", mounts)


def link_disk(image_path: Path, link: str) -> None:
    """Point `link` at the image's disk file, replacing an older link atomically."""
    os.makedirs(os.path.dirname(link), exist_ok=True)
    tmp = f"{link}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(image_path, tmp)
    os.replace(tmp, link)


@dataclass
class PullResult:
    """Where one image pull stands: `path` once available, else `reason`/`message` of the waiting state."""

    path: Path | None = None
    reason: str = "ContainerCreating"
    message: str = ""
    retry_in: float | None = None


@dataclass
class _Pull:
    task: asyncio.Task[None] | None = None
    path: Path | None = None
    failures: int = 0
    failed_at: float = 0.0
    next_attempt: float = 0.0
    message: str = ""
    reason: str = ERR_IMAGE_PULL


class ImagePuller:
    """Pulls images in background tasks, one state per (pod uid, container), with the kubelet's back-off."""

    def __init__(
        self, images: ImageStore, on_done: Callable[[str], None], *, clock: Callable[[], float] = time.monotonic
    ):
        self.images = images
        self.on_done = on_done
        self.clock = clock
        self._pulls: dict[tuple[str, str], _Pull] = {}

    def status(self, uid: str, container: str, image: str, policy: str, kind: str = CONTAINER_DISK) -> PullResult:
        """The pull's state, starting an attempt when none runs and the back-off allows one; a kernel-boot `kind`
        pulls the image's files rather than its disk."""
        key = (uid, container)
        pull = self._pulls.setdefault(key, _Pull())
        if pull.path is not None:
            return PullResult(path=pull.path)
        if pull.task is not None and not pull.task.done():
            return PullResult()
        now = self.clock()
        if pull.failures and now < pull.next_attempt:
            shown_until = pull.failed_at + ERR_IMAGE_PULL_SHOWN_SECONDS
            if now < shown_until or pull.reason != ERR_IMAGE_PULL:
                # ErrImageNeverPull and InvalidImageName keep their reason; only pull errors turn into back-off.
                retry = shown_until - now if now < shown_until else pull.next_attempt - now
                return PullResult(reason=pull.reason, message=pull.message, retry_in=retry)
            return PullResult(
                reason=IMAGE_PULL_BACK_OFF,
                message=f'Back-off pulling image "{image}": {ERR_IMAGE_PULL}: {pull.message}',
                retry_in=pull.next_attempt - now,
            )
        pull.task = asyncio.create_task(self._pull(uid, image, policy, pull, wants_tree(kind)), name=f"pull-{image}")
        return PullResult()

    async def _pull(self, uid: str, image: str, policy: str, pull: _Pull, tree: bool) -> None:
        try:
            pull.path = await self.images.ensure(image, policy, tree=tree)
            pull.failures = 0
        except ImagePullError as exc:
            self._failed(pull, str(exc) or f"failed to pull image {image!r}", exc.reason)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("pulling %s failed unexpectedly", image)
            self._failed(pull, f"failed to pull image {image!r}: {exc}")
        self.on_done(uid)

    def _failed(self, pull: _Pull, message: str, reason: str = "") -> None:
        pull.failures += 1
        pull.reason = reason or ERR_IMAGE_PULL
        pull.failed_at = self.clock()
        delay = min(PULL_BACKOFF_INITIAL_SECONDS * 2 ** (pull.failures - 1), PULL_BACKOFF_MAX_SECONDS)
        pull.next_attempt = pull.failed_at + delay
        pull.message = message

    def forget(self, uid: str) -> None:
        for key in [k for k in self._pulls if k[0] == uid]:
            pull = self._pulls.pop(key)
            if pull.task is not None:
                pull.task.cancel()

    def close(self) -> None:
        for uid in {k[0] for k in self._pulls}:
            self.forget(uid)
