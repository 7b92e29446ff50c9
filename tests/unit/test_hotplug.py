"""Volume hotplug decisions: virt-api's checks and patches, the controller's and handler's phases, the launcher's plan.

KubeVirt: pkg/virt-api/rest/volumes.go, pkg/virtctl/vm/add_volume.go, pkg/virt-controller/watch/vmi/storage.go,
pkg/virt-handler/vm.go (updateHotplugVolumeStatus).
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from typing import Any

import pytest

from pykubevirt.api import errors
from pykubevirt.api.json_patch import apply_patch
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.volume_status import hotplug_entry, volume_statuses, without_hotplug_volumes
from pykubevirt.handler.hotplug import after_sync, mark_detaching
from pykubevirt.launcher.converter import ConverterContext
from pykubevirt.launcher.converter.hotplug import LiveDisk, disk_xml, plan
from pykubevirt.virtapi.volumes import (
    HOTPLUG_NOT_ENABLED,
    hotplug_enabled,
    parse_add,
    parse_remove,
    request_present,
    spec_patch,
    verify,
)
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.volumes import add_options

PVC = {"persistentVolumeClaim": {"claimName": "data"}}


def _add(**extra: Any) -> bytes:
    return json.dumps({"name": "data", "disk": {"disk": {"bus": "scsi"}}, "volumeSource": PVC, **extra}).encode()


def _spec(*volumes: dict[str, Any]) -> dict[str, Any]:
    disks = [{"name": v["name"], "disk": {"bus": "virtio"}} for v in volumes]
    return {"domain": {"devices": {"disks": disks}}, "volumes": list(volumes)}


# ------------------------------------------------------------------------------------------------ virt-api


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "Request with no body, a new name is expected as the request body"),
        (b'{"disk": {}, "volumeSource": {}}', "AddVolumeOptions requires name to be set"),
        (b'{"name": "x", "volumeSource": {}}', "AddVolumeOptions requires disk to not be nil"),
        (b'{"name": "x", "disk": {}}', "AddVolumeOptions requires VolumeSource to not be nil"),
    ],
)
def test_add_options_missing_a_field_are_a_bad_request(body: bytes, message: str) -> None:
    with pytest.raises(errors.APIError) as raised:
        parse_add(body)
    assert raised.value.code == 400 and str(raised.value) == message


def test_add_names_the_disk_and_makes_the_source_hotpluggable() -> None:
    request = parse_add(_add(dryRun=["All"]))
    assert request.dry_run and request.name == "data"
    assert request.add == {
        "name": "data",
        "disk": {"disk": {"bus": "scsi"}, "name": "data"},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "data", "hotpluggable": True}},
    }


def test_remove_needs_a_name() -> None:
    with pytest.raises(errors.APIError) as raised:
        parse_remove(b"{}")
    assert str(raised.value) == "RemoveVolumeOptions requires name to be set"


def test_verify_refuses_a_taken_name_or_source_and_removing_what_is_missing_or_not_hotplugged() -> None:
    boot = {"name": "boot", "persistentVolumeClaim": {"claimName": "root"}}
    hot = {"name": "hot", "dataVolume": {"name": "dv", "hotpluggable": True}}
    volumes = [boot, hot]
    assert verify(volumes, parse_add(_add())) is None
    taken = parse_add(_add(name="boot"))
    assert verify(volumes, taken) == "Unable to add volume [boot] because volume with that name already exists"
    same_source = parse_add(_add(volumeSource={"persistentVolumeClaim": {"claimName": "root"}}))
    assert verify(volumes, same_source) == "Unable to add volume source [root] because it already exists"
    assert verify(volumes, parse_remove(b'{"name": "boot"}')) == (
        "Unable to remove volume [boot] because it is not hotpluggable"
    )
    assert verify(volumes, parse_remove(b'{"name": "gone"}')) == (
        "Unable to remove volume [gone] because it does not exist"
    )
    # A hotplugged volume is found by its name or by its source's name.
    assert verify(volumes, parse_remove(b'{"name": "dv"}')) is None


def test_the_patch_tests_both_lists_then_replaces_them() -> None:
    spec = _spec({"name": "boot", "emptyDisk": {"capacity": "1Gi"}})
    request = parse_add(_add())
    patch = spec_patch("/spec/template", spec, request)
    assert [(op["op"], op["path"]) for op in patch] == [
        ("test", "/spec/template/spec/volumes"),
        ("test", "/spec/template/spec/domain/devices/disks"),
        ("replace", "/spec/template/spec/volumes"),
        ("replace", "/spec/template/spec/domain/devices/disks"),
    ]
    patched = apply_patch({"spec": {"template": {"spec": spec}}}, patch)["spec"]["template"]["spec"]
    assert patched["volumes"][-1] == {
        "name": "data",
        "persistentVolumeClaim": {"claimName": "data", "hotpluggable": True},
    }
    assert patched["domain"]["devices"]["disks"][-1] == {"disk": {"bus": "scsi"}, "name": "data"}
    assert request_present(patched, request) and not request_present(spec, request)
    removed = apply_patch({"spec": patched}, spec_patch("", patched, parse_remove(b'{"name": "data"}')))["spec"]
    assert removed == spec


# ------------------------------------------------------------------------------------------------ virtctl


def _args(**overrides: Any) -> argparse.Namespace:
    values = {
        "volume_name": "data",
        "disk_name": "",
        "serial": "",
        "cache": "",
        "disk_type": "disk",
        "bus": "scsi",
        "dry_run": False,
    }
    return argparse.Namespace(**{**values, **overrides})


def test_virtctl_builds_the_options_with_the_volume_name_as_default_serial() -> None:
    options = add_options(_args(cache="none"), PVC)
    assert options == {
        "name": "data",
        "disk": {"name": "data", "disk": {"bus": "scsi"}, "serial": "data", "cache": "none"},
        "volumeSource": PVC,
    }
    assert add_options(_args(serial="s1", dry_run=True), PVC)["dryRun"] == ["All"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"bus": "sata"}, "Invalid bus type 'sata' for disk. Only 'scsi' and 'virtio' are supported."),
        (
            {"disk_type": "lun", "bus": "virtio"},
            "Invalid bus type 'virtio' for LUN disk. Only 'scsi' bus is supported.",
        ),
        ({"disk_type": "cdrom"}, "Invalid disk type 'cdrom'. Only LUN and Disk are supported."),
        ({"cache": "unsafe"}, "error adding volume, invalid cache value unsafe"),
        ({"disk_name": "d" * 64}, f"Invalid disk name {'d' * 64}, must not exceed 63 characters"),
    ],
)
def test_virtctl_refuses_options_as_upstream(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(VirtctlError) as raised:
        add_options(_args(**overrides), PVC)
    assert str(raised.value) == message


# ------------------------------------------------------------------------------------------------ controller


def test_the_controller_phases_follow_the_claim_until_the_handler_takes_over() -> None:
    entry = {"name": "data", "target": ""}
    pending = hotplug_entry(entry, "data", None, "node1")
    assert (pending["phase"], pending["reason"], pending["message"]) == (
        "Pending",
        "FailedPvcNotFound",
        "PVC data not found",
    )
    assert pending["hotplugVolume"] == {}
    claim_pending = hotplug_entry(entry, "data", {"status": {"phase": "Pending"}}, "node1")
    assert claim_pending["message"] == "PVC is in phase ClaimPending"
    bound = {"status": {"phase": "Bound"}}
    assert hotplug_entry(entry, "data", bound, "")["phase"] == "Bound"
    assert hotplug_entry(entry, "data", bound, "node1")["phase"] == "AttachedToNode"
    ready = {**entry, "hotplugVolume": {}, "phase": "Ready", "reason": "VolumeReady", "message": "m"}
    assert hotplug_entry(ready, "data", bound, "node1") == ready


def test_volume_statuses_mark_hotpluggable_volumes_and_keep_a_leaving_one() -> None:
    vmi = {
        "metadata": {"namespace": "ns"},
        "spec": {
            "volumes": [{"name": "data", **PVC}, {"name": "hot", "dataVolume": {"name": "dv", "hotpluggable": True}}]
        },
        "status": {"nodeName": "n1", "volumeStatus": [{"name": "old", "hotplugVolume": {}, "phase": "Ready"}]},
    }
    claims = {"ns/dv": {"metadata": {"name": "dv"}, "spec": {}, "status": {"phase": "Bound"}}}
    statuses = {s["name"]: s for s in volume_statuses(vmi, claims.get)}
    assert "hotplugVolume" not in statuses["data"]
    assert statuses["hot"]["phase"] == "AttachedToNode" and statuses["hot"]["hotplugVolume"] == {}
    assert statuses["old"]["phase"] == "Ready"


# ------------------------------------------------------------------------------------------------ virt-handler


def _vmi(phase: str, in_spec: bool = True) -> dict[str, Any]:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data", "hotpluggable": True}}]
    return {
        "spec": {"volumes": volumes if in_spec else []},
        "status": {
            "volumeStatus": [{"name": "boot", "target": ""}, {"name": "data", "hotplugVolume": {}, "phase": phase}]
        },
    }


def test_the_handler_reports_mounted_then_ready_with_the_target() -> None:
    mounted = after_sync(_vmi("AttachedToNode"), {"data"}, {})
    data = mounted.statuses[1]
    assert (data["phase"], data["reason"]) == ("MountedToPod", "VolumeMountedToPod") and mounted.pending
    assert mounted.events == [("VolumeMountedToPod", "Volume data has been mounted in virt-launcher pod")]
    ready = after_sync(_vmi("MountedToPod"), {"data"}, {"data": "sda"})
    data = ready.statuses[1]
    assert (data["phase"], data["target"], data["message"]) == (
        "Ready",
        "sda",
        "Successfully attach hotplugged volume data to VM",
    )
    assert not ready.pending
    assert after_sync(_vmi("Ready"), {"data"}, {"data": "sda"}).events == []


def test_a_volume_leaving_the_spec_is_detaching_then_dropped_once_gone_from_the_domain() -> None:
    detaching = mark_detaching(_vmi("Ready", in_spec=False))
    assert detaching is not None and detaching.statuses[1]["phase"] == "Detaching"
    assert mark_detaching(_vmi("Ready")) is None
    still_there = after_sync(_vmi("Detaching", in_spec=False), set(), {"data": "sda"})
    assert still_there.pending and still_there.statuses[1]["phase"] == "Detaching"
    gone = after_sync(_vmi("Detaching", in_spec=False), set(), {})
    assert [s["name"] for s in gone.statuses] == ["boot"]
    assert gone.events == [("VolumeUnplugged", "Volume data has been unplugged")]


# ------------------------------------------------------------------------------------------------ launcher


def _launcher_vmi(phase: str) -> dict[str, Any]:
    vmi = _vmi(phase)
    vmi["metadata"] = {"name": "vm", "namespace": "ns"}
    vmi["spec"]["domain"] = {"devices": {"disks": [{"name": "data", "disk": {"bus": "scsi"}, "serial": "data"}]}}
    return vmi


def test_the_launcher_attaches_what_is_mounted_and_ready_and_detaches_hotplugged_disks_no_longer_wanted() -> None:
    live = [
        LiveDisk("boot", "vda", "virtio", None, "/pvc/boot/disk.img"),
        LiveDisk("old", "sda", "scsi", 0, "/run/x/hotplug-disks/old.img"),
    ]
    steps = plan(_launcher_vmi("MountedToPod"), {"data"}, live, "/run/x/hotplug-disks")
    assert (steps.attach, steps.detach) == (("data",), ("old",))
    # Not mounted yet, or still AttachedToNode: nothing to attach; a permanent disk is never detached.
    assert plan(_launcher_vmi("AttachedToNode"), {"data"}, live[:1], "/run/x/hotplug-disks").attach == ()
    assert plan(_launcher_vmi("MountedToPod"), set(), live[:1], "/run/x/hotplug-disks").attach == ()


def test_the_hotplugged_disk_takes_a_target_and_scsi_unit_the_domain_does_not_use() -> None:
    live = [LiveDisk("cd", "sda", "sata", None, "/x.iso"), LiveDisk("old", "sdb", "scsi", 1, "/h/old.img")]
    xml = disk_xml(_launcher_vmi("MountedToPod"), "data", ConverterContext(share_dir="/run/x"), live)
    disk = ET.fromstring(xml)
    assert disk.find("target").attrib == {"bus": "scsi", "dev": "sdc"}
    assert disk.find("address").attrib == {"type": "drive", "controller": "0", "bus": "0", "unit": "2"}
    assert disk.find("source").get("file") == "/run/x/hotplug-disks/data.img"
    assert disk.find("serial").text == "data" and disk.find("alias").get("name") == "ua-data"


def test_hotplugged_volumes_do_not_make_a_restart_required() -> None:
    spec = _spec({"name": "boot", "emptyDisk": {"capacity": "1Gi"}})
    with_hotplug = apply_patch({"spec": spec}, spec_patch("", spec, parse_add(_add())))["spec"]
    assert without_hotplug_volumes(with_hotplug) == spec
    # Another change still counts.
    spec_changed = {**spec, "volumes": [{"name": "boot", "emptyDisk": {"capacity": "2Gi"}}]}
    assert without_hotplug_volumes(spec_changed) != spec


def test_the_api_is_served_while_either_hotplug_gate_is_on() -> None:
    assert hotplug_enabled(ClusterConfig())  # DeclarativeHotplugVolumes is Beta: on by default
    off = ClusterConfig(disabled_feature_gates=frozenset({"DeclarativeHotplugVolumes"}))
    assert not hotplug_enabled(off)
    assert hotplug_enabled(replace(off, feature_gates=frozenset({"HotplugVolumes"})))
    assert HOTPLUG_NOT_ENABLED == "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API."
