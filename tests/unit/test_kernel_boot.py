"""Direct kernel boot's run-time parts: the image store keeping an image as its files (imported or pulled with the
real skopeo from an OCI layout), the node's kernel-boot container kinds, and the launcher linking the kernel and
initrd where the domain XML points."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pykubevirt.api.kernel_boot import artifact_path, kernel_boot_volume
from pykubevirt.launcher.kernel_boot import KernelBootError, link_kernel_artifacts
from pykubevirt.node import virtual_containers as virtual
from pykubevirt.node.image_store import ImagePullError, ImageStore
from tests.unit.test_image_store import DISK, _cli, oci_image

KERNEL = b"MZ kernel " * 100
INITRD = b"\x1f\x8b initrd " * 100
REF = "pykubevirt.local/kernel:1"


def kernel_vmi(**container: str) -> dict[str, object]:
    container.setdefault("image", REF)
    return {"spec": {"domain": {"firmware": {"kernelBoot": {"container": container}}}}}


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images", pull_timeout=30)


@pytest.fixture
def kernel_files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "vmlinuz").write_bytes(KERNEL)
    (tmp_path / "initrd.gz").write_bytes(INITRD)
    return {"/boot/vmlinuz": tmp_path / "vmlinuz", "/boot/initrd.gz": tmp_path / "initrd.gz"}


async def test_imported_files_are_the_images_root_filesystem(store: ImageStore, kernel_files: dict[str, Path]) -> None:
    digest = store.import_files(REF, kernel_files)
    assert digest.startswith("sha256:")
    root = await store.ensure(REF, "Never", tree=True)
    assert (root / "boot" / "vmlinuz").read_bytes() == KERNEL
    assert (root / "boot" / "initrd.gz").read_bytes() == INITRD
    # The same files give the same tree (digest and directory); the image lists with the files' total size.
    assert store.import_files(REF, kernel_files) == digest
    assert await store.ensure(REF, "Always", tree=True) == root
    assert store.images() == [(REF, digest, len(KERNEL) + len(INITRD))]
    # It has no disk: as a containerDisk it fails with upstream's message instead of trying a registry.
    with pytest.raises(ImagePullError, match="no file found in folder /disk"):
        await store.ensure(REF, "IfNotPresent")
    assert store.remove(REF)
    assert not [p for p in store.blobs.iterdir() if not p.name.startswith(".")]


async def test_pulled_tree_follows_layers_links_and_whiteouts(store: ImageStore, tmp_path: Path) -> None:
    layout = oci_image(
        tmp_path / "registry",
        "v1",
        [("boot/", None, ""), ("boot/vmlinuz-6.1", KERNEL, ""), ("boot/old", b"gone", "")],
        [("boot/vmlinuz", None, "->vmlinuz-6.1"), ("boot/initrd.img", INITRD, ""), ("boot/.wh.old", b"", "")],
    )
    root = await store.ensure("example.org/kernel:v1", "IfNotPresent", source=f"oci:{layout}:v1", tree=True)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_symlink()) == [
        "boot/initrd.img",
        "boot/vmlinuz",
        "boot/vmlinuz-6.1",
    ]
    assert (root / "boot" / "vmlinuz").read_bytes() == KERNEL
    store.skopeo = "/nonexistent/skopeo"  # present now: IfNotPresent and Never need no pull
    assert await store.ensure("example.org/kernel:v1", "Never", tree=True) == root


async def test_pulling_a_tree_keeps_the_disk_of_the_same_image(store: ImageStore, tmp_path: Path) -> None:
    layout = oci_image(tmp_path / "registry", "v1", [("disk/d.qcow2", DISK, ""), ("boot/vmlinuz", KERNEL, "")])
    source = f"oci:{layout}:v1"
    disk = await store.ensure("example.org/both:v1", "IfNotPresent", source=source)
    root = await store.ensure("example.org/both:v1", "IfNotPresent", source=source, tree=True)
    assert store.lookup("example.org/both:v1") == disk and disk.read_bytes() == DISK
    assert (root / "boot" / "vmlinuz").read_bytes() == KERNEL


def test_cli_imports_files_at_image_paths(
    tmp_path: Path, kernel_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    images = str(tmp_path / "cli-images")
    flags = [f"--file={path}={file}" for path, file in kernel_files.items()]
    assert _cli("image", "import", REF, *flags, "--images-dir", images) == 0
    ref, digest = capsys.readouterr().out.split()
    assert ref == REF and digest.startswith("sha256:")
    assert ImageStore(Path(images)).entry(REF).files.keys() == {"boot/vmlinuz", "boot/initrd.gz"}  # type: ignore[union-attr]
    assert _cli("image", "import", REF, "--file", "/boot/vmlinuz", "--images-dir", images) == 1
    assert "expected PATH=FILE" in capsys.readouterr().err
    assert _cli("image", "import", REF, "--images-dir", images) == 1
    assert "either FILE" in capsys.readouterr().err


def test_node_kinds_of_the_kernel_boot_containers() -> None:
    base = {"image": REF, "command": ["/usr/bin/container-disk"]}
    serving = {**base, "name": "volumekernel-boot-volume", "args": ["--copy-path", "/cd/uid/kernel-boot"]}
    init = {**base, "name": "volumekernel-boot-volume-init", "args": ["--no-op"]}
    disk = {**base, "name": "volumeroot", "args": ["--copy-path", "/cd/uid/disk_0"]}
    assert [virtual.virtual_kind(c) for c in (serving, init, disk)] == [
        virtual.KERNEL_BOOT,
        virtual.KERNEL_BOOT_INIT,
        virtual.CONTAINER_DISK,
    ]
    assert virtual.wants_tree(virtual.KERNEL_BOOT_INIT) and not virtual.wants_tree(virtual.CONTAINER_DISK)
    mounts = {"/cd/uid": "/pods/p/volumes/container-disks"}
    assert (
        virtual.disk_link_path(serving, mounts, virtual.KERNEL_BOOT)
        == "/pods/p/volumes/container-disks/kernel-boot.root"
    )
    assert virtual.disk_link_path(disk, mounts) == "/pods/p/volumes/container-disks/disk_0.img"


def test_the_upstream_volume_and_paths() -> None:
    vmi = kernel_vmi(kernelPath="/boot/vmlinuz", imagePullPolicy="Never")
    assert kernel_boot_volume(vmi) == {
        "name": "kernel-boot-volume",
        "containerDisk": {"image": REF, "path": "/", "imagePullPolicy": "Never"},
    }
    assert kernel_boot_volume({"spec": {"domain": {"firmware": {"kernelBoot": {"kernelArgs": "x"}}}}}) is None
    assert artifact_path("/var/run/kubevirt/container-disks", "/a/b/vmlinuz") == (
        "/var/run/kubevirt/container-disks/kernel-boot/vmlinuz"
    )


async def test_launcher_links_the_kernel_and_initrd(
    store: ImageStore, kernel_files: dict[str, Path], tmp_path: Path
) -> None:
    container_disks = tmp_path / "container-disks"
    container_disks.mkdir()
    vmi = kernel_vmi(kernelPath="/boot/vmlinuz", initrdPath="/boot/initrd.gz")
    with pytest.raises(KernelBootError, match="kernelboot container not yet ready"):
        link_kernel_artifacts(vmi, container_disks)
    store.import_files(REF, kernel_files)
    virtual.link_disk(await store.ensure(REF, "Never", tree=True), str(container_disks / "kernel-boot.root"))
    links = link_kernel_artifacts(vmi, container_disks)
    assert links == [container_disks / "kernel-boot" / "vmlinuz", container_disks / "kernel-boot" / "initrd.gz"]
    assert [link.read_bytes() for link in links] == [KERNEL, INITRD]
    assert all(os.path.isabs(os.readlink(link)) for link in links)
    # Linking again (a retried sync) replaces the links; a path the image lacks is named.
    assert link_kernel_artifacts(vmi, container_disks) == links
    with pytest.raises(KernelBootError, match="No image on path /boot/missing"):
        link_kernel_artifacts(kernel_vmi(kernelPath="/boot/missing"), container_disks)
    assert link_kernel_artifacts({"spec": {}}, container_disks) == []
