"""client-go's rate-limited work queue for asyncio: a key is never processed twice at once and bursts coalesce.

`add` marks a key dirty; `get` hands it to one worker and moves it to processing; `done` releases it and re-queues
it if it got dirty meanwhile. Failed keys come back after a per-item exponential delay, bounded overall by a
token bucket, as `DefaultControllerRateLimiter` does.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

from pykubevirt.metrics.workqueue import QueueMetrics

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers should return."""


class ItemExponentialFailureRateLimiter(Generic[K]):
    """Delay base·2^failures for an item, capped at `max_delay`."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[K, int] = {}

    def when(self, item: K) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        delay: float = self.base_delay * (2.0**failures)
        return min(delay, self.max_delay)

    def forget(self, item: K) -> None:
        self._failures.pop(item, None)

    def retries(self, item: K) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """An overall ceiling on retries: `qps` a second with bursts of `burst`."""

    def __init__(self, qps: float = 10.0, burst: int = 100) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()

    def when(self) -> float:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps


class RateLimiter(Generic[K]):
    """The larger of the item's exponential delay and the bucket's delay."""

    def __init__(
        self, item: ItemExponentialFailureRateLimiter[K] | None = None, bucket: BucketRateLimiter | None = None
    ):
        self.item = item or ItemExponentialFailureRateLimiter()
        self.bucket = bucket or BucketRateLimiter()

    def when(self, key: K) -> float:
        return max(self.item.when(key), self.bucket.when())

    def forget(self, key: K) -> None:
        self.item.forget(key)

    def retries(self, key: K) -> int:
        return self.item.retries(key)


class WorkQueue(Generic[K]):
    """Dirty/processing queue with delayed and rate-limited adds."""

    def __init__(self, rate_limiter: RateLimiter[K] | None = None, *, name: str = "") -> None:
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._wakeup = asyncio.Event()
        self._shutting_down = False
        self.rate_limiter: RateLimiter[K] = rate_limiter or RateLimiter()
        # A named queue reports kubevirt_workqueue_* metrics under its name.
        self.metrics = QueueMetrics(name) if name else None

    def __len__(self) -> int:
        return len(self._queue)

    def pending(self, item: K) -> bool:
        """Whether `item` is queued or being processed (a delayed add not yet due does not count)."""
        return item in self._dirty or item in self._processing

    def add(self, item: K) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if item in self._processing:
            return
        self._push(item)

    def _push(self, item: K) -> None:
        self._queue.append(item)
        if self.metrics is not None:
            self.metrics.added(item)
        self._wakeup.set()

    def add_after(self, item: K, delay: float) -> None:
        """Add `item` once `delay` seconds passed; an earlier pending add of the same item wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        due = time.monotonic() + delay
        pending = self._waiting.get(item)
        if pending is not None:
            if pending[0] <= due:
                return
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._fire, item)
        self._waiting[item] = (due, handle)

    def _fire(self, item: K) -> None:
        self._waiting.pop(item, None)
        self.add(item)

    def add_rate_limited(self, item: K) -> None:
        if self.metrics is not None:
            self.metrics.retried()
        self.add_after(item, self.rate_limiter.when(item))

    def forget(self, item: K) -> None:
        self.rate_limiter.forget(item)

    def retries(self, item: K) -> int:
        return self.rate_limiter.retries(item)

    async def get(self) -> K:
        """The next item to process; raises ShutDown once the queue is shut down and drained."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDown
            self._wakeup.clear()
            await self._wakeup.wait()
        item = self._queue.popleft()
        self._processing.add(item)
        self._dirty.discard(item)
        if self.metrics is not None:
            self.metrics.started(item)
        return item

    def done(self, item: K) -> None:
        self._processing.discard(item)
        if self.metrics is not None:
            self.metrics.finished(item)
        if item in self._dirty:
            self._push(item)

    def shutdown(self) -> None:
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        self._wakeup.set()
