"""The VMIM controller's phase decisions and target pod, and the handler's LiveMigratable condition. Pure parts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pykubevirt.api import backend_storage as bs
from pykubevirt.api import constants as c
from pykubevirt.controller.launcher_pod import LauncherSettings
from pykubevirt.controller.migration_controller import MigrationController, target_pod
from pykubevirt.handler.live_migratable import INTERFACE_MESSAGE, live_migratable, migration_method
from pykubevirt.handler.migration_source import migrate_request, this_migration
from tests.support.launcher_process import defaulted_vmi

NOW = "2026-12-02T03:00:00Z"


class Items:
    """An informer's reads, from a list."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self._items = items

    def items(self) -> list[dict[str, Any]]:
        return self._items

    def get(self, key: str) -> dict[str, Any] | None:
        return next(
            (i for i in self._items if f"{i['metadata'].get('namespace')}/{i['metadata']['name']}" == key), None
        )


def vmim(phase: str = "", uid: str = "m1", name: str = "mig") -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": uid}
    return {"metadata": meta, "spec": {"vmiName": "testvmi"}, "status": {"phase": phase} if phase else {}}


def running_vmi(**state: Any) -> dict[str, Any]:
    vmi = defaulted_vmi("testvmi", "v1")
    vmi["status"] = {"phase": "Running", "nodeName": "node01"}
    if state:
        vmi["status"]["migrationState"] = state
    return vmi


def controller(migrations: list[dict[str, Any]]) -> MigrationController:
    return MigrationController(
        None,  # type: ignore[arg-type]
        migrations=Items(migrations),  # type: ignore[arg-type]
        vmis=Items([]),  # type: ignore[arg-type]
        pods=Items([]),  # type: ignore[arg-type]
        recorder=None,  # type: ignore[arg-type]
        settings=LauncherSettings,
    )


READY_POD = {
    "metadata": {"name": "virt-launcher-testvmi-x", "uid": "p2"},
    "spec": {"nodeName": "node02"},
    "status": {"phase": "Running", "containerStatuses": [{"name": "compute", "state": {"running": {}}}]},
}


def test_phases_follow_the_target_pod_and_the_vmis_migration_state() -> None:
    ctl = controller([vmim()])
    vmi = running_vmi()
    assert ctl._next(vmim(), vmi, None) == "phase:Pending"
    assert ctl._next(vmim("Pending"), vmi, None) == "create-pod"
    assert ctl._next(vmim("Pending"), vmi, READY_POD) == "phase:Scheduling"
    assert ctl._next(vmim("Scheduling"), vmi, {**READY_POD, "status": {"phase": "Pending"}}) == "wait"
    assert ctl._next(vmim("Scheduling"), vmi, READY_POD) == "phase:Scheduled"
    assert ctl._next(vmim("Scheduled"), vmi, READY_POD) == "handoff"
    handed = running_vmi(migrationUid="m1", targetNode="node02")
    assert ctl._next(vmim("PreparingTarget"), handed, READY_POD) == "wait"
    listening = running_vmi(migrationUid="m1", targetNode="node02", targetNodeAddress="127.0.0.3")
    assert ctl._next(vmim("PreparingTarget"), listening, READY_POD) == "phase:TargetReady"
    started = running_vmi(migrationUid="m1", targetNodeAddress="127.0.0.3", startTimestamp=NOW)
    assert ctl._next(vmim("TargetReady"), started, READY_POD) == "phase:Running"
    assert ctl._next(vmim("Running"), {**started}, READY_POD) == "wait"
    done = running_vmi(migrationUid="m1", startTimestamp=NOW, completed=True)
    assert ctl._next(vmim("Running"), done, None) == "phase:Succeeded"


def test_failures_carry_kubevirts_messages() -> None:
    ctl = controller([vmim(), vmim("Running", uid="m0", name="other")])
    assert ctl._next(vmim(), running_vmi(), None) == (
        "fail:VMI is not eligible for migration because another migration job is in progress."
    )
    assert ctl._next(vmim("Pending"), None, None) == "fail:Migration failed because vmi does not exist."
    failed = running_vmi(migrationUid="m1", startTimestamp=NOW, failed=True)
    assert ctl._next(vmim("Running"), failed, READY_POD) == "fail:source node reported migration failed"
    assert ctl._next(vmim("Running"), running_vmi(), READY_POD) == (
        "fail:VMI's migration state was cleared during the active migration."
    )
    assert ctl._next(vmim("Scheduling"), running_vmi(), None) == (
        "fail:Migration target pod was removed during active migration."
    )
    # A target launcher that dies while the source sends fails the migration (KubeVirt checks the pod in every phase).
    sending = running_vmi(migrationUid="m1", targetNodeAddress="127.0.0.3", startTimestamp=NOW)
    dead = {
        **READY_POD,
        "status": {"phase": "Running", "containerStatuses": [{"name": "compute", "state": {"terminated": {}}}]},
    }
    assert ctl._next(vmim("Running"), sending, dead) == (
        "fail:Migration failed because target pod shutdown during migration"
    )
    assert ctl._next(vmim("Running"), sending, None) == "fail:Migration target pod was removed during active migration."


def test_a_target_pod_just_created_is_awaited_not_taken_for_removed() -> None:
    # The pod informer may show the new target pod after the migration's own update (KubeVirt's pod expectations).
    ctl = controller([vmim("Scheduling")])
    ctl._created.add("m1")
    assert ctl._next(vmim("Scheduling"), running_vmi(), None) == "wait"


def test_the_target_pod_is_labelled_for_the_job_and_kept_off_the_source_node() -> None:
    vmi = running_vmi()
    pod = target_pod(vmi, vmim(), LauncherSettings())
    assert pod["metadata"]["labels"][c.MIGRATION_JOB_UID_LABEL] == "m1"
    assert pod["metadata"]["annotations"]["kubevirt.io/migrationJobName"] == "mig"
    anti = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti == {
        "labelSelector": {"matchLabels": {c.CREATED_BY_LABEL: "v1"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    # That rule alone keeps it off the source node, as in KubeVirt (no node affinity names it).
    assert "node01" not in json.dumps(pod["spec"]["affinity"].get("nodeAffinity"))
    # A VMI's own anti-affinity stays, the migration's rule after it.
    own = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
    vmi["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [own]}}
    rules = target_pod(vmi, vmim(), LauncherSettings())["spec"]["affinity"]["podAntiAffinity"]
    assert rules["requiredDuringSchedulingIgnoredDuringExecution"] == [own, anti]
    compute = next(x for x in pod["spec"]["containers"] if x["name"] == c.LAUNCHER_COMPUTE_CONTAINER)
    assert compute["args"][-1] == "--migration-target"


def test_live_migratable_reasons() -> None:
    vmi = defaulted_vmi("testvmi", "v1")
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    assert live_migratable(vmi, NOW) == {"type": "LiveMigratable", "status": "True", "lastTransitionTime": NOW}
    assert migration_method(vmi) == "BlockMigration"
    bridged = defaulted_vmi("testvmi", "v1")
    bridged["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "bridge": {}}]
    bridged["spec"]["networks"] = [{"name": "default", "pod": {}}]
    condition = live_migratable(bridged, NOW)
    assert condition["reason"] == "InterfaceNotLiveMigratable" and condition["message"] == INTERFACE_MESSAGE
    claim = defaulted_vmi("testvmi", "v1")
    claim["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    claim["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "pvc1"}})
    claim["status"] = {
        "volumeStatus": [{"name": "data", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteOnce"]}}]
    }
    condition = live_migratable(claim, NOW)
    assert condition["reason"] == "DisksNotLiveMigratable"
    assert condition["message"].startswith("cannot migrate VMI: PVC pvc1 is not shared")


def test_the_source_sends_everything_through_its_handlers_unix_sockets() -> None:
    vmi = running_vmi()
    vmi["status"]["migrationMethod"] = "BlockMigration"
    state = {"migrationUid": "m1", "targetNodeAddress": "127.0.0.3"}
    state["targetDirectMigrationNodePorts"] = {"4001": 0, "4002": 49153}
    assert migrate_request(vmi, state) == {
        "migrationUid": "m1",
        "targetUri": "qemu+unix:///system?socket=/run/pkv/mp/v1-source.sock",
        "migrationUri": "unix:///run/pkv/mp/v1-49152-source.sock",
        "disksUri": "unix:///run/pkv/mp/v1-49153-source.sock",
        "blockMigration": True,
    }
    # Claims stay where they are (KubeVirt migrates only ReadWriteMany ones): the launcher copies none of them.
    vmi["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "shared"}})
    assert migrate_request(vmi, state)["sharedVolumes"] == ["data"]


def test_the_source_handler_reads_only_the_current_outgoing_migration_of_its_launcher() -> None:
    state = {"migrationUid": "m2", "targetNodeAddress": "127.0.0.3"}
    # The pod the last migration made reports how the domain came in: not this migration, which has not started.
    assert this_migration({"role": "target", "state": "Succeeded", "completed": True}, state) == {}
    assert this_migration({"role": "source", "migrationUid": "m1", "state": "Succeeded"}, state) == {}
    running = {"role": "source", "migrationUid": "m2", "state": "Running"}
    assert this_migration(running, state) == running
    # A launcher from before the uid was echoed: its outgoing migration is the one it reports.
    assert this_migration({"role": "source", "state": "Running"}, state) == {"role": "source", "state": "Running"}


def test_a_migration_waits_while_the_parallelism_limits_are_reached() -> None:
    others = [vmim("Running", uid=f"o{i}", name=f"other{i}") for i in range(2)]
    for other in others:
        other["spec"]["vmiName"] = "busy"
    ctl = controller([vmim("Pending"), *others])
    busy = running_vmi()
    busy["metadata"]["name"] = "busy"
    ctl.vmis = Items([busy])  # type: ignore[assignment]
    # Two outgoing migrations from node01 already: parallelOutboundMigrationsPerNode is 2.
    assert ctl._next(vmim("Pending"), running_vmi(), None) == "wait"
    busy["status"]["nodeName"] = "node02"
    assert ctl._next(vmim("Pending"), running_vmi(), None) == "create-pod"


def test_a_target_pod_that_cannot_be_scheduled_fails_the_migration_after_kubevirts_timeout() -> None:
    ctl = controller([vmim("Scheduling")])
    pending = {
        "metadata": {"name": "virt-launcher-testvmi-x", "namespace": "default", "creationTimestamp": NOW},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    ctl.clock = lambda: "2026-12-02T03:04:00Z"  # type: ignore[method-assign]
    assert ctl._next(vmim("Scheduling"), running_vmi(), pending) == "unschedulable"
    ctl.clock = lambda: "2026-12-02T03:05:01Z"  # type: ignore[method-assign]
    # KubeVirt deletes the timed-out pod; the migration then fails as one whose target pod was removed.
    assert ctl._next(vmim("Scheduling"), running_vmi(), pending) == (
        "delete-pod:unschedulable pod default/virt-launcher-testvmi-x timeout period exceeded"
    )
    assert ctl._next(vmim("Scheduling"), running_vmi(), None) == (
        "fail:Migration target pod was removed during active migration."
    )
    quick = vmim("Scheduling")
    quick["metadata"]["annotations"] = {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "30"}
    ctl.clock = lambda: "2026-12-02T03:00:31Z"  # type: ignore[method-assign]
    assert ctl._next(quick, running_vmi(), pending).startswith("delete-pod:unschedulable pod")


def test_the_migration_method_is_live_when_nothing_needs_copying() -> None:
    # KubeVirt's checkVolumesForMigration: shared claims, shared hostDisks and read-only CD-ROMs stay in place.
    vmi = defaulted_vmi(
        "testvmi",
        "v1",
        domain={
            "devices": {
                "disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "host", "disk": {"bus": "virtio"}},
                    {"name": "cloudinit", "cdrom": {"bus": "sata"}},
                ]
            }
        },
        volumes=[
            {"name": "root", "persistentVolumeClaim": {"claimName": "shared"}},
            {"name": "host", "hostDisk": {"path": "/srv/disk.img", "type": "Disk", "shared": True}},
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
        ],
    )
    vmi["status"] = {
        "volumeStatus": [{"name": "root", "persistentVolumeClaimInfo": {"accessModes": ["ReadWriteMany"]}}]
    }
    assert migration_method(vmi) == "LiveMigration"
    assert migrate_request(vmi, {})["sharedVolumes"] == ["root", "host"]
    # A writable CD-ROM is copied like a disk.
    vmi["spec"]["domain"]["devices"]["disks"][2]["cdrom"]["readonly"] = False
    assert migration_method(vmi) == "BlockMigration"


def persistent_state_vmi(access_modes: list[str] | None) -> dict[str, Any]:
    """A running VMI with persistent EFI and TPM; its backend-storage claim recorded with `access_modes` (None: not
    recorded yet)."""
    vmi = running_vmi()
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    vmi["spec"]["domain"]["firmware"] = {"bootloader": {"efi": {"persistent": True}}}
    vmi["spec"]["domain"]["devices"]["tpm"] = {"persistent": True}
    if access_modes is not None:
        info = {"claimName": "persistent-state-for-testvmi-abcde", "accessModes": access_modes}
        vmi["status"]["volumeStatus"] = [
            {"name": "persistent-state-for-this-vm", "target": "", "persistentVolumeClaimInfo": info}
        ]
    return vmi


def test_persistent_state_on_a_claim_that_is_not_read_write_many_is_not_live_migratable() -> None:
    condition = live_migratable(persistent_state_vmi(["ReadWriteOnce"]), NOW)
    assert condition == {
        "type": "LiveMigratable",
        "status": "False",
        "reason": "DisksNotLiveMigratable",
        "message": "cannot migrate VMI: Backend storage PVC is not RWX",
        "lastTransitionTime": NOW,
    }
    # On a shared (RWX) claim, or before the claim is recorded, the state does not stand in the way.
    assert live_migratable(persistent_state_vmi(["ReadWriteMany"]), NOW)["status"] == "True"
    assert live_migratable(persistent_state_vmi(None), NOW)["status"] == "True"
    # The claim is no disk: what is copied is decided by the VMI's volumes alone.
    assert migration_method(persistent_state_vmi(["ReadWriteOnce"])) == migration_method(running_vmi())


def test_a_migration_of_persistent_state_waits_for_its_claim_and_refuses_one_it_cannot_share() -> None:
    ctl = controller([vmim("Pending")])
    assert ctl._next(vmim("Pending"), persistent_state_vmi(None), None) == "wait"
    assert ctl._next(vmim("Pending"), persistent_state_vmi(["ReadWriteOnce"]), None) == (
        "fail:cannot migrate VMI: Backend storage PVC is not RWX"
    )
    assert ctl._next(vmim("Pending"), persistent_state_vmi(["ReadWriteMany"]), None) == "create-pod"


def test_the_target_pod_mounts_the_shared_claim_of_the_persistent_state() -> None:
    vmi = persistent_state_vmi(["ReadWriteMany"])
    pod = target_pod(vmi, vmim(), LauncherSettings(), backend_claim="persistent-state-for-testvmi-abcde")
    state = next(v for v in pod["spec"]["volumes"] if v["name"] == "vm-state")
    assert state["persistentVolumeClaim"]["claimName"] == "persistent-state-for-testvmi-abcde"
    compute = next(x for x in pod["spec"]["containers"] if x["name"] == c.LAUNCHER_COMPUTE_CONTAINER)
    sub_paths = {m.get("subPath") for m in compute["volumeMounts"] if m["name"] == "vm-state"}
    assert sub_paths == {"meta", "swtpm", "swtpm-localca", "nvram"}
    assert bs.migration_target_claim(vmi) == "persistent-state-for-testvmi-abcde"
    for refused, message in ((["ReadWriteOnce"], bs.NOT_SHARED_MESSAGE), (None, bs.NO_CLAIM_MESSAGE)):
        with pytest.raises(bs.BackendStorageError, match=message):
            bs.migration_target_claim(persistent_state_vmi(refused))
