"""The two-way strategic merge patch a node writes its pod status with, applied by the API server's strategic merge."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.api.strategic_merge_diff import POD_STATUS_MERGE_KEYS, two_way_merge_patch
from pykubevirt.apiserver import patching


def _status(conditions: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"phase": "Pending", "conditions": conditions, **fields}


def _apply(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    result = patching.apply({"status": target}, {"status": patch}, patching.STRATEGIC_MERGE_PATCH, builtin=True)
    return result["status"]


def _by_type(status: dict[str, Any]) -> dict[str, Any]:
    return {c["type"]: c for c in status.get("conditions") or []}


SCHEDULED = {"type": "PodScheduled", "status": "True"}
NOT_READY = {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers not ready"}
READY = {"type": "Ready", "status": "True"}
WAITING = [{"name": "compute", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]
RUNNING = [{"name": "compute", "ready": True, "state": {"running": {"startedAt": "2026-12-05T10:00:00Z"}}}]

CASES = {
    "unchanged": (_status([SCHEDULED]), _status([SCHEDULED])),
    "phase and containers": (
        _status([SCHEDULED, NOT_READY], containerStatuses=WAITING),
        _status([SCHEDULED, READY], phase="Running", containerStatuses=RUNNING, podIP="10.0.0.2"),
    ),
    "a condition added": (_status([SCHEDULED]), _status([SCHEDULED, NOT_READY])),
    "a condition removed": (_status([SCHEDULED, NOT_READY]), _status([SCHEDULED])),
    "a field dropped": (_status([SCHEDULED], reason="Evicted", podIP="10.0.0.2"), _status([SCHEDULED])),
    "pod IPs": (
        _status([], podIPs=[{"ip": "10.0.0.2"}]),
        _status([], podIP="fd00::2", podIPs=[{"ip": "fd00::2"}, {"ip": "10.0.0.3"}]),
    ),
}


@pytest.mark.parametrize(("old", "new"), CASES.values(), ids=CASES.keys())
def test_the_patch_turns_the_old_status_into_the_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    patch = two_way_merge_patch(old, new, POD_STATUS_MERGE_KEYS)
    applied = _apply(old, patch)
    assert {k: v for k, v in applied.items() if k != "conditions"} == {
        k: v for k, v in new.items() if k != "conditions"
    }
    assert _by_type(applied) == _by_type(new)


@pytest.mark.parametrize(("old", "new"), CASES.values(), ids=CASES.keys())
def test_a_condition_another_writer_added_meanwhile_survives(old: dict[str, Any], new: dict[str, Any]) -> None:
    gate = {"type": "kubevirt.io/virtual-machine-unpaused", "status": "True"}
    patch = two_way_merge_patch(old, new, POD_STATUS_MERGE_KEYS)
    applied = _apply({**old, "conditions": [*old["conditions"], gate]}, patch)
    assert _by_type(applied) == {**_by_type(new), gate["type"]: gate}


def test_only_what_changed_is_sent() -> None:
    old = _status([SCHEDULED, NOT_READY], containerStatuses=WAITING, qosClass="Burstable")
    new = _status([SCHEDULED, READY], phase="Running", containerStatuses=RUNNING, qosClass="Burstable")
    assert two_way_merge_patch(old, new, POD_STATUS_MERGE_KEYS) == {
        "phase": "Running",
        # Keyed by type: the changed condition alone, its dropped fields as nulls.
        "conditions": [{"type": "Ready", "status": "True", "reason": None, "message": None}],
        # containerStatuses has no merge key (atomic): the whole list.
        "containerStatuses": RUNNING,
    }


def test_a_reordered_keyed_list_and_a_null_member_are_no_change() -> None:
    old = _status([SCHEDULED, READY])
    new = {**_status([READY, SCHEDULED]), "message": None}
    assert two_way_merge_patch(old, new, POD_STATUS_MERGE_KEYS) == {}


def test_a_removed_condition_is_a_delete_directive() -> None:
    patch = two_way_merge_patch(_status([SCHEDULED, NOT_READY]), _status([SCHEDULED]), POD_STATUS_MERGE_KEYS)
    assert patch == {"conditions": [{"type": "Ready", "$patch": "delete"}]}


def test_a_list_without_its_merge_key_in_every_item_is_sent_whole() -> None:
    old = _status([{"status": "True"}])
    new = _status([{"status": "False"}])
    assert two_way_merge_patch(old, new, POD_STATUS_MERGE_KEYS) == {"conditions": [{"status": "False"}]}


def test_the_server_replaces_an_atomic_list_whole() -> None:
    # A keyed merge of containerStatuses would leave the old `waiting` state beside the new `running` one.
    applied = _apply(_status([], containerStatuses=WAITING), {"containerStatuses": RUNNING})
    assert applied["containerStatuses"] == RUNNING
