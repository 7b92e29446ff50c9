"""The work queue keeps client-go's guarantees: one worker per key, bursts coalesce, failures back off."""

from __future__ import annotations

import asyncio

import pytest

from pykubevirt.client import workqueue
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    RateLimiter,
    ShutDown,
    WorkQueue,
)
from tests.support.waiting import consistently


async def test_bursts_coalesce_into_one_item() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"


async def test_a_key_is_never_handed_out_twice_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    first = await queue.get()
    queue.add("a")  # changed while being processed
    assert len(queue) == 0, "the dirty key waits until the worker is done"
    queue.done(first)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_add_after_keeps_the_earliest_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 5.0)
    queue.add_after("a", 0.01)
    item = await asyncio.wait_for(queue.get(), timeout=1.0)
    assert item == "a"


async def test_rate_limited_adds_back_off_exponentially_and_forget_resets() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1.0)
    delays = [limiter.when("a") for _ in range(10)]
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[-1] == 1.0
    assert limiter.retries("a") == 10
    limiter.forget("a")
    assert limiter.when("a") == 0.005


def test_bucket_limits_the_overall_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    # A still clock: a test process descheduled between calls would otherwise refill the bucket.
    monkeypatch.setattr(workqueue.time, "monotonic", lambda: 1000.0)
    bucket = BucketRateLimiter(qps=10, burst=2)
    assert bucket.when() == 0.0
    assert bucket.when() == 0.0
    assert bucket.when() == pytest.approx(0.1)
    assert bucket.when() == pytest.approx(0.2)


def test_combined_limiter_takes_the_larger_delay() -> None:
    item: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1.0, 100.0)
    limiter: RateLimiter[str] = RateLimiter(item, BucketRateLimiter(1000, 1000))
    assert limiter.when("a") == 1.0
    assert limiter.when("a") == 2.0


async def test_shutdown_releases_waiting_workers() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(queue.get())
    await consistently(lambda: not waiter.done(), for_=0.05)  # the worker is waiting in get()
    queue.shutdown()
    with pytest.raises(ShutDown):
        await waiter
    queue.add("late")
    assert len(queue) == 0


def test_expectations_block_until_observed_or_expired() -> None:
    now = [0.0]
    expectations = ControllerExpectations(clock=lambda: now[0], ttl=300)
    assert expectations.satisfied("ns/vm")
    expectations.expect_creations("ns/vm")
    assert not expectations.satisfied("ns/vm")
    assert expectations.pending_creations("ns/vm")
    expectations.creation_observed("ns/vm")
    assert expectations.satisfied("ns/vm")
    expectations.expect_deletion("ns/vm", "ns/vmi")
    assert expectations.pending_deletions("ns/vm")
    now[0] = 301
    assert expectations.satisfied("ns/vm"), "expectations expire so a lost event cannot block a key forever"


def test_expectations_are_withdrawn_when_the_write_fails() -> None:
    expectations = ControllerExpectations()
    with pytest.raises(ConnectionError), expectations.creating("ns/vm"):
        assert not expectations.satisfied("ns/vm")
        raise ConnectionError("connection lost mid-request")
    assert expectations.satisfied("ns/vm"), "a create that may not have happened must not block the key"
    with expectations.deleting("ns/vm", "ns/vmi"):
        pass
    assert expectations.pending_deletions("ns/vm"), "a delete that went through waits to be observed"


def test_a_tracked_deletion_is_observed_once_however_many_events_show_it() -> None:
    expectations = ControllerExpectations()
    with expectations.deleting("ns/vmi", "ns/pod-a"), expectations.deleting("ns/vmi", "ns/pod-b"):
        pass
    assert expectations.pending_deletions("ns/vmi")
    # pod-a marked for deletion, then gone: two events, one deletion; pod-b still pending.
    expectations.deletion_observed("ns/vmi", "ns/pod-a")
    expectations.deletion_observed("ns/vmi", "ns/pod-a")
    assert not expectations.satisfied("ns/vmi"), "pod-a's second event must not stand in for pod-b"
    expectations.deletion_observed("ns/vmi", "ns/pod-b")
    assert expectations.satisfied("ns/vmi")
    with pytest.raises(ConnectionError), expectations.deleting("ns/vmi", "ns/pod-c"):
        raise ConnectionError("connection lost mid-request")
    assert expectations.satisfied("ns/vmi"), "a delete that may not have happened must not block the key"


async def test_pending_covers_queued_and_processing_items_only() -> None:
    queue: WorkQueue[str] = WorkQueue()
    assert not queue.pending("a")
    queue.add("a")
    assert queue.pending("a")
    item = await queue.get()
    assert queue.pending(item), "being processed"
    queue.done(item)
    assert not queue.pending("a")
    queue.add_after("b", 60)
    assert not queue.pending("b"), "a delayed add is not due yet"
    queue.shutdown()
