"""The pure parts of VM snapshots and restores: status rules, names, restored claims and VMs (plain data)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.api.generated_names import fnv32a, generated_name
from pykubevirt.controller import vm_restore_plan as plan
from pykubevirt.controller import vm_snapshot_status as st
from pykubevirt.controller.vm_snapshot_source import claim_problem, volume_claims
from pykubevirt.controller.vmi_from_vm import legacy_firmware_uuid
from pykubevirt.controller.volume_snapshot_class import AmbiguousSnapshotClass, snapshot_class_name
from pykubevirt.controller.volume_snapshot_statuses import VolumeSnapshotStatuses

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def snapshot(**spec: Any) -> dict[str, Any]:
    created = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "snap", "namespace": "ns", "uid": "u1", "creationTimestamp": created},
        "spec": {"source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}, **spec},
    }


def vm(volumes: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid"},
        "spec": {"template": {"spec": {"domain": {"devices": {}}, "volumes": volumes}}, **spec},
    }


def test_names_follow_kubevirt() -> None:
    assert st.content_name(snapshot()) == "vmsnapshot-content-u1"
    assert st.content_name({**snapshot(), "status": {"virtualMachineSnapshotContentName": "other"}}) == "other"
    assert st.volume_snapshot_name(snapshot(), "disk") == "vmsnapshot-u1-volume-disk"


def test_deadline_counts_from_creation_and_zero_means_none() -> None:
    assert not st.deadline_exceeded(snapshot(), NOW)
    assert st.deadline_exceeded(snapshot(failureDeadline="30s"), NOW)
    assert not st.deadline_exceeded(snapshot(failureDeadline="0s"), NOW)
    done = {**snapshot(failureDeadline="30s"), "status": {"phase": "Succeeded"}}
    assert not st.deadline_exceeded(done, NOW)
    assert st.deadline_exceeded({**snapshot(), "status": {"phase": "Failed"}}, NOW)


def test_source_is_unlocked_when_done_or_when_going_with_its_content_gone() -> None:
    running = snapshot()
    assert not st.can_unlock_source(running, None, NOW)
    assert st.can_unlock_source({**running, "status": {"phase": "Succeeded"}}, None, NOW)
    going = {**running, "metadata": {**running["metadata"], "deletionTimestamp": "x"}}
    ready_content = {"status": {"readyToUse": True}}
    assert not st.can_unlock_source(going, ready_content, NOW)  # Delete policy: the content must go first
    retained = {**going, "spec": {**going["spec"], "deletionPolicy": "Retain"}}
    assert st.can_unlock_source(retained, ready_content, NOW)


@pytest.mark.parametrize(
    ("online", "paused", "agent", "expected"),
    [
        (False, False, False, []),
        (True, False, False, ["NoGuestAgent", "Online"]),
        (True, False, True, ["GuestAgent", "Online"]),
        (True, True, True, ["Online", "Paused"]),
    ],
)
def test_indications(online: bool, paused: bool, agent: bool, expected: list[str]) -> None:
    indications, sources = st.source_indications([], online=online, paused=paused, guest_agent=agent)
    assert indications == expected
    assert [s["indication"] for s in sources] == expected
    assert all(s["message"] == st.INDICATION_MESSAGES[s["indication"]] for s in sources)


def test_a_guest_that_could_not_hold_its_freeze_makes_the_snapshot_say_quiesce_timeout() -> None:
    # Windows' VSS holds a freeze for 10 s at most; its agent then answers the thaw with this error, which the content
    # and the snapshot carry while the content is retried.
    error = (
        "unfreeze failed: internal error: unable to execute QEMU agent command 'guest-fsfreeze-thaw': "
        "fsfreeze is limited up to 10 seconds"
    )
    indications, sources = st.source_indications([], online=True, paused=False, guest_agent=True, error=error)
    assert indications == ["GuestAgent", "Online", "QuiesceTimeout"]
    assert sources[2]["message"].startswith("Guest agent quiesced the filesystem, but the freeze window timed out")
    # It stays once the retry succeeded and the error is gone.
    again, _ = st.source_indications(indications, online=True, paused=False, guest_agent=True, error="")
    assert "QuiesceTimeout" in again
    # Other errors, or no agent to quiesce with, say nothing of it.
    assert "QuiesceTimeout" not in st.source_indications([], online=True, paused=False, guest_agent=True, error="x")[0]
    assert (
        "QuiesceTimeout" not in st.source_indications([], online=True, paused=False, guest_agent=False, error=error)[0]
    )


def test_content_outcome_reports_kubevirts_errors() -> None:
    statuses = [{"volumeSnapshotName": "a", "creationTime": "t", "readyToUse": True}]
    assert st.content_outcome(statuses, [], []) == (True, True, "")
    assert st.content_outcome(statuses, ["a", "b"], []) == (False, False, "VolumeSnapshots (a,b) missing")
    assert st.content_outcome(statuses, [], ["a"])[2] == "VolumeSnapshots (a) skipped because vm snapshot is deleted"
    pending = [{"volumeSnapshotName": "a", "error": {"message": "boom"}}]
    assert st.content_outcome(pending, [], []) == (False, False, "VolumeSnapshot a error: boom")


def test_condition_keeps_its_time_while_unchanged() -> None:
    conditions = [st.condition(st.READY, False, "Not ready", "t0")]
    st.update_condition(conditions, st.condition(st.READY, False, "Not ready", "t1"))
    assert conditions[0]["lastTransitionTime"] == "t0"
    st.update_condition(conditions, st.condition(st.READY, True, "Ready", "t2"))
    assert conditions == [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "t2"}]


def test_volume_claims_and_their_problems() -> None:
    volumes = [
        {"name": "root", "dataVolume": {"name": "root-dv"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
        {"name": "cd", "containerDisk": {"image": "x"}},
    ]
    assert volume_claims(vm(volumes)) == {"root": "root-dv", "data": "data-pvc"}
    bound = {"metadata": {"name": "p"}, "status": {"phase": "Bound"}}
    assert claim_problem(None, None, "p") == "volume doesnt exist: p"
    assert claim_problem({"metadata": {}, "status": {"phase": "Pending"}}, None, "p") == "volume not bound: p"
    assert claim_problem(bound, {"status": {"phase": "ImportInProgress"}}, "p") == "volume not populated: p"
    assert claim_problem(bound, {"status": {"phase": "Succeeded"}}, "p") == ""


def test_snapshot_class_by_driver_then_default() -> None:
    sc = {"provisioner": "d1"}
    one = {"metadata": {"name": "a"}, "driver": "d1"}
    other = {"metadata": {"name": "b"}, "driver": "d2"}
    default = {"metadata": {"name": "c", "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"}}}
    default["driver"] = "d1"
    assert snapshot_class_name("local", sc, [one, other]) == "a"
    assert snapshot_class_name("local", sc, [other]) == ""
    assert snapshot_class_name("local", None, [one]) == ""
    assert snapshot_class_name("local", sc, [one, default]) == "c"
    with pytest.raises(AmbiguousSnapshotClass, match="2 matching VolumeSnapshotClasses for local"):
        snapshot_class_name("local", sc, [one, {**one, "metadata": {"name": "z"}}])


def restore(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "r", "namespace": "ns", "uid": "ru"},
        "spec": {"target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}, **spec},
    }


def test_restored_names() -> None:
    assert plan.restored_volume_name(restore(), "disk", "pvc") == "restore-ru-disk"
    assert plan.restored_volume_name(restore(volumeRestorePolicy="InPlace"), "disk", "pvc") == "pvc"
    assert plan.restored_volume_name(restore(volumeRestorePolicy="PrefixTargetName"), "disk", "pvc") == "vm-disk"
    overridden = restore(volumeRestoreOverrides=[{"volumeName": "disk", "restoreName": "mine"}])
    assert plan.restored_volume_name(overridden, "disk", "pvc") == "mine"
    assert fnv32a("a") == "e40c292c"  # FNV-1a's published test vector
    long = generated_name("v" * 60, "disk")
    assert len(long) == 63 and long.endswith("-disk") and long.startswith("v" * 49 + "-")


def test_restored_claim_comes_from_the_volume_snapshot() -> None:
    backup = {
        "volumeName": "disk",
        "volumeSnapshotName": "vs",
        "persistentVolumeClaim": {
            "metadata": {
                "name": "pvc",
                "labels": {"app": "x", "persistent-state-for": "vm"},
                "annotations": {"pv.kubernetes.io/bound-by-controller": "yes", "keep": "me"},
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "local",
            },
        },
    }
    claim = plan.restore_claim(restore(), "restore-ru-disk", backup, {"status": {"restoreSize": "2Gi"}}, vm([]))
    reference = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "vs"}
    assert claim["spec"]["dataSource"] == reference == claim["spec"]["dataSourceRef"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["storageClassName"] == "local"
    assert claim["metadata"]["labels"] == {
        "app": "x",
        "restore.kubevirt.io/source-vm-name": "vm",
        "restore.kubevirt.io/source-vm-namespace": "ns",
    }
    assert claim["metadata"]["annotations"] == {
        "keep": "me",
        "restore.kubevirt.io/name": "r",
        "restore.kubevirt.io/lastRestoreUID": "r-ru",
    }
    smaller = plan.restore_claim(restore(), "x", backup, {"status": {"restoreSize": "512Mi"}}, vm([]))
    assert smaller["spec"]["resources"]["requests"]["storage"] == "1Gi"


def test_restored_vm_runs_on_the_restored_claims_and_is_stopped() -> None:
    snapshot_vm = vm(
        [
            {"name": "root", "dataVolume": {"name": "root-dv"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
            {"name": "dump", "memoryDump": {"claimName": "dump-pvc"}},
        ],
        runStrategy="Always",
        dataVolumeTemplates=[{"metadata": {"name": "root-dv"}, "spec": {"source": {"blank": {}}}}],
    )
    r = restore()
    r["status"] = {
        "restores": [
            {"volumeName": "root", "persistentVolumeClaim": "restore-ru-root", "dataVolumeName": "restore-ru-root"},
            {"volumeName": "data", "persistentVolumeClaim": "restore-ru-data"},
        ]
    }
    new = plan.restored_vm(r, snapshot_vm, None)
    template = new["spec"]["template"]["spec"]
    assert new["spec"]["runStrategy"] == "Halted"
    assert [v["name"] for v in template["volumes"]] == ["root", "data"]
    assert template["volumes"][0]["dataVolume"]["name"] == "restore-ru-root"
    assert template["volumes"][1]["persistentVolumeClaim"]["claimName"] == "restore-ru-data"
    assert new["spec"]["dataVolumeTemplates"][0]["metadata"]["name"] == "restore-ru-root"
    assert new["metadata"]["annotations"]["restore.kubevirt.io/lastRestoreUID"] == "r-ru"
    assert template["domain"]["firmware"]["uuid"] == legacy_firmware_uuid("vm")
    target = vm([], running=True)
    existing = plan.restored_vm(r, snapshot_vm, target)
    assert existing["spec"]["running"] is False and "runStrategy" not in existing["spec"]
    assert plan.deleted_data_volumes(vm([], dataVolumeTemplates=[{"metadata": {"name": "old"}}]), new) == ["old"]


def test_volume_snapshot_statuses_say_why_a_volume_cannot_be_snapshotted() -> None:
    claims = {
        "ns/data-pvc": {"spec": {"storageClassName": "local"}},
        "ns/root-dv": {"spec": {"storageClassName": "plain"}},
    }
    statuses = VolumeSnapshotStatuses(claims.get, {}.get, lambda sc: "local-snapshots" if sc == "local" else "")
    machine = vm(
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
            {"name": "root", "dataVolume": {"name": "root-dv"}},
            {"name": "gone", "persistentVolumeClaim": {"claimName": "missing"}},
            {"name": "cd", "containerDisk": {"image": "x"}},
        ]
    )
    assert statuses(machine) == [
        {"name": "data", "enabled": True},
        {
            "name": "root",
            "enabled": False,
            "reason": "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass "
            "[plain] [root]",
        },
        {"name": "gone", "enabled": False, "reason": "PVC not found"},
        {"name": "cd", "enabled": False, "reason": "Snapshot is not supported for this volumeSource type [cd]"},
    ]
