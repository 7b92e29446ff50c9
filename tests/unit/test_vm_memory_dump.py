"""A VM's memory dump request moved along by what its template and VMI show (KubeVirt's memorydump.UpdateRequest),
virt-handler's volume phases for the dump, and the VMI's volume status entry of a memoryDump volume."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.vm_memory_dump import has_completed, updated_request, with_volume, without_volume
from pykubevirt.controller.vmi_from_vm import vmi_from_vm
from pykubevirt.controller.volume_status import is_hotplug_volume, volume_statuses, without_hotplug_volumes
from pykubevirt.handler import memory_dump as handler_dump
from pykubevirt.handler.hotplug import StatusUpdate

DUMP_VOLUME = {"name": "dump", "memoryDump": {"claimName": "dump", "hotpluggable": True}}


def vm(request: dict[str, Any] | None, *, with_dump_volume: bool = False) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "root", "containerDisk": {"image": "x"}}]
    if with_dump_volume:
        volumes.append(dict(DUMP_VOLUME))
    status = {"memoryDumpRequest": request} if request is not None else {}
    return {
        "metadata": {"name": "vm", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {"template": {"spec": {"domain": {"devices": {}}, "volumes": volumes}}},
        "status": status,
    }


def vmi(*statuses: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "vm", "namespace": "ns"}, "status": {"volumeStatus": list(statuses)}}


def test_associating_waits_for_the_template_then_is_in_progress() -> None:
    request = {"claimName": "dump", "phase": "Associating"}
    assert updated_request(vm(request), None) == request
    assert updated_request(vm(request, with_dump_volume=True), None) == {**request, "phase": "InProgress"}


def test_in_progress_follows_the_vmis_volume_until_completed_or_failed() -> None:
    request = {"claimName": "dump", "phase": "InProgress"}
    started = {"claimName": "dump", "targetFileName": "vm-dump-1.memory.dump", "startTimestamp": "T1"}
    running = vmi({"name": "dump", "phase": "MemoryDumpInProgress", "memoryDumpVolume": started})
    assert updated_request(vm(request, with_dump_volume=True), running) == {**request, "startTimestamp": "T1"}
    done = vmi({"name": "dump", "phase": "MemoryDumpCompleted", "memoryDumpVolume": {**started, "endTimestamp": "T2"}})
    assert updated_request(vm(request, with_dump_volume=True), done) == {
        "claimName": "dump",
        "phase": "Unmounting",
        "startTimestamp": "T1",
        "endTimestamp": "T2",
        "fileName": "vm-dump-1.memory.dump",
    }
    failed = vmi(
        {
            "name": "dump",
            "phase": "MemoryDumpFailed",
            "message": "Memory dump to pvc dump failed: no room",
            "memoryDumpVolume": {**started, "endTimestamp": "T2"},
        }
    )
    result = updated_request(vm(request, with_dump_volume=True), failed)
    assert result is not None
    assert (result["phase"], result["message"], result["endTimestamp"]) == (
        "Failed",
        "Memory dump to pvc dump failed: no room",
        "T2",
    )
    assert "fileName" not in result


def test_unmounting_completes_once_the_volume_left_the_vmi_and_completed_stays() -> None:
    request = {"claimName": "dump", "phase": "Unmounting", "fileName": "f"}
    mounted = vmi({"name": "dump", "phase": "MemoryDumpCompleted", "memoryDumpVolume": {}})
    assert updated_request(vm(request, with_dump_volume=True), mounted) == request
    assert updated_request(vm(request, with_dump_volume=True), vmi()) == {**request, "phase": "Completed"}
    completed = {"claimName": "dump", "phase": "Completed", "fileName": "f"}
    assert updated_request(vm(completed, with_dump_volume=True), None) == completed
    assert has_completed(vm(completed)) and has_completed(vm(request))
    assert not has_completed(vm({"claimName": "dump", "phase": "InProgress"})) and not has_completed(vm(None))


def test_a_removal_goes_once_neither_the_vmi_nor_the_template_has_the_volume() -> None:
    request = {"claimName": "dump", "phase": "Dissociating", "remove": True}
    assert updated_request(vm(request, with_dump_volume=True), vmi()) == request
    assert updated_request(vm(request), vmi({"name": "dump", "memoryDumpVolume": {}})) == request
    assert updated_request(vm(request), vmi()) is None


def test_the_volume_is_added_once_and_removed() -> None:
    spec: dict[str, Any] = {"volumes": []}
    with_volume(spec, "dump")
    with_volume(spec, "dump")
    assert spec["volumes"] == [DUMP_VOLUME]
    without_volume(spec, "dump")
    assert spec["volumes"] == []


def test_a_completed_dumps_volume_is_not_in_the_next_vmi_and_an_unfinished_ones_is() -> None:
    completed = vm({"claimName": "dump", "phase": "Completed"}, with_dump_volume=True)
    assert [v["name"] for v in vmi_from_vm(completed, ClusterConfig())["spec"]["volumes"]] == ["root"]
    unfinished = vm({"claimName": "dump", "phase": "InProgress"}, with_dump_volume=True)
    assert [v["name"] for v in vmi_from_vm(unfinished, ClusterConfig())["spec"]["volumes"]] == ["root", "dump"]


def test_a_memory_dump_volume_is_a_hotplugged_claim_with_its_dump_entry() -> None:
    assert is_hotplug_volume(DUMP_VOLUME)
    spec = {"domain": {"devices": {"disks": [{"name": "root"}]}}, "volumes": [{"name": "root"}, DUMP_VOLUME]}
    assert without_hotplug_volumes(spec)["volumes"] == [{"name": "root"}]
    running = {
        "metadata": {"namespace": "ns"},
        "spec": {"volumes": [DUMP_VOLUME]},
        "status": {"nodeName": "node01"},
    }
    pvc = {"metadata": {"name": "dump"}, "spec": {}, "status": {"phase": "Bound"}}
    (entry,) = volume_statuses(running, {"ns/dump": pvc}.get)
    assert entry["memoryDumpVolume"] == {"claimName": "dump"}
    assert entry["phase"] == "AttachedToNode" and entry["hotplugVolume"] == {}
    assert entry["persistentVolumeClaimInfo"]["claimName"] == "dump"
    # virt-handler's phases for the dump are its own: the controller keeps them.
    mine = {**running, "status": {**running["status"], "volumeStatus": [{**entry, "phase": "MemoryDumpCompleted"}]}}
    assert volume_statuses(mine, {"ns/dump": pvc}.get)[0]["phase"] == "MemoryDumpCompleted"


def test_the_handler_names_the_file_then_follows_the_launchers_dump() -> None:
    now = datetime(2026, 12, 7, 13, 45, 1, tzinfo=UTC)
    mounted = {"name": "dump", "phase": "MountedToPod", "hotplugVolume": {}, "memoryDumpVolume": {"claimName": "dump"}}
    update = StatusUpdate([dict(mounted)])
    handler_dump.follow(update, "vm", None, now)
    (entry,) = update.statuses
    assert entry["phase"] == "MemoryDumpInProgress" and update.pending
    assert entry["memoryDumpVolume"]["targetFileName"] == "vm-dump-20261207-134501.memory.dump"
    assert update.events == [("VolumeMountedToPod", "Memory dump Volume dump is attached, getting memory dump")]
    assert handler_dump.requested_files({"status": {"volumeStatus": [entry]}}) == {
        "dump": "vm-dump-20261207-134501.memory.dump"
    }

    # Another file's result (an earlier dump) says nothing of this one.
    update = StatusUpdate([dict(entry)])
    handler_dump.follow(update, "vm", {"fileName": "old.memory.dump", "completed": True}, now)
    assert update.statuses[0]["phase"] == "MemoryDumpInProgress" and update.pending

    result = {"fileName": "vm-dump-20261207-134501.memory.dump", "startTimestamp": "T1"}
    update = StatusUpdate([dict(entry)])
    handler_dump.follow(update, "vm", result, now)
    assert update.statuses[0]["memoryDumpVolume"]["startTimestamp"] == "T1" and update.pending
    update = StatusUpdate([dict(entry)])
    handler_dump.follow(update, "vm", {**result, "completed": True, "endTimestamp": "T2"}, now)
    done = update.statuses[0]
    assert (done["phase"], done["reason"], done["message"]) == (
        "MemoryDumpCompleted",
        "VolumeReady",
        "Memory dump to Volume dump has completed successfully",
    )
    assert done["memoryDumpVolume"]["endTimestamp"] == "T2"
    update = StatusUpdate([dict(done)])
    handler_dump.follow(update, "vm", {**result, "completed": True}, now)
    assert not update.pending and not update.events
