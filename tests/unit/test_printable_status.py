"""VM printableStatus, mirroring the `VM printableStatus` tables of KubeVirt's vm_test.go, plus precedence cases."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.api.constants import PRINTABLE_STATUSES
from pykubevirt.api.timestamps import format_time
from pykubevirt.controller.printable_status import printable_status

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
EARLIER = format_time(NOW - timedelta(seconds=30))
LATER = format_time(NOW + timedelta(seconds=30))


def make_vm(
    strategy: str | None = "Always",
    *,
    running: bool | None = None,
    volumes: Iterable[dict[str, Any]] = (),
    deleting: bool = False,
    **status: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"domain": {}, "volumes": list(volumes)}}}
    if strategy is not None:
        spec["runStrategy"] = strategy
    if running is not None:
        spec["running"] = running
    metadata: dict[str, Any] = {"name": "testvm", "namespace": "default", "uid": "vm-uid"}
    if deleting:
        metadata["deletionTimestamp"] = EARLIER
    return {"metadata": metadata, "spec": spec, "status": status}


def make_vmi(
    phase: str = "Running",
    *conditions: dict[str, Any],
    deleting: bool = False,
    ran: bool = False,
    migration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "testvm", "namespace": "default", "uid": "vmi-uid"}
    if deleting:
        metadata["deletionTimestamp"] = EARLIER
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions)}
    if ran:
        status["phaseTransitionTimestamps"] = [{"phase": "Running", "phaseTransitionTimestamp": EARLIER}]
    if migration is not None:
        status["migrationState"] = migration
    return {"metadata": metadata, "status": status}


def cond(type_: str, status: str, reason: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason}


def dv_volume(name: str) -> dict[str, Any]:
    return {"name": f"vol-{name}", "dataVolume": {"name": name}}


def pvc_volume(claim: str) -> dict[str, Any]:
    return {"name": f"vol-{claim}", "persistentVolumeClaim": {"claimName": claim}}


def make_dv(name: str, phase: str = "", *conditions: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {"phase": phase, "conditions": list(conditions)},
    }


def status_of(
    vm: dict[str, Any],
    vmi: dict[str, Any] | None = None,
    *,
    creation_expected: bool = False,
    deletion_expected: bool = False,
    data_volumes: Iterable[dict[str, Any]] = (),
    pvcs: dict[str, str] | None = None,
    now: datetime = NOW,
) -> str:
    phases = pvcs or {}
    return printable_status(
        vm,
        vmi,
        creation_expected=creation_expected,
        deletion_expected=deletion_expected,
        data_volumes=list(data_volumes),
        pvc_bound=lambda claim: None if claim not in phases else phases[claim] == "Bound",
        now=now,
    )


START_FAILURE = {"consecutiveFailCount": 1, "retryAfterTimestamp": format_time(NOW + timedelta(seconds=300))}
BOUND = cond("Bound", "True")


# ----------------------------------------------------------------------------------------------- Stopped


def test_stopped_when_running_false_and_no_vmi() -> None:
    assert status_of(make_vm(None, running=False)) == "Stopped"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
@pytest.mark.parametrize("deleting", [False, True])
def test_stopped_when_vmi_exists_but_stopped(phase: str, deleting: bool) -> None:
    vmi = make_vmi(phase, deleting=deleting, ran=True)
    assert status_of(make_vm(None, running=True), vmi) == "Stopped"
    # A stop already in flight does not turn a final VMI into Stopping.
    assert status_of(make_vm(None, running=True), vmi, deletion_expected=True) == "Stopped"


# ----------------------------------------------------------------------------------------------- Starting


def test_starting_when_running_true_and_vmi_creation_expected() -> None:
    assert status_of(make_vm(None, running=True), creation_expected=True) == "Starting"


@pytest.mark.parametrize("phase", ["", "Pending", "Scheduling", "Scheduled"])
def test_starting_when_vmi_in_a_startup_phase(phase: str) -> None:
    assert status_of(make_vm(None, running=True), make_vmi(phase)) == "Starting"


def test_starting_with_vmi_without_status() -> None:
    assert status_of(make_vm(), {"metadata": {"name": "testvm"}}) == "Starting"


# -------------------------------------------------------------------------------------- CrashLoopBackOff


@pytest.mark.parametrize(
    ("strategy", "vmi", "crash_loop"),
    [
        ("Always", None, True),
        ("RerunOnFailure", None, True),
        ("Halted", None, False),
        ("Manual", None, False),
        ("Once", make_vmi("Running"), False),
        ("Always", make_vmi("Running"), False),
        # A failed VMI still present counts as well: it is final.
        ("Always", make_vmi("Failed"), True),
        ("Once", make_vmi("Failed"), True),
    ],
)
def test_crash_loop_back_off(strategy: str, vmi: dict[str, Any] | None, crash_loop: bool) -> None:
    result = status_of(make_vm(strategy, startFailure=START_FAILURE), vmi)
    assert (result == "CrashLoopBackOff") is crash_loop


def test_no_crash_loop_while_a_start_is_expected() -> None:
    assert status_of(make_vm(startFailure=START_FAILURE), creation_expected=True) == "Starting"


def test_no_crash_loop_without_failures() -> None:
    assert status_of(make_vm(startFailure={"consecutiveFailCount": 0})) == "Stopped"


def test_no_crash_loop_when_run_strategy_is_unresolvable() -> None:
    vm = make_vm("Always", running=True, startFailure=START_FAILURE)
    assert status_of(vm) == "Stopped"


# -------------------------------------------------------------------------------------------- DataVolumes


@pytest.mark.parametrize(
    ("strategy", "dv_phase", "expected"),
    [
        ("Always", "PendingPopulation", "WaitingForVolumeBinding"),
        ("Always", "WaitForFirstConsumer", "WaitingForVolumeBinding"),
        ("Halted", "PendingPopulation", "Stopped"),
        ("Halted", "WaitForFirstConsumer", "Stopped"),
    ],
)
def test_data_volume_exists_but_not_bound(strategy: str, dv_phase: str, expected: str) -> None:
    vm = make_vm(strategy, volumes=[dv_volume("dv1")])
    result = status_of(
        vm,
        creation_expected=strategy == "Always",
        data_volumes=[make_dv("dv1", dv_phase)],
        pvcs={"dv1": "Pending"},
    )
    assert result == expected


@pytest.mark.parametrize("dv_phase", ["ImportScheduled", "ImportInProgress", "WaitForFirstConsumer"])
def test_provisioning_when_data_volume_bound_but_not_ready(dv_phase: str) -> None:
    vm = make_vm(volumes=[dv_volume("dv1")])
    vmi = make_vmi("Pending") if dv_phase == "WaitForFirstConsumer" else None
    assert status_of(vm, vmi, data_volumes=[make_dv("dv1", dv_phase, BOUND)]) == "Provisioning"


@pytest.mark.parametrize(
    "dv",
    [
        make_dv("dv1", "Failed"),
        make_dv("dv1", "ImportInProgress", cond("Running", "False", "Error")),
        make_dv("dv1", "ImportInProgress", cond("Running", "False", "ImagePullFailed")),
    ],
)
def test_data_volume_error(dv: dict[str, Any]) -> None:
    assert status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[dv]) == "DataVolumeError"


def test_running_false_for_another_reason_is_no_data_volume_error() -> None:
    dv = make_dv("dv1", "ImportInProgress", BOUND, cond("Running", "False", "Pending"))
    assert status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[dv]) == "Provisioning"


def test_data_volume_error_clears_when_the_error_is_gone() -> None:
    vm = make_vm(volumes=[dv_volume("dv1")], printableStatus="DataVolumeError")
    assert status_of(vm, data_volumes=[make_dv("dv1", "CloneInProgress", BOUND)]) == "Provisioning"


def test_provisioning_when_one_data_volume_is_ready_and_another_is_not() -> None:
    vm = make_vm(volumes=[dv_volume("dv1"), dv_volume("dv2")])
    dvs = [make_dv("dv1", "Succeeded", BOUND), make_dv("dv2", "ImportInProgress", BOUND)]
    assert status_of(vm, data_volumes=dvs) == "Provisioning"


def test_provisioning_when_quota_blocks_the_data_volume_claim() -> None:
    dv = make_dv("dv1", "Pending", cond("Bound", "Unknown", "ErrExceededQuota"))
    assert status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[dv]) == "Provisioning"


def test_provisioning_for_a_data_volume_without_status() -> None:
    dv = {"metadata": {"name": "dv1", "namespace": "default"}}
    assert status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[dv]) == "Provisioning"


def test_only_data_volumes_referenced_by_volumes_in_the_namespace_count() -> None:
    vm = make_vm(volumes=[dv_volume("dv1")])
    others = [make_dv("dv2", "Failed"), make_dv("dv1", "Failed", namespace="elsewhere")]
    assert status_of(vm, make_vmi("Running"), data_volumes=others) == "Running"
    assert status_of(vm, data_volumes=others) == "Stopped"


def test_succeeded_data_volume_is_not_provisioning() -> None:
    vm = make_vm(volumes=[dv_volume("dv1")])
    assert status_of(vm, data_volumes=[make_dv("dv1", "Succeeded", BOUND)], pvcs={"dv1": "Bound"}) == "Stopped"


# -------------------------------------------------------------------------------- PersistentVolumeClaims


@pytest.mark.parametrize("pvc_phase", ["Pending", "Lost"])
def test_waiting_for_volume_binding_when_pvc_unbound(pvc_phase: str) -> None:
    vm = make_vm(None, running=True, volumes=[pvc_volume("pvc1")])
    assert status_of(vm, creation_expected=True, pvcs={"pvc1": pvc_phase}) == "WaitingForVolumeBinding"


def test_bound_or_missing_pvcs_do_not_wait() -> None:
    vm = make_vm(None, running=True, volumes=[pvc_volume("pvc1"), pvc_volume("pvc2")])
    assert status_of(vm, creation_expected=True, pvcs={"pvc1": "Bound"}) == "Starting"


def test_memory_dump_claim_counts_as_a_pvc() -> None:
    vm = make_vm(volumes=[{"name": "dump", "memoryDump": {"claimName": "dump-pvc"}}])
    assert status_of(vm, creation_expected=True, pvcs={"dump-pvc": "Pending"}) == "WaitingForVolumeBinding"


def test_no_volume_binding_wait_when_rerun_on_failure_vm_was_stopped() -> None:
    vm = make_vm("RerunOnFailure", volumes=[pvc_volume("pvc1")], runStrategy="RerunOnFailure")
    assert status_of(vm, pvcs={"pvc1": "Pending"}) == "Stopped"


def test_manual_vm_waits_for_binding_only_with_a_start_request() -> None:
    vm = make_vm("Manual", volumes=[pvc_volume("pvc1")])
    assert status_of(vm, pvcs={"pvc1": "Pending"}) == "Stopped"
    vm["status"]["stateChangeRequests"] = [{"action": "Start"}]
    assert status_of(vm, pvcs={"pvc1": "Pending"}) == "WaitingForVolumeBinding"


# ------------------------------------------------------------------------------------ Running and Paused


def test_running_when_vmi_running_and_not_paused() -> None:
    assert status_of(make_vm(), make_vmi("Running")) == "Running"
    assert status_of(make_vm(), make_vmi("Running", cond("Paused", "False"))) == "Running"


def test_paused_when_vmi_running_and_paused() -> None:
    assert status_of(make_vm(), make_vmi("Running", cond("Paused", "True"))) == "Paused"


# ------------------------------------------------------------------------------- Stopping and Terminating

VMI_STATES = [
    ("Pending", None),
    ("Pending", "Provisioning"),
    ("Scheduling", None),
    ("Scheduled", None),
    ("Running", None),
    ("Running", "Paused"),
]


@pytest.mark.parametrize(("phase", "condition_type"), VMI_STATES)
def test_stopping_when_vmi_has_a_deletion_timestamp(phase: str, condition_type: str | None) -> None:
    conditions = [cond(condition_type, "True")] if condition_type else []
    assert status_of(make_vm(), make_vmi(phase, *conditions, deleting=True)) == "Stopping"


@pytest.mark.parametrize(("phase", "condition_type"), VMI_STATES)
def test_stopping_when_vmi_deletion_is_expected(phase: str, condition_type: str | None) -> None:
    conditions = [cond(condition_type, "True")] if condition_type else []
    assert status_of(make_vm(), make_vmi(phase, *conditions), deletion_expected=True) == "Stopping"


@pytest.mark.parametrize(("phase", "condition_type"), VMI_STATES)
def test_terminating_when_vm_has_a_deletion_timestamp(phase: str, condition_type: str | None) -> None:
    conditions = [cond(condition_type, "True")] if condition_type else []
    assert status_of(make_vm(deleting=True), make_vmi(phase, *conditions)) == "Terminating"


def test_terminating_when_vm_and_vmi_are_both_being_deleted() -> None:
    assert status_of(make_vm(deleting=True), make_vmi("Running", deleting=True)) == "Terminating"


@pytest.mark.parametrize("running", [True, False])
def test_terminating_when_vmi_does_not_exist(running: bool) -> None:
    assert status_of(make_vm(None, running=running, deleting=True)) == "Terminating"


# ----------------------------------------------------------------------------------------------- Migrating


def test_migrating_when_migration_started_now() -> None:
    vmi = make_vmi("Running", migration={"startTimestamp": format_time(NOW)})
    assert status_of(make_vm(), vmi) == "Migrating"


def test_migrating_until_the_end_timestamp() -> None:
    vmi = make_vmi("Running", migration={"startTimestamp": EARLIER, "endTimestamp": LATER})
    assert status_of(make_vm(), vmi) == "Migrating"


@pytest.mark.parametrize(
    "migration",
    [
        {"startTimestamp": EARLIER, "endTimestamp": format_time(NOW)},
        {"startTimestamp": EARLIER, "endTimestamp": EARLIER},
        {"startTimestamp": LATER},
        {"endTimestamp": LATER},
        {},
    ],
)
def test_not_migrating(migration: dict[str, Any]) -> None:
    assert status_of(make_vm(), make_vmi("Running", migration=migration)) == "Running"


def test_migrating_accepts_naive_now_as_utc() -> None:
    vmi = make_vmi("Running", migration={"startTimestamp": EARLIER})
    assert status_of(make_vm(), vmi, now=NOW.replace(tzinfo=None)) == "Migrating"


# --------------------------------------------------------------------------- failures from VMI conditions


def test_unknown_when_vmi_in_unknown_phase() -> None:
    assert status_of(make_vm(), make_vmi("Unknown")) == "Unknown"


@pytest.mark.parametrize(
    ("condition_", "expected"),
    [
        (cond("PodScheduled", "False", "Unschedulable"), "ErrorUnschedulable"),
        (cond("Synchronized", "False", "FailedPvcNotFound"), "ErrorPvcNotFound"),
        (cond("Synchronized", "False", "ErrImagePull"), "ErrImagePull"),
        (cond("Synchronized", "False", "ImagePullBackOff"), "ImagePullBackOff"),
        # Anything else leaves the VMI's startup phase in charge.
        (cond("PodScheduled", "True", "Unschedulable"), "Starting"),
        (cond("PodScheduled", "False", "SchedulerError"), "Starting"),
        (cond("Synchronized", "True", "ErrImagePull"), "Starting"),
        (cond("Synchronized", "False", "FailedCreate"), "Starting"),
    ],
)
def test_status_from_vmi_condition(condition_: dict[str, Any], expected: str) -> None:
    assert status_of(make_vm(), make_vmi("Scheduling", condition_)) == expected


# ------------------------------------------------------------------------------------- WaitingForReceiver


def test_waiting_for_receiver_when_receiver_vmi_waits_for_sync() -> None:
    assert status_of(make_vm("WaitAsReceiver"), make_vmi("WaitingForSync")) == "WaitingForReceiver"


def test_waiting_for_sync_vmi_of_another_strategy_is_unknown() -> None:
    assert status_of(make_vm("Always"), make_vmi("WaitingForSync")) == "Unknown"


def test_receiver_without_vmi_is_stopped_or_starting() -> None:
    # Stopped and Starting come first, so a receiver without a VMI never shows WaitingForReceiver.
    assert status_of(make_vm("WaitAsReceiver")) == "Stopped"
    assert status_of(make_vm("WaitAsReceiver"), creation_expected=True) == "Starting"


# ---------------------------------------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("vm", "vmi", "kwargs", "expected"),
    [
        # Terminating beats everything, even a running, migrating VMI.
        (make_vm(deleting=True), make_vmi("Running", migration={"startTimestamp": EARLIER}), {}, "Terminating"),
        (make_vm(deleting=True), make_vmi("Running"), {}, "Terminating"),
        (make_vm(deleting=True), make_vmi("Running", deleting=True), {}, "Terminating"),
        # Stopping beats Migrating and Running.
        (make_vm(), make_vmi("Running", deleting=True, migration={"startTimestamp": EARLIER}), {}, "Stopping"),
        # Migrating beats Paused and Running.
        (
            make_vm(),
            make_vmi("Running", cond("Paused", "True"), migration={"startTimestamp": EARLIER}),
            {},
            "Migrating",
        ),
        # Running beats a failing DataVolume and stale VMI conditions.
        (
            make_vm(volumes=[dv_volume("dv1")]),
            make_vmi("Running", cond("Synchronized", "False", "FailedPvcNotFound")),
            {"data_volumes": [make_dv("dv1", "Failed")]},
            "Running",
        ),
        # ErrorPvcNotFound beats DataVolumeError.
        (
            make_vm(volumes=[dv_volume("dv1")]),
            make_vmi("Pending", cond("Synchronized", "False", "FailedPvcNotFound")),
            {"data_volumes": [make_dv("dv1", "Failed")]},
            "ErrorPvcNotFound",
        ),
        # DataVolumeError beats ErrorUnschedulable.
        (
            make_vm(volumes=[dv_volume("dv1")]),
            make_vmi("Pending", cond("PodScheduled", "False", "Unschedulable")),
            {"data_volumes": [make_dv("dv1", "Failed")]},
            "DataVolumeError",
        ),
        # ErrorUnschedulable beats Provisioning.
        (
            make_vm(volumes=[dv_volume("dv1")]),
            make_vmi("Pending", cond("PodScheduled", "False", "Unschedulable")),
            {"data_volumes": [make_dv("dv1", "WaitForFirstConsumer", BOUND)]},
            "ErrorUnschedulable",
        ),
        # Provisioning beats WaitingForVolumeBinding.
        (
            make_vm(volumes=[dv_volume("dv1")]),
            None,
            {"data_volumes": [make_dv("dv1", "ImportInProgress", BOUND)], "pvcs": {"dv1": "Pending"}},
            "Provisioning",
        ),
        # WaitingForVolumeBinding beats ErrImagePull.
        (
            make_vm(volumes=[pvc_volume("pvc1")]),
            make_vmi("Scheduling", cond("Synchronized", "False", "ErrImagePull")),
            {"pvcs": {"pvc1": "Pending"}},
            "WaitingForVolumeBinding",
        ),
        # Image pull errors beat Starting.
        (make_vm(), make_vmi("Scheduling", cond("Synchronized", "False", "ImagePullBackOff")), {}, "ImagePullBackOff"),
        # Starting beats CrashLoopBackOff.
        (make_vm(startFailure=START_FAILURE), make_vmi("Pending"), {}, "Starting"),
        # CrashLoopBackOff beats Stopped.
        (make_vm(startFailure=START_FAILURE), make_vmi("Failed"), {}, "CrashLoopBackOff"),
        # Stopped beats WaitingForReceiver.
        (make_vm("WaitAsReceiver"), make_vmi("Succeeded"), {}, "Stopped"),
    ],
)
def test_precedence(vm: dict[str, Any], vmi: dict[str, Any] | None, kwargs: dict[str, Any], expected: str) -> None:
    assert status_of(vm, vmi, **kwargs) == expected


def test_every_value_is_a_known_printable_status() -> None:
    cases: list[str] = [
        status_of(make_vm(None, running=False)),
        status_of(make_vm(), creation_expected=True),
        status_of(make_vm(), make_vmi("Running")),
        status_of(make_vm(), make_vmi("Running", cond("Paused", "True"))),
        status_of(make_vm(), make_vmi("Running", deleting=True)),
        status_of(make_vm(deleting=True)),
        status_of(make_vm(), make_vmi("Running", migration={"startTimestamp": EARLIER})),
        status_of(make_vm(startFailure=START_FAILURE)),
        status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[make_dv("dv1", "ImportInProgress", BOUND)]),
        status_of(make_vm(volumes=[pvc_volume("p")]), pvcs={"p": "Pending"}),
        status_of(make_vm(volumes=[dv_volume("dv1")]), data_volumes=[make_dv("dv1", "Failed")]),
        status_of(make_vm(), make_vmi("Pending", cond("PodScheduled", "False", "Unschedulable"))),
        status_of(make_vm(), make_vmi("Pending", cond("Synchronized", "False", "ErrImagePull"))),
        status_of(make_vm(), make_vmi("Pending", cond("Synchronized", "False", "ImagePullBackOff"))),
        status_of(make_vm(), make_vmi("Pending", cond("Synchronized", "False", "FailedPvcNotFound"))),
        status_of(make_vm("WaitAsReceiver"), make_vmi("WaitingForSync")),
        status_of(make_vm(), make_vmi("Unknown")),
    ]
    assert sorted(cases) == sorted(PRINTABLE_STATUSES)
