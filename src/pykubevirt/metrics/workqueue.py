"""Work-queue metrics as KubeVirt exports client-go's (`kubevirt_workqueue_*`, label `name`: the queue's name).

A queue with a name reports here (client/workqueue.py calls the hooks); depth, unfinished work and the longest
running processor are read from the live queues at scrape time, as client-go's metrics provider computes them.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# client-go's workqueue histograms: 1 µs to 10 s in powers of ten.
BUCKETS = (1e-08, 1e-07, 1e-06, 1e-05, 1e-04, 0.001, 0.01, 0.1, 1.0, 10.0)

ADDS = Counter("kubevirt_workqueue_adds", "Total number of adds handled by workqueue", ["name"])
RETRIES = Counter("kubevirt_workqueue_retries", "Total number of retries handled by workqueue", ["name"])
QUEUE_DURATION = Histogram(
    "kubevirt_workqueue_queue_duration_seconds",
    "How long an item stays in workqueue before being requested.",
    ["name"],
    buckets=BUCKETS,
)
WORK_DURATION = Histogram(
    "kubevirt_workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name"],
    buckets=BUCKETS,
)


class QueueMetrics:
    """One named queue's observations: when each item was added and when its processing began."""

    def __init__(self, name: str) -> None:
        self.name = name
        # The queue's own children, looked up once rather than on every add, get and done.
        self._adds = ADDS.labels(name)
        self._retries = RETRIES.labels(name)
        self._queue_duration = QUEUE_DURATION.labels(name)
        self._work_duration = WORK_DURATION.labels(name)
        self.depth = 0
        self._added: dict[object, float] = {}
        self._processing: dict[object, float] = {}
        _LIVE.add(self)

    def added(self, item: object) -> None:
        self._adds.inc()
        self.depth += 1
        self._added.setdefault(item, time.monotonic())

    def started(self, item: object) -> None:
        now = time.monotonic()
        self.depth = max(0, self.depth - 1)
        queued = self._added.pop(item, None)
        if queued is not None:
            self._queue_duration.observe(now - queued)
        self._processing[item] = now

    def finished(self, item: object) -> None:
        began = self._processing.pop(item, None)
        if began is not None:
            self._work_duration.observe(time.monotonic() - began)

    def retried(self) -> None:
        self._retries.inc()

    def unfinished(self, now: float) -> tuple[float, float]:
        """Seconds of work in progress, and the longest a processor has been running."""
        spans = [now - began for began in self._processing.values()]
        return sum(spans), max(spans, default=0.0)


_LIVE: weakref.WeakSet[QueueMetrics] = weakref.WeakSet()


class _LiveQueues(Collector):
    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("kubevirt_workqueue_depth", "Current depth of workqueue", labels=["name"])
        unfinished = GaugeMetricFamily(
            "kubevirt_workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by work_duration. "
            "Large values indicate stuck threads. One can deduce the number of stuck threads by observing the "
            "rate at which this increases.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "kubevirt_workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=["name"],
        )
        now = time.monotonic()
        for queue in list(_LIVE):
            total, longest_span = queue.unfinished(now)
            depth.add_metric([queue.name], queue.depth)
            unfinished.add_metric([queue.name], total)
            longest.add_metric([queue.name], longest_span)
        yield from (depth, unfinished, longest)


REGISTRY.register(_LiveQueues())
