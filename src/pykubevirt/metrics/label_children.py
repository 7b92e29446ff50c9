"""A metric's children kept by their label values, so a hot path skips prometheus_client's checks and lock."""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)


class LabelChildren(Generic[M]):
    """`children(*values)` is `metric.labels(*values)`, looked up in a dict once the child exists.

    Only for label values drawn from a small set (verbs, URL templates, codes): every child ever asked for is kept, as
    the metric itself keeps it. Nothing here removes children, so a kept one is always the metric's own.
    """

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child
