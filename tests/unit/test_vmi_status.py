"""The VMI status virt-controller computes from the VMI and its launcher pod (vmi.go: updateStatus).

One row per line of KubeVirt's tables: phase transitions, the Ready condition from the pod, and the pod's unpaused gate.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pykubevirt.api import constants as c
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vmi_status import StatusUpdate, unpaused_gate_condition, vmi_status

NOW = "2024-05-01T10:00:00Z"
EARLIER = "2024-05-01T09:00:00Z"


def make_vmi(phase: str = "", *, terminating: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "vm", "namespace": "default", "uid": "vmi-uid", "finalizers": [c.VMI_FINALIZER]}
    if terminating:
        meta["deletionTimestamp"] = EARLIER
    return {"metadata": meta, "spec": {"domain": {}}, "status": {"phase": phase, **status} if phase else status}


def make_pod(
    phase: str = "Pending",
    *,
    node: str = "",
    compute: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    terminating: bool = False,
    uid: str = "pod-uid",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "virt-launcher-vm-x", "namespace": "default", "uid": uid}
    if terminating:
        meta["deletionTimestamp"] = EARLIER
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable", "conditions": conditions or []}
    if compute is not None:
        status["containerStatuses"] = [{"name": "compute", "ready": compute == "running", "state": {compute: {}}}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "launcher:1"}]},
        "status": status,
    }


def ready_pod(**kwargs: Any) -> dict[str, Any]:
    """A pod virt-controller hands over: Running, compute running, on a node."""
    return make_pod("Running", node="node01", compute="running", **kwargs)


def status_of(
    vmi: dict[str, Any],
    pod: dict[str, Any] | None,
    owned: list[dict[str, Any]] | None = None,
    sync_error: SyncError | None = None,
    *,
    owner_vm_exists: bool = True,
) -> StatusUpdate:
    if owned is None:
        owned = [pod] if pod is not None else []
    return vmi_status(vmi, pod, owned, sync_error, owner_vm_exists=owner_vm_exists, now=NOW)


def cond(update: StatusUpdate, type_: str) -> dict[str, Any] | None:
    return next((x for x in update.vmi["status"].get("conditions") or [] if x["type"] == type_), None)


# ------------------------------------------------------------------------------------------------ phase transitions
# kubevirt-semantics §3.3; the DataVolume, WaitingForSync and Provisioning rows are not modelled here yet.


@pytest.mark.parametrize(
    ("phase", "terminating", "pod", "expected", "handler_owned"),
    [
        ("", False, make_pod(), "Scheduling", False),  # "" / Pending: launcher pod exists → Scheduling
        ("Pending", False, make_pod(), "Scheduling", False),
        ("Pending", True, None, "Failed", False),  # VMI terminating → Failed
        ("", True, None, "Failed", False),
        ("Pending", False, None, "Pending", False),  # else → Pending
        ("", False, None, "Pending", False),
        ("Scheduling", False, make_pod(), "Scheduling", False),  # pod exists, not ready: stays
        ("Scheduling", False, ready_pod(), "Scheduled", False),  # ready for hand-over → Scheduled
        ("Scheduling", True, ready_pod(), "Scheduling", False),  # ... but not while the VMI terminates
        ("Scheduling", False, make_pod("Failed"), "Failed", False),  # pod down → Failed
        ("Scheduling", False, make_pod(compute="terminated"), "Failed", False),  # compute terminated → Failed
        ("Scheduling", False, make_pod(terminating=True), "Failed", False),  # pod going down → Failed
        ("Scheduling", False, None, "Failed", False),  # pod missing → Failed
        ("Scheduled", False, None, "Failed", True),  # Scheduled / Running: pod missing → Failed
        ("Running", False, None, "Failed", True),
        ("Scheduled", False, ready_pod(), "Scheduled", True),  # virt-handler's from here on
        ("Running", False, ready_pod(), "Running", True),
        ("Succeeded", False, None, "Succeeded", False),  # final phases stay
        ("Failed", False, ready_pod(), "Failed", False),
    ],
)
def test_phase(phase: str, terminating: bool, pod: dict[str, Any] | None, expected: str, handler_owned: bool) -> None:
    update = status_of(make_vmi(phase, terminating=terminating), pod)
    assert update.vmi["status"]["phase"] == expected
    assert update.handler_owned is handler_owned


def test_hand_over_sets_the_node_and_migration_transport() -> None:
    pod = ready_pod()
    pod["metadata"]["annotations"] = {c.MIGRATION_TRANSPORT_UNIX_ANNOTATION: "true"}
    vmi = status_of(make_vmi("Scheduling"), pod).vmi
    assert vmi["metadata"]["labels"] == {c.NODE_NAME_LABEL: "node01"}
    assert vmi["status"]["nodeName"] == "node01"
    assert vmi["status"]["migrationTransport"] == "Unix"
    assert vmi["status"]["qosClass"] == "Burstable"
    assert "migrationTransport" not in status_of(make_vmi("Scheduling"), ready_pod()).vmi["status"]


def test_the_move_to_scheduling_carries_the_pods_qos_class() -> None:
    # One write for Scheduling instead of a second one for the QoS class on the next loop.
    assert status_of(make_vmi("Pending"), make_pod()).vmi["status"]["qosClass"] == "Burstable"
    unreported = make_pod()
    del unreported["status"]["qosClass"]
    assert status_of(make_vmi("Pending"), unreported).vmi["status"]["qosClass"] == "BestEffort"
    assert "qosClass" not in status_of(make_vmi("Pending"), None).vmi["status"]


def test_dedicated_cpus_without_guaranteed_qos_are_not_handed_over() -> None:
    vmi = make_vmi("Scheduling")
    vmi["spec"]["domain"] = {"cpu": {"dedicatedCpuPlacement": True}}
    update = status_of(vmi, ready_pod())
    assert update.vmi["status"]["phase"] == "Scheduling"
    assert update.warnings == [("FailedGuaranteeResources", "failed to guarantee pod resources")]
    sync = cond(update, "Synchronized")
    assert sync is not None
    assert (sync["status"], sync["reason"], sync["message"]) == (
        "False",
        "FailedGuaranteeResources",
        "failed to guarantee pod resources",
    )
    guaranteed = ready_pod()
    guaranteed["status"]["qosClass"] = "Guaranteed"
    update = status_of(vmi, guaranteed)
    assert update.vmi["status"]["phase"] == "Scheduled"
    assert update.warnings == []


def test_scheduling_copies_an_unschedulable_pod_condition_once() -> None:
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
    update = status_of(make_vmi("Scheduling"), make_pod(conditions=[{**unschedulable, "lastProbeTime": None}]))
    assert cond(update, "PodScheduled") == unschedulable
    # An existing PodScheduled is kept as it is; a scheduled pod removes it.
    vmi = make_vmi("Scheduling", conditions=[{**unschedulable, "message": "old"}])
    assert cond(status_of(vmi, make_pod(conditions=[unschedulable])), "PodScheduled") == {
        **unschedulable,
        "message": "old",
    }
    scheduled = make_pod(conditions=[{"type": "PodScheduled", "status": "True"}])
    assert cond(status_of(vmi, scheduled), "PodScheduled") is None


def test_scheduling_drops_provisioning() -> None:
    vmi = make_vmi("Scheduling", conditions=[{"type": "Provisioning", "status": "True"}])
    assert cond(status_of(vmi, make_pod()), "Provisioning") is None


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff"])
def test_image_pull_errors_show_as_synchronized_false(reason: str) -> None:
    pod = make_pod(node="node01")
    waiting = {"reason": reason, "message": 'Back-off pulling image "launcher:1"'}
    pod["status"]["containerStatuses"] = [{"name": "compute", "ready": False, "state": {"waiting": waiting}}]
    sync = cond(status_of(make_vmi("Scheduling"), pod), "Synchronized")
    assert sync == {
        "type": "Synchronized",
        "status": "False",
        "reason": reason,
        "message": 'Back-off pulling image "launcher:1"',
        "lastTransitionTime": NOW,
    }


# ------------------------------------------------------------------------------------------------ finalizers


def test_legacy_finalizer_is_renamed() -> None:
    vmi = make_vmi("Running")
    vmi["metadata"]["finalizers"] = [c.LEGACY_VMI_FINALIZER, "other"]
    assert status_of(vmi, ready_pod()).vmi["metadata"]["finalizers"] == ["other", c.VMI_FINALIZER]


@pytest.mark.parametrize(
    ("owned", "owner_vm_exists", "finalizers"),
    [
        ([], True, [c.VM_CONTROLLER_FINALIZER]),  # final, no owned pods left → VMI finalizer removed
        ([make_pod("Succeeded")], True, [c.VMI_FINALIZER, c.VM_CONTROLLER_FINALIZER]),  # pods left → kept
        ([make_pod("Succeeded")], False, [c.VMI_FINALIZER]),  # owner VM gone → VM controller's removed
        ([], False, None),  # nothing left: the list goes
    ],
)
def test_final_vmi_finalizers(owned: list[dict[str, Any]], owner_vm_exists: bool, finalizers: list[str] | None) -> None:
    vmi = make_vmi("Succeeded", launcherContainerImageVersion="launcher:1")
    vmi["metadata"]["finalizers"] = [c.VMI_FINALIZER, c.VM_CONTROLLER_FINALIZER]
    update = status_of(vmi, None, owned, owner_vm_exists=owner_vm_exists)
    assert update.vmi["metadata"].get("finalizers") == finalizers
    assert ("launcherContainerImageVersion" in update.vmi["status"]) is bool(owned)


def test_finalizers_of_a_running_vmi_are_kept_even_without_the_vm() -> None:
    vmi = make_vmi("Running")
    vmi["metadata"]["finalizers"] = [c.VMI_FINALIZER, c.VM_CONTROLLER_FINALIZER]
    update = status_of(vmi, ready_pod(), owner_vm_exists=False)
    assert update.vmi["metadata"]["finalizers"] == [c.VMI_FINALIZER, c.VM_CONTROLLER_FINALIZER]


# ------------------------------------------------------------------------------------------------ Ready condition
# kubevirt-semantics §3.4 (lifecycle.go: syncReadyConditionFromPod).

POD_READY = {
    "type": "Ready",
    "status": "True",
    "reason": None,
    "lastProbeTime": None,
    "lastTransitionTime": EARLIER,
}


@pytest.mark.parametrize(
    ("phase", "pod", "expected"),
    [
        ("Pending", None, ("False", "PodNotExists", "virt-launcher pod has not yet been scheduled")),
        ("Running", ready_pod(terminating=True), ("False", "PodTerminating", "virt-launcher pod is terminating")),
        ("Running", make_pod("Failed"), ("False", "PodTerminating", "virt-launcher pod is terminating")),
        ("Scheduled", ready_pod(), ("False", "GuestNotRunning", "Guest VM is not reported as running")),
        ("Running", ready_pod(), ("False", "PodConditionMissing", "virt-launcher pod is missing the Ready condition")),
    ],
)
def test_ready_condition(phase: str, pod: dict[str, Any] | None, expected: tuple[str, str, str]) -> None:
    ready = cond(status_of(make_vmi(phase), pod), "Ready")
    assert ready == {
        "type": "Ready",
        "status": expected[0],
        "reason": expected[1],
        "message": expected[2],
        "lastProbeTime": NOW,
        "lastTransitionTime": NOW,
    }


def test_ready_condition_is_copied_from_the_pod_without_empty_fields() -> None:
    ready = cond(status_of(make_vmi("Running"), ready_pod(conditions=[POD_READY])), "Ready")
    assert ready == {"type": "Ready", "status": "True", "lastTransitionTime": EARLIER}


def test_ready_condition_is_replaced_only_when_status_or_reason_change() -> None:
    old = {"type": "Ready", "status": "False", "reason": "PodNotExists", "message": "m", "lastTransitionTime": EARLIER}
    assert cond(status_of(make_vmi("Pending", conditions=[old]), None), "Ready") == old
    assert cond(status_of(make_vmi("Scheduling", conditions=[old]), make_pod()), "Ready") == {
        "type": "Ready",
        "status": "False",
        "reason": "GuestNotRunning",
        "message": "Guest VM is not reported as running",
        "lastProbeTime": NOW,
        "lastTransitionTime": NOW,
    }


# ------------------------------------------------------------------------------------------------ other status


def test_active_pods_and_launcher_image() -> None:
    pods = [ready_pod(uid="a"), make_pod("Succeeded", node="node02", uid="b")]
    status = status_of(make_vmi("Running"), pods[0], pods).vmi["status"]
    assert status["activePods"] == {"a": "node01", "b": "node02"}
    assert status["launcherContainerImageVersion"] == "launcher:1"
    assert "activePods" not in status_of(make_vmi("Pending"), None).vmi["status"]
    assert status_of(make_vmi("Pending", activePods={"a": ""}), None).vmi["status"]["activePods"] == {}


def test_eviction_requested_follows_the_evacuation_node() -> None:
    evacuating = make_vmi("Running", evacuationNodeName="node01")
    assert cond(status_of(evacuating, ready_pod()), "EvictionRequested") == {
        "type": "EvictionRequested",
        "status": "True",
        "reason": "EvictionRequested",
        "message": "VMI is marked for eviction",
        "lastProbeTime": NOW,
        "lastTransitionTime": NOW,
    }
    evicted = make_vmi("Running", conditions=[{"type": "EvictionRequested", "status": "True"}])
    assert cond(status_of(evicted, ready_pod()), "EvictionRequested") is None


def test_synchronized_follows_the_sync_error_outside_handler_phases() -> None:
    error = SyncError("failed to create virtual machine pod: quota", "FailedCreate")
    sync = cond(status_of(make_vmi("Pending"), None, sync_error=error), "Synchronized")
    assert sync == {
        "type": "Synchronized",
        "status": "False",
        "reason": "FailedCreate",
        "message": "failed to create virtual machine pod: quota",
        "lastTransitionTime": NOW,
    }
    # Kept as it is while the reason stays; removed once a sync succeeds.
    old = {**sync, "message": "older", "lastTransitionTime": EARLIER}
    assert cond(status_of(make_vmi("Pending", conditions=[old]), None, sync_error=error), "Synchronized") == old
    assert cond(status_of(make_vmi("Pending", conditions=[old]), None), "Synchronized") is None
    # virt-handler owns Synchronized on Scheduled and Running VMIs.
    assert cond(status_of(make_vmi("Running", conditions=[old]), ready_pod()), "Synchronized") == old


def test_phase_transition_timestamps_outside_handler_phases() -> None:
    stamps = status_of(make_vmi("Pending"), make_pod()).vmi["status"]["phaseTransitionTimestamps"]
    assert stamps == [{"phase": "Scheduling", "phaseTransitionTimestamp": NOW}]
    assert "phaseTransitionTimestamps" not in status_of(make_vmi("Pending"), None).vmi["status"]
    # virt-handler records its own transitions: a Running VMI that loses its pod gets none from here.
    assert "phaseTransitionTimestamps" not in status_of(make_vmi("Running"), None).vmi["status"]


def test_the_cached_vmi_is_not_changed() -> None:
    vmi = make_vmi("Scheduling")
    before = repr(vmi)
    status_of(vmi, ready_pod())
    assert repr(vmi) == before


# ------------------------------------------------------------------------------------------------ unpaused gate
# lifecycle.go: syncPausedConditionToPod.

PAUSED = [{"type": "Paused", "status": "True"}]


def gate(status: str) -> dict[str, Any]:
    return {"type": c.UNPAUSED_READINESS_GATE, "status": status}


@pytest.mark.parametrize(
    ("vmi_conditions", "pod_conditions", "expected"),
    [
        (PAUSED, [gate("True")], ("False", "Paused", "the virtual machine is paused")),
        (PAUSED, [], ("False", "Paused", "the virtual machine is paused")),
        (PAUSED, [gate("False")], None),
        ([], [gate("False")], ("True", "NotPaused", "the virtual machine is not paused")),
        ([], [], ("True", "NotPaused", "the virtual machine is not paused")),
        ([{"type": "Paused", "status": "False"}], [gate("True")], None),
    ],
)
def test_unpaused_gate(
    vmi_conditions: list[dict[str, Any]], pod_conditions: list[dict[str, Any]], expected: tuple[str, str, str] | None
) -> None:
    scheduled = {"type": "PodScheduled", "status": "True"}
    pod = make_pod(conditions=[scheduled, *pod_conditions])
    gate_condition = unpaused_gate_condition(make_vmi("Running", conditions=vmi_conditions), pod, NOW)
    if expected is None:
        assert gate_condition is None
        return
    status, reason, message = expected
    wanted = {"status": status, "reason": reason, "message": message, "lastProbeTime": NOW, "lastTransitionTime": NOW}
    assert gate_condition == {"type": c.UNPAUSED_READINESS_GATE, **wanted}


@pytest.mark.parametrize(
    ("phase", "terminating", "pod"),
    [
        ("", False, None),
        ("Pending", False, make_pod()),
        ("Scheduling", False, ready_pod()),
        ("Scheduling", False, make_pod(conditions=[{"type": "PodScheduled", "status": "False", "reason": "x"}])),
        ("Running", False, ready_pod()),
        ("Succeeded", False, None),
        ("Failed", True, None),
    ],
)
def test_the_cached_vmi_is_left_as_it_was_and_shares_only_its_spec(
    phase: str, terminating: bool, pod: dict[str, Any] | None
) -> None:
    vmi = make_vmi(phase, terminating=terminating, conditions=[{"type": "Ready", "status": "False"}])
    vmi["metadata"]["labels"] = {"a": "b"}
    before = copy.deepcopy(vmi)
    update = status_of(vmi, pod, sync_error=SyncError("boom", "FailedCreate"))
    assert vmi == before
    assert update.vmi["spec"] is vmi["spec"]
    assert update.vmi["metadata"] is not vmi["metadata"] and update.vmi["status"] is not vmi["status"]
