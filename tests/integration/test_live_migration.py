"""Live migration between two real launchers on this host: an embedded libvirt source, a private libvirtd target.

Real QEMU (TCG) guests: the small VMI has no bootable disk, so its firmware idles, which is all a migration needs.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from pykubevirt.api import pod_layout
from pykubevirt.handler.launcher_client import CommandFailed
from pykubevirt.launcher import migration_paths
from tests.support.launcher_process import LauncherProcess, defaulted_vmi, start_launcher

Obj = dict[str, Any]
# Incoming streams bind a loopback address of their own, as a node's migration address.
TARGET_ADDRESS = "127.0.0.2"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LauncherProcess, LauncherProcess]]:
    uid = str(uuid.uuid4())
    source = start_launcher(tmp_path, "mig", uid, "--allow-emulation", libvirt_uri="")
    target = start_launcher(tmp_path, "mig", uid, "--allow-emulation", "--migration-target", libvirt_uri="")
    yield source, target
    for launcher in (source, target):
        launcher.stop()


async def running_pair(source: LauncherProcess, target: LauncherProcess) -> tuple[Obj, Obj]:
    """The source running the VMI and the target prepared for it; the target's preparation answer."""
    await asyncio.gather(source.wait_ready(), target.wait_ready())
    vmi = defaulted_vmi("mig", source.vmi_uid)
    started = await source.client().request("sync", vmi=vmi)
    assert started["domain"]["state"] == "Running"
    prepared = await target.client().request(
        "preparemigrationtarget", vmi=vmi, migration={"listenAddress": TARGET_ADDRESS}
    )
    return vmi, prepared


def migrate_request(prepared: Obj, **extra: Any) -> Obj:
    incoming = prepared["migration"]
    return {
        "targetUri": f"qemu+unix:///system?socket={incoming['libvirtSocket']}",
        "migrationUri": f"tcp://{incoming['migrationAddress']}",
        "disksUri": f"tcp://{incoming['migrationAddress']}:{incoming['disksPort']}",
        "blockMigration": True,
        **extra,
    }


async def wait_migration(launcher: LauncherProcess, state: str, within: float = 90.0) -> Obj:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        status = await launcher.client().request("migrationstatus")
        if status.get("migration", {}).get("state") == state:
            return status
        assert asyncio.get_running_loop().time() < deadline, f"no {state} migration: {status}\n{launcher.log()}"
        await asyncio.sleep(0.2)


def qemu_pids(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"qemu-system" in cmdline and marker.encode() in cmdline:
            found.append(int(entry))
    return found


def cpus_allowed(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


async def test_a_running_guest_moves_to_the_target_launcher(pair: tuple[LauncherProcess, LauncherProcess]) -> None:
    source, target = pair
    _, prepared = await running_pair(source, target)
    assert prepared["migration"]["state"] == "TargetReady"
    assert len(qemu_pids(source.pod_uid)) == 1 and qemu_pids(target.pod_uid) == []
    started = await source.client().request("migrate", migration=migrate_request(prepared))
    assert started["migration"]["role"] == "source" and started["migration"]["state"] == "Running"
    done = await wait_migration(source, "Succeeded")
    assert done["migration"]["completed"] is True and done["migration"]["endTimestamp"]
    # The empty disk and the cloud-init disk were copied; nothing else is writable.
    assert done["migration"]["migrateDisks"] == ["vda", "vdb"]
    arrived = await wait_migration(target, "Succeeded")
    assert arrived["domain"]["state"] == "Running" and arrived["domain"]["defined"] is True
    assert arrived["migration"]["targetNodeDomainReadyTimestamp"]
    # The source launcher exits once its domain left, and its QEMU is gone; the target's runs the guest.
    assert await source.wait_exit() == 0
    assert qemu_pids(source.pod_uid) == [] and len(qemu_pids(target.pod_uid)) == 1
    # The daemon runs pinned (see libvirt_daemon); the guest it received may use every CPU.
    assert cpus_allowed(qemu_pids(target.pod_uid)[0]) == cpus_allowed(os.getpid())
    status = await target.client().request("status")
    assert status["domain"]["state"] == "Running" and status["domain"]["name"] == "default_mig"


async def test_the_target_domain_uses_the_target_pods_files(pair: tuple[LauncherProcess, LauncherProcess]) -> None:
    source, target = pair
    _, prepared = await running_pair(source, target)
    await source.client().request("migrate", migration=migrate_request(prepared))
    await wait_migration(target, "Succeeded")
    conn = libvirt.open(f"qemu+unix:///system?socket={prepared['migration']['libvirtSocket']}")
    try:
        xml = conn.lookupByName("default_mig").XMLDesc(0)
    finally:
        conn.close()
    recorded = migration_paths.recorded(xml)
    assert recorded["ephemeralDisks"].startswith(str(target.pod_dir))
    assert str(source.pod_dir) not in xml
    assert str(target.pod_dir / "volumes" / "libvirt-runtime" / "empty-disks" / "scratch.qcow2") in xml


async def test_a_cancelled_migration_leaves_the_guest_on_the_source(
    pair: tuple[LauncherProcess, LauncherProcess],
) -> None:
    source, target = pair
    _, prepared = await running_pair(source, target)
    # 1 MiB/s keeps the copy going long enough to cancel it.
    await source.client().request("migrate", migration=migrate_request(prepared, bandwidthMiB=1))
    with pytest.raises(CommandFailed, match="already under way"):
        await source.client().request("migrate", migration=migrate_request(prepared))
    await source.client().request("cancelmigration")
    failed = await wait_migration(source, "Failed")
    assert failed["migration"]["failureReason"] == "Live migration has been aborted"
    assert failed["migration"]["abortStatus"] == "Succeeded"
    assert failed["domain"]["state"] == "Running" and failed["domain"]["defined"] is True
    assert source.process.poll() is None


async def test_a_migration_cancelled_the_moment_it_starts_is_aborted(
    pair: tuple[LauncherProcess, LauncherProcess],
) -> None:
    # The cancel arrives before libvirt has a migration job: it must still stop the migration, not be lost.
    source, target = pair
    _, prepared = await running_pair(source, target)
    client = source.client()
    await client.request("migrate", migration=migrate_request(prepared, bandwidthMiB=1))
    await client.request("cancelmigration")
    failed = await wait_migration(source, "Failed")
    assert failed["migration"]["failureReason"] == "Live migration has been aborted"
    assert failed["migration"]["abortStatus"] == "Succeeded"
    assert failed["domain"]["state"] == "Running"
    assert source.process.poll() is None


async def test_a_guest_on_a_shared_claim_moves_without_a_block_copy(
    pair: tuple[LauncherProcess, LauncherProcess],
) -> None:
    # KubeVirt's LiveMigration: every disk on ReadWriteMany storage, which both pods see; nothing is copied.
    source, target = pair
    claim = {"claimName": "shared", "accessModes": ["ReadWriteMany"], "volumeMode": "Filesystem"}
    claim |= {"capacity": {"storage": "16Mi"}, "requests": {"storage": "16Mi"}}
    vmi = defaulted_vmi(
        "mig",
        source.vmi_uid,
        domain={"memory": {"guest": "64Mi"}, "devices": {"disks": [{"name": "data", "disk": {"bus": "virtio"}}]}},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
    )
    vmi["status"]["volumeStatus"] = [{"name": "data", "target": "", "persistentVolumeClaimInfo": claim}]
    # One volume, mounted into both pods (the embedded `shared` class: one host directory every node mounts).
    volume = source.pod_dir.parent.parent / "shared-volume"
    volume.mkdir()
    (volume / "disk.img").write_bytes(b"shared-marker".ljust(16 * 1024 * 1024, b"\0"))
    for launcher in (source, target):
        disks = launcher.pod_dir / "volumes" / "private" / "vmi-disks"
        disks.mkdir(parents=True)
        (disks / "data").symlink_to(volume)
    await asyncio.gather(source.wait_ready(), target.wait_ready())
    assert (await source.client().request("sync", vmi=vmi))["domain"]["state"] == "Running", source.log()
    prepared = await target.client().request(
        "preparemigrationtarget", vmi=vmi, migration={"listenAddress": TARGET_ADDRESS}
    )
    request = migrate_request(prepared, blockMigration=False, sharedVolumes=["data"])
    del request["disksUri"]
    await source.client().request("migrate", migration=request)
    done = await wait_migration(source, "Succeeded")
    assert done["migration"]["migrateDisks"] == []
    arrived = await wait_migration(target, "Succeeded")
    assert arrived["domain"]["state"] == "Running"
    assert (volume / "disk.img").read_bytes()[:13] == b"shared-marker"
    conn = libvirt.open(f"qemu+unix:///system?socket={prepared['migration']['libvirtSocket']}")
    try:
        xml = conn.lookupByName("default_mig").XMLDesc(0)
    finally:
        conn.close()
    # The target's QEMU opened the claim through its own pod's directory.
    assert f"{pod_layout.short_runtime_dir(target.pod_uid)}/vmi-disks/data/disk.img" in xml


async def test_an_overdue_migration_that_allows_post_copy_switches_to_it_and_completes(
    pair: tuple[LauncherProcess, LauncherProcess],
) -> None:
    # KubeVirt's monitor: past completionTimeoutPerGiB × the guest's memory, allowPostCopy switches instead of aborting.
    source, target = pair
    _, prepared = await running_pair(source, target)
    request = migrate_request(prepared, bandwidthMiB=1, allowPostCopy=True, completionTimeoutPerGiB=1)
    await source.client().request("migrate", migration=request)
    done = await wait_migration(source, "Succeeded")
    assert done["migration"]["mode"] == "PostCopy"
    assert done["migration"]["completed"] is True and "abortStatus" not in done["migration"]
    arrived = await wait_migration(target, "Succeeded")
    assert arrived["domain"]["state"] == "Running"
    assert "Starting post copy mode for migration" in source.log()
