"""Start-failure backoff, mirroring the `crashloop backoff tests` of KubeVirt's vm_test.go."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.api.timestamps import format_time
from pykubevirt.controller.crash_loop import (
    backoff_remaining,
    should_clear_start_failure,
    start_backoff_seconds,
    sync_start_failure,
    vmi_failed_early,
    was_vmi_in_running_phase,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def lowest(a: int, b: int) -> int:
    return a


def highest(a: int, b: int) -> int:
    return b


@pytest.mark.parametrize(
    ("fail_count", "low", "high"),
    [(0, 10, 15), (1, 10, 15), (2, 40, 60), (3, 90, 135), (4, 160, 240), (5, 250, 300), (6, 300, 300), (20, 300, 300)],
)
def test_backoff_delay_ranges(fail_count: int, low: int, high: int) -> None:
    rng = random.Random(fail_count)
    delays = {start_backoff_seconds(fail_count, randint=rng.randint) for _ in range(1000)}
    assert min(delays) >= low
    assert max(delays) <= high
    assert start_backoff_seconds(fail_count, randint=lowest) == low
    assert start_backoff_seconds(fail_count, randint=highest) == high


def test_backoff_with_default_random_source_stays_in_range() -> None:
    for _ in range(1000):
        assert 40 <= start_backoff_seconds(2) <= 60


def test_backoff_asks_for_an_inclusive_random_range() -> None:
    calls: list[tuple[int, int]] = []

    def record(a: int, b: int) -> int:
        calls.append((a, b))
        return 3

    assert start_backoff_seconds(2, randint=record) == 43
    assert calls == [(0, 20)]


def test_backoff_scales_with_max_delay() -> None:
    # maxDelay 600 gives an interval of 20 s; small maxima keep the 10 s floor.
    assert start_backoff_seconds(1, max_delay=600, randint=lowest) == 20
    assert start_backoff_seconds(2, max_delay=600, randint=lowest) == 80
    assert start_backoff_seconds(1, max_delay=60, randint=lowest) == 10
    assert start_backoff_seconds(3, max_delay=60, randint=lowest) == 60


def make_vm(strategy: str = "Always", start_failure: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if start_failure is not None:
        status["startFailure"] = start_failure
    return {"metadata": {"name": "vm"}, "spec": {"runStrategy": strategy}, "status": status}


def make_vmi(phase: str, uid: str = "123", ran: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "phaseTransitionTimestamps": [{"phase": "Pending"}]}
    if ran:
        status["phaseTransitionTimestamps"].append({"phase": "Running"})
    return {"metadata": {"name": "vm", "uid": uid}, "status": status}


OLD_RETRY = format_time(NOW - timedelta(seconds=300))


def test_tracks_start_failure_of_a_vmi_that_never_ran() -> None:
    failure = sync_start_failure(make_vm(), make_vmi("Failed", "123"), "Always", NOW, randint=lowest)
    assert failure == {
        "consecutiveFailCount": 1,
        "lastFailedVMIUID": "123",
        "retryAfterTimestamp": "2024-05-01T12:00:10Z",
    }


def test_succeeded_without_running_is_a_start_failure_too() -> None:
    failure = sync_start_failure(make_vm("Once"), make_vmi("Succeeded", "123"), "Once", NOW, randint=lowest)
    assert failure is not None
    assert failure["consecutiveFailCount"] == 1


def test_tracks_a_new_failure_of_a_new_vmi() -> None:
    vm = make_vm(start_failure={"lastFailedVMIUID": "123", "consecutiveFailCount": 1, "retryAfterTimestamp": OLD_RETRY})
    failure = sync_start_failure(vm, make_vmi("Failed", "456"), "Always", NOW, randint=highest)
    assert failure == {
        "consecutiveFailCount": 2,
        "lastFailedVMIUID": "456",
        "retryAfterTimestamp": "2024-05-01T12:01:00Z",
    }


def test_counts_each_failed_vmi_once() -> None:
    vm = make_vm()
    vmi = make_vmi("Failed", "123")
    first = sync_start_failure(vm, vmi, "Always", NOW, randint=lowest)
    vm["status"]["startFailure"] = first
    later = NOW + timedelta(seconds=5)
    assert sync_start_failure(vm, vmi, "Always", later, randint=highest) == first


def test_consecutive_failures_grow_the_delay() -> None:
    vm = make_vm()
    retries = []
    for count, uid in enumerate(["a", "b", "c", "d", "e", "f"], start=1):
        failure = sync_start_failure(vm, make_vmi("Failed", uid), "Always", NOW, randint=lowest)
        assert failure is not None
        assert failure["consecutiveFailCount"] == count
        vm["status"]["startFailure"] = failure
        retries.append(failure["retryAfterTimestamp"])
    expected = [NOW + timedelta(seconds=s) for s in (10, 40, 90, 160, 250, 300)]
    assert retries == [format_time(t) for t in expected]


def test_retry_timestamp_drops_sub_seconds() -> None:
    now = NOW.replace(microsecond=900000)
    failure = sync_start_failure(make_vm(), make_vmi("Failed"), "Always", now, randint=lowest)
    assert failure is not None
    assert failure["retryAfterTimestamp"] == "2024-05-01T12:00:10Z"


def test_clears_start_failures_once_the_vmi_reached_running() -> None:
    vm = make_vm(start_failure={"lastFailedVMIUID": "123", "consecutiveFailCount": 1, "retryAfterTimestamp": OLD_RETRY})
    assert sync_start_failure(vm, make_vmi("Running", "456", ran=True), "Always", NOW) is None
    # Even when that VMI later failed.
    assert sync_start_failure(vm, make_vmi("Failed", "456", ran=True), "Always", NOW) is None


@pytest.mark.parametrize(
    ("strategy", "kept"),
    [("Halted", False), ("Manual", False), ("WaitAsReceiver", False), ("Always", True), ("RerunOnFailure", True),
     ("Once", True)],
)  # fmt: skip
def test_clears_start_failures_unless_the_strategy_restarts_by_itself(strategy: str, kept: bool) -> None:
    retry = format_time(NOW + timedelta(seconds=300))
    vm = make_vm(strategy, {"lastFailedVMIUID": "123", "consecutiveFailCount": 1, "retryAfterTimestamp": retry})
    failure = sync_start_failure(vm, make_vmi("Failed", "456"), strategy, NOW, randint=lowest)
    if kept:
        assert failure is not None
        assert failure["consecutiveFailCount"] == 2
    else:
        assert failure is None


def test_leaves_start_failure_alone_while_nothing_failed() -> None:
    current = {"lastFailedVMIUID": "123", "consecutiveFailCount": 2, "retryAfterTimestamp": OLD_RETRY}
    vm = make_vm(start_failure=current)
    assert sync_start_failure(vm, None, "Always", NOW) == current
    assert sync_start_failure(vm, make_vmi("Scheduling", "456"), "Always", NOW) == current
    assert sync_start_failure(make_vm(), None, "Always", NOW) is None
    assert sync_start_failure(make_vm(), make_vmi("Pending"), "Always", NOW) is None


def test_unresolvable_strategy_keeps_the_record() -> None:
    current = {"lastFailedVMIUID": "123", "consecutiveFailCount": 1, "retryAfterTimestamp": OLD_RETRY}
    assert sync_start_failure(make_vm(start_failure=current), None, None, NOW) == current


def test_running_phase_helpers() -> None:
    assert not was_vmi_in_running_phase(None)
    assert not was_vmi_in_running_phase(make_vmi("Running"))
    assert was_vmi_in_running_phase(make_vmi("Failed", ran=True))
    assert vmi_failed_early(make_vmi("Failed"))
    assert vmi_failed_early(make_vmi("Succeeded"))
    assert not vmi_failed_early(make_vmi("Failed", ran=True))
    assert not vmi_failed_early(make_vmi("Running"))
    assert not vmi_failed_early(None)
    assert should_clear_start_failure(make_vmi("Running", ran=True), "Always")
    assert should_clear_start_failure(None, "Manual")
    assert not should_clear_start_failure(None, "Once")


@pytest.mark.parametrize(
    ("start_failure", "expected"),
    [
        (None, 0.0),
        ({"consecutiveFailCount": 1}, 0.0),
        ({"retryAfterTimestamp": format_time(NOW + timedelta(seconds=300))}, 300.0),
        ({"retryAfterTimestamp": format_time(NOW - timedelta(seconds=300))}, 0.0),
        ({"retryAfterTimestamp": format_time(NOW)}, 0.0),
        ({"retryAfterTimestamp": "not a time"}, 0.0),
    ],
)
def test_backoff_remaining(start_failure: dict[str, Any] | None, expected: float) -> None:
    assert backoff_remaining(make_vm(start_failure=start_failure), NOW) == expected


def test_backoff_remaining_counts_fractions() -> None:
    vm = make_vm(start_failure={"retryAfterTimestamp": format_time(NOW + timedelta(seconds=10))})
    assert backoff_remaining(vm, NOW + timedelta(seconds=2.5)) == 7.5
