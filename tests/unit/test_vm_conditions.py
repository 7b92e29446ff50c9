"""VM conditions and status fields, mirroring KubeVirt's syncConditions, Ready condition and updateStatus tests."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.controller.vm_conditions import (
    MESSAGE_RESTART_REQUIRED,
    status_fields,
    trim_state_change_requests,
    vm_conditions,
)

NOW = "2024-05-01T12:00:00Z"
BEFORE = "2024-05-01T11:00:00Z"


def make_vm(conditions: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    status["conditions"] = conditions or []
    return {
        "metadata": {"name": "vm", "namespace": "default", "generation": 3},
        "spec": {"runStrategy": "Always"},
        "status": status,
    }


def make_vmi(
    *conditions: dict[str, Any],
    phase: str = "Running",
    uid: str = "vmi-uid",
    deleting: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "vm", "uid": uid, "annotations": annotations or {}}
    if deleting:
        metadata["deletionTimestamp"] = BEFORE
    return {"metadata": metadata, "status": {"phase": phase, "conditions": list(conditions)}}


def cond(type_: str, status: str = "True", reason: str = "fakereason", message: str = "fakemsg") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "lastProbeTime": BEFORE,
        "lastTransitionTime": BEFORE,
        "reason": reason,
        "message": message,
    }


def by_type(conditions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in conditions}


def sync(
    vm: dict[str, Any],
    vmi: dict[str, Any] | None,
    *,
    sync_error: tuple[str, str] | None = None,
    restart_required: bool | None = None,
) -> list[dict[str, Any]]:
    return vm_conditions(vm, vmi, sync_error=sync_error, now=NOW, restart_required=restart_required)


# -------------------------------------------------------------------------------------------------- Ready


def test_ready_false_when_vmi_is_nil() -> None:
    assert sync(make_vm(), None) == [
        {
            "type": "Ready",
            "status": "False",
            "lastProbeTime": NOW,
            "lastTransitionTime": NOW,
            "reason": "VMINotExists",
            "message": "VMI does not exist",
        }
    ]


def test_ready_false_when_vmi_has_no_ready_condition() -> None:
    assert sync(make_vm(), make_vmi()) == [
        {
            "type": "Ready",
            "status": "False",
            "lastProbeTime": NOW,
            "lastTransitionTime": NOW,
            "reason": "VMIConditionMissing",
            "message": "VMI is missing the Ready condition",
        }
    ]


@pytest.mark.parametrize("status", ["True", "False"])
def test_ready_copied_from_vmi(status: str) -> None:
    ready = cond("Ready", status, reason="", message="")
    ready["lastProbeTime"] = None
    conditions = sync(make_vm(), make_vmi(ready))
    assert conditions == [{"type": "Ready", "status": status, "lastProbeTime": None, "lastTransitionTime": BEFORE}]


def test_unchanged_ready_keeps_its_times_and_message() -> None:
    earlier = cond("Ready", "False", reason="VMINotExists", message="old message")
    earlier["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    assert sync(make_vm([earlier]), None) == [earlier]


def test_changed_ready_is_replaced() -> None:
    earlier = cond("Ready", "False", reason="VMINotExists")
    vmi_ready = cond("Ready", "True", reason="", message="")
    assert by_type(sync(make_vm([earlier]), make_vmi(vmi_ready)))["Ready"] == {
        "type": "Ready",
        "status": "True",
        "lastProbeTime": BEFORE,
        "lastTransitionTime": BEFORE,
    }


def test_reason_change_alone_replaces_the_condition() -> None:
    earlier = cond("Ready", "False", reason="VMINotExists")
    result = by_type(sync(make_vm([earlier]), make_vmi()))["Ready"]
    assert result["reason"] == "VMIConditionMissing"
    assert result["lastTransitionTime"] == NOW


# ------------------------------------------------------------------------------------------------ Failure


def test_failure_condition_from_sync_error() -> None:
    conditions = sync(make_vm(), None, sync_error=("FailedCreate", "Failure while starting VMI: boom"))
    assert by_type(conditions)["Failure"] == {
        "type": "Failure",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": NOW,
        "reason": "FailedCreate",
        "message": "Failure while starting VMI: boom",
    }


def test_failure_with_same_reason_keeps_the_first_message() -> None:
    existing = cond("Failure", "True", reason="FailedDelete", message="first")
    conditions = sync(make_vm([existing]), None, sync_error=("FailedDelete", "second"))
    assert by_type(conditions)["Failure"] == existing


def test_failure_with_new_reason_is_replaced() -> None:
    existing = cond("Failure", "True", reason="FailedDelete", message="first")
    conditions = sync(make_vm([existing]), None, sync_error=("FailedCreate", "second"))
    assert by_type(conditions)["Failure"]["message"] == "second"


def test_failure_removed_without_sync_error() -> None:
    existing = cond("Failure", "True", reason="FailedCreate")
    assert "Failure" not in by_type(sync(make_vm([existing]), None))
    assert "Failure" not in by_type(sync(make_vm([existing]), make_vmi()))


def test_vmi_failure_condition_is_not_mirrored() -> None:
    assert "Failure" not in by_type(sync(make_vm(), make_vmi(cond("Failure"))))


# ---------------------------------------------------------------------------------------- RestartRequired


def test_restart_required_set() -> None:
    conditions = sync(make_vm(), make_vmi(), restart_required=True)
    assert by_type(conditions)["RestartRequired"] == {
        "type": "RestartRequired",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": NOW,
        "message": MESSAGE_RESTART_REQUIRED,
    }
    assert MESSAGE_RESTART_REQUIRED == "a non-live-updatable field was changed in the template spec"


def test_restart_required_kept_while_still_required() -> None:
    existing = {"type": "RestartRequired", "status": "True", "lastProbeTime": None, "lastTransitionTime": BEFORE}
    conditions = sync(make_vm([existing]), make_vmi(), restart_required=True)
    assert by_type(conditions)["RestartRequired"]["lastTransitionTime"] == BEFORE


def test_restart_required_removed_and_left_alone() -> None:
    existing = {"type": "RestartRequired", "status": "True", "lastTransitionTime": BEFORE}
    assert "RestartRequired" not in by_type(sync(make_vm([existing]), make_vmi(), restart_required=False))
    assert "RestartRequired" in by_type(sync(make_vm([existing]), make_vmi(), restart_required=None))
    # A VMI's RestartRequired never reaches the VM, nor does its absence remove the VM's.
    assert "RestartRequired" not in by_type(sync(make_vm(), make_vmi(cond("RestartRequired"))))
    assert "RestartRequired" in by_type(sync(make_vm([existing]), make_vmi()))


# -------------------------------------------------------------------------------------- mirrored conditions


def test_syncs_appropriate_conditions_and_ignores_others() -> None:
    vmi = make_vmi(*(cond(t) for t in ("Ready", "Failure", "Paused", "RestartRequired")))
    assert sorted(c["type"] for c in sync(make_vm(), vmi)) == ["Paused", "Ready"]


def test_syncs_vmi_conditions() -> None:
    added = ["Provisioning", "Synchronized", "Paused"]
    removed = ["AgentConnected", "AccessCredentialsSynchronized", "AgentVersionNotSupported"]
    vm = make_vm([cond("LiveMigratable", "False"), *(cond(t) for t in removed)])
    vmi = make_vmi(*(cond(t) for t in added), cond("LiveMigratable", "True"))
    result = by_type(sync(vm, vmi))
    for type_ in added:
        assert result[type_]["status"] == "True"
    for type_ in removed:
        assert type_ not in result
    assert result["LiveMigratable"]["status"] == "True"


def test_mirrored_condition_is_a_copy_of_the_vmi_condition() -> None:
    paused = {"type": "Paused", "status": "True", "lastTransitionTime": BEFORE, "reason": "PausedByUser"}
    assert by_type(sync(make_vm(), make_vmi(paused)))["Paused"] == {
        "type": "Paused",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": BEFORE,
        "reason": "PausedByUser",
    }


def test_unchanged_mirrored_condition_keeps_the_vm_copy() -> None:
    on_vm = cond("AgentConnected", message="old")
    on_vmi = cond("AgentConnected", message="new")
    on_vmi["lastTransitionTime"] = NOW
    assert by_type(sync(make_vm([on_vm]), make_vmi(on_vmi)))["AgentConnected"] == on_vm


def test_conditions_keep_their_order_and_new_ones_are_appended() -> None:
    vm = make_vm([cond("Paused"), cond("Ready", "False", reason="VMIConditionMissing"), cond("AgentConnected")])
    vmi = make_vmi(cond("DataVolumesReady"), cond("AgentConnected"), cond("Paused"))
    assert [c["type"] for c in sync(vm, vmi, restart_required=True)] == [
        "Paused",
        "Ready",
        "AgentConnected",
        "RestartRequired",
        "DataVolumesReady",
    ]


def test_without_a_vmi_mirrored_conditions_are_left_alone() -> None:
    stale = [
        cond("Paused"),
        cond("ManualRecoveryRequired", reason="VMI was removed or was final during the volume migration"),
    ]
    result = by_type(sync(make_vm(stale), None))
    assert result["Paused"] == stale[0]
    assert result["ManualRecoveryRequired"] == stale[1]


def test_manual_recovery_required_follows_the_vmi_when_one_exists() -> None:
    # Upstream's ignore list is Ready, Failure and RestartRequired only.
    manual = cond("ManualRecoveryRequired")
    assert "ManualRecoveryRequired" not in by_type(sync(make_vm([manual]), make_vmi(phase="Failed")))


def test_input_is_not_modified() -> None:
    vm = make_vm([cond("Paused", "False")])
    before = [dict(c) for c in vm["status"]["conditions"]]
    sync(vm, make_vmi(cond("Paused", "True")), sync_error=("FailedCreate", "x"), restart_required=True)
    assert vm["status"]["conditions"] == before


# -------------------------------------------------------------------------------------------- status fields


def test_status_fields_without_vmi() -> None:
    assert status_fields(make_vm(), None) == {"created": False, "ready": False}


def test_status_fields_with_ready_vmi() -> None:
    vmi = make_vmi(cond("Ready"), annotations={"kubevirt.io/vm-generation": "2"})
    assert status_fields(make_vm(), vmi) == {
        "created": True,
        "ready": True,
        "observedGeneration": 2,
        "desiredGeneration": 3,
        "runStrategy": "Always",
    }


@pytest.mark.parametrize("ready", [cond("Ready", "False"), None])
def test_status_fields_with_unready_vmi(ready: dict[str, Any] | None) -> None:
    vmi = make_vmi(*([ready] if ready else []))
    assert status_fields(make_vm(), vmi) == {"created": True, "ready": False, "runStrategy": "Always"}


@pytest.mark.parametrize("annotation", ["x", "", "1.5", "1_0", " 2"])
def test_generation_annotation_must_be_an_integer(annotation: str) -> None:
    vmi = make_vmi(annotations={"kubevirt.io/vm-generation": annotation})
    assert "observedGeneration" not in status_fields(make_vm(), vmi)


def test_run_strategy_recorded_once_created_was_seen() -> None:
    vm = make_vm(runStrategy="Halted")
    vm["spec"]["runStrategy"] = "RerunOnFailure"
    assert status_fields(vm, None)["runStrategy"] == "RerunOnFailure"


def test_run_strategy_unresolvable_is_written_empty() -> None:
    vm = make_vm(runStrategy="Always")
    vm["spec"]["running"] = True
    assert status_fields(vm, None)["runStrategy"] == ""


# ------------------------------------------------------------------------------------ state change requests

START = {"action": "Start"}


def stop(uid: str | None) -> dict[str, Any]:
    return {"action": "Stop", "uid": uid} if uid is not None else {"action": "Stop"}


@pytest.mark.parametrize(
    ("requests", "vmi", "expected"),
    [
        ([], None, []),
        # A Stop is done once its VMI is gone.
        ([stop("vmi-uid"), START], None, [START]),
        ([stop("vmi-uid"), START], make_vmi(), [stop("vmi-uid"), START]),
        ([stop("old-uid"), START], make_vmi(), [START]),
        ([stop(None), START], make_vmi(), [START]),
        # A Start is done once a live VMI exists.
        ([START], None, [START]),
        ([START], make_vmi(phase="Pending"), []),
        ([START, stop("x")], make_vmi(phase="Running"), [stop("x")]),
        ([START], make_vmi(phase="Failed"), [START]),
        ([START], make_vmi(phase="Succeeded"), [START]),
        ([START], make_vmi(deleting=True), [START]),
        # Only one request is trimmed per loop.
        ([stop("a"), stop("b"), START], None, [stop("b"), START]),
        ([{"action": "Other"}], make_vmi(), [{"action": "Other"}]),
    ],
)
def test_trim_state_change_requests(
    requests: list[dict[str, Any]], vmi: dict[str, Any] | None, expected: list[dict[str, Any]]
) -> None:
    assert trim_state_change_requests(make_vm(stateChangeRequests=requests), vmi) == expected
