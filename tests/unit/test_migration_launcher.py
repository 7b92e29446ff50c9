"""The pure parts of a launcher's live migration: path retargeting, the libvirt flags and disks, the monitor."""

from __future__ import annotations

import libvirt

from pykubevirt.launcher import migration_paths
from pykubevirt.launcher.migration_source import START_POST_COPY, MonitorState, flags, local_disks, params
from pykubevirt.launcher.protocol import parse_migration

SOURCE = {"private": "/run/pkv/aaa/private", "ephemeralDisks": "/n1/pods/a/volumes/ephemeral-disks"}
TARGET = {"private": "/run/pkv/bbb/private", "ephemeralDisks": "/n2/pods/b/volumes/ephemeral-disks"}

DOMAIN = """<domain type='qemu'>
  <name>default_vm</name>
  <devices>
    <disk type='file' device='disk'><source file='/n1/pods/a/volumes/ephemeral-disks/disk.qcow2'/>
      <target dev='vda' bus='virtio'/><alias name='ua-root'/></disk>
    <disk type='file' device='cdrom'><source file='/n1/pods/a/volumes/ephemeral-disks/cidata.iso'/>
      <target dev='sda' bus='sata'/><readonly/></disk>
    <disk type='file' device='disk'><source file='/shared/disk.img'/><target dev='vdb' bus='virtio'/>
      <alias name='ua-shared'/></disk>
    <serial type='unix'><source mode='bind' path="/run/pkv/aaa/private/uid/virt-serial0"/></serial>
    <disk type='file' device='disk'><source file='/run/pkv/aaa/privateer/x'/><target dev='vdc'/></disk>
  </devices>
  <os><kernel>/n1/pods/a/volumes/ephemeral-disks/kernel-boot/vmlinuz</kernel><initrd>/boot/initrd</initrd></os>
</domain>"""


def test_retarget_moves_every_source_pod_path_and_rewrites_the_record() -> None:
    xml = migration_paths.annotate(DOMAIN, SOURCE)
    assert migration_paths.recorded(xml) == SOURCE
    moved = migration_paths.retarget(xml, TARGET)
    assert "file='/n2/pods/b/volumes/ephemeral-disks/disk.qcow2'" in moved
    assert "file='/n2/pods/b/volumes/ephemeral-disks/cidata.iso'" in moved
    assert 'path="/run/pkv/bbb/private/uid/virt-serial0"' in moved
    # Only whole path components match, and paths outside the pod stay.
    assert "file='/run/pkv/aaa/privateer/x'" in moved and "file='/shared/disk.img'" in moved
    # A kernel boot's files are element text; the target pod has its own copies.
    assert "<kernel>/n2/pods/b/volumes/ephemeral-disks/kernel-boot/vmlinuz</kernel>" in moved
    assert "<initrd>/boot/initrd</initrd>" in moved
    assert migration_paths.recorded(moved) == TARGET


def test_retarget_reads_the_record_whatever_prefix_libvirt_gives_it() -> None:
    xml = migration_paths.annotate(DOMAIN, SOURCE).replace("pykubevirt:paths", "pkv:paths")
    xml = xml.replace("xmlns:pykubevirt=", "xmlns:pkv=")
    moved = migration_paths.retarget(xml, TARGET)
    assert migration_paths.recorded(moved) == TARGET
    assert "/n1/pods/a" not in moved


def test_a_domain_without_a_record_is_left_alone() -> None:
    assert migration_paths.retarget(DOMAIN, TARGET) == DOMAIN


def test_block_migration_copies_writable_local_disks_only() -> None:
    assert local_disks(DOMAIN) == ["vda", "vdb", "vdc"]
    assert local_disks(DOMAIN, frozenset({"shared"})) == ["vda", "vdc"]


def test_flags_are_kubevirts_plus_undefine_source() -> None:
    base = (
        libvirt.VIR_MIGRATE_LIVE
        | libvirt.VIR_MIGRATE_PEER2PEER
        | libvirt.VIR_MIGRATE_PERSIST_DEST
        | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    )
    assert flags({}, paused=False) == base
    block = flags({"blockMigration": True, "allowAutoConverge": True}, paused=True)
    assert block == base | libvirt.VIR_MIGRATE_NON_SHARED_INC | libvirt.VIR_MIGRATE_AUTO_CONVERGE | (
        libvirt.VIR_MIGRATE_PAUSED
    )
    assert not flags({"blockMigration": True}, paused=False) & libvirt.VIR_MIGRATE_TUNNELLED


def test_params_name_the_streams_and_the_disks() -> None:
    request = parse_migration(
        {"migrationUri": "tcp://127.0.0.3", "disksUri": "tcp://127.0.0.3:4000", "blockMigration": True}
    )
    assert params(request, "default_vm", ["vda"]) == {
        libvirt.VIR_MIGRATE_PARAM_DEST_NAME: "default_vm",
        libvirt.VIR_MIGRATE_PARAM_URI: "tcp://127.0.0.3",
        libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS: ["vda"],
        libvirt.VIR_MIGRATE_PARAM_DISKS_URI: "tcp://127.0.0.3:4000",
    }
    # Unlimited bandwidth (0) is not sent; a limit is, in MiB/s.
    assert libvirt.VIR_MIGRATE_PARAM_BANDWIDTH not in params(parse_migration({"bandwidthMiB": 0}), "d", [])
    assert params(parse_migration({"bandwidthMiB": 64}), "d", [])[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 64


def test_parse_migration_drops_fields_of_the_wrong_type() -> None:
    assert parse_migration({"bandwidthMiB": True, "blockMigration": 1, "targetUri": 5, "unsafe": False}) == {
        "unsafe": False
    }


def test_the_monitor_aborts_a_stuck_or_overlong_migration() -> None:
    state = MonitorState(started=0.0, acceptable_seconds=100.0, progress_timeout=10.0)
    assert state.verdict({"data_remaining": 500}, 1.0) == ""
    assert state.verdict({"data_remaining": 400}, 5.0) == ""
    assert state.verdict({"data_remaining": 400}, 14.0) == ""
    assert state.verdict({"data_remaining": 450}, 15.5) == "Live migration stuck for 10 seconds and has been aborted"
    late = MonitorState(started=0.0, acceptable_seconds=30.0, progress_timeout=150.0)
    assert late.verdict({"data_remaining": 10}, 10.0) == ""
    assert late.verdict({"data_remaining": 5}, 31.0) == (
        "Live migration is not completed after 31 seconds and has been aborted"
    )


def test_an_overdue_migration_switches_to_post_copy_when_allowed_and_is_then_left_alone() -> None:
    state = MonitorState(started=0.0, acceptable_seconds=30.0, progress_timeout=10.0)
    assert state.verdict({"data_remaining": 10}, 29.0, post_copy_allowed=True) == ""
    # Overdue and stuck at once: post-copy comes first, as in KubeVirt's monitor.
    assert state.verdict({"data_remaining": 10}, 45.0, post_copy_allowed=True) == START_POST_COPY
    state.post_copy = True
    assert state.verdict({"data_remaining": 10}, 500.0, post_copy_allowed=True) == ""
