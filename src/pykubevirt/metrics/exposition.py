"""Samples computed per scrape, rendered in Prometheus' text format through prometheus_client.

Per-VMI metrics carry a label set that differs from VMI to VMI (KubeVirt adds each VMI's own labels as
`kubernetes_vmi_label_*`), so they are built as loose samples and grouped into families here rather than declared as
labelled metrics up front.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "Descriptor", "Sample", "families", "render"]


@dataclass(frozen=True)
class Descriptor:
    """A metric's name (counters with their `_total`), Prometheus type and help text."""

    name: str
    kind: str
    help: str


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    value: float = 0.0


def families(catalog: Iterable[Descriptor], samples: Iterable[Sample]) -> list[Metric]:
    """The samples grouped into one family per catalogued metric, in catalogue order; unknown names are dropped."""
    by_name: dict[str, Metric] = {}
    for descriptor in catalog:
        base = descriptor.name.removesuffix("_total") if descriptor.kind == "counter" else descriptor.name
        by_name[descriptor.name] = Metric(base, descriptor.help, descriptor.kind)
    for sample in samples:
        family = by_name.get(sample.name)
        if family is not None:
            family.add_sample(sample.name, dict(sample.labels), sample.value)
    return [family for family in by_name.values() if family.samples]


class _Families(Collector):
    """What generate_latest reads: any object with collect()."""

    def __init__(self, metrics: list[Metric]) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics)


def render(metrics: list[Metric]) -> bytes:
    """The families in Prometheus' text exposition format."""
    return generate_latest(_Families(metrics))
