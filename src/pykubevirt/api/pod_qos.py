"""A pod's QoS class as Kubernetes' GetPodQOS computes it: Guaranteed, Burstable or BestEffort."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from pykubevirt.api.quantity import Quantity, QuantityError

_QOS_RESOURCES = frozenset({"cpu", "memory"})


def _amount(value: Any) -> Fraction:
    # A quantity that does not parse counts as unset: the class of a pod being rejected for it does not matter.
    try:
        return Quantity.parse(value).value
    except QuantityError:
        return Fraction(0)


def qos_class(pod_spec: Mapping[str, Any]) -> str:
    """Only cpu and memory count; a missing request defaults to the limit, as the API server's defaulting does."""
    containers = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    amounts = tuple(_container_amounts(container) for container in containers)
    try:
        return _class_of(amounts)
    except TypeError:  # an amount that is not hashable (a pod about to be refused for it)
        return _class_of.__wrapped__(amounts)


# A container's cpu and memory limits and requests, as (resource, amount) pairs.
_Amounts = tuple[tuple[str, Any], ...]


def _container_amounts(container: Mapping[str, Any]) -> tuple[_Amounts, _Amounts]:
    resources = container.get("resources") or {}
    return _qos_items(resources.get("limits")), _qos_items(resources.get("requests"))


def _qos_items(amounts: Any) -> _Amounts:
    # A boolean is no amount, but it equals 1 or 0 as a cache key: it goes in as its text, which does not parse either.
    return tuple((k, repr(v) if type(v) is bool else v) for k, v in (amounts or {}).items() if k in _QOS_RESOURCES)


@functools.lru_cache(maxsize=128)
def _class_of(amounts: tuple[tuple[_Amounts, _Amounts], ...]) -> str:
    # Every launcher pod of a kind asks for the same amounts, and their exact sums took 70 µs a launcher pod (1 % of
    # the API server's CPU a start): the class is worked out once for each set of amounts.
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for limit_items, request_items in amounts:
        container_limits = dict(limit_items)
        container_requests = dict(container_limits)
        container_requests.update(request_items)
        for name, value in container_requests.items():
            if amount := _amount(value):
                requests[name] = requests.get(name, Fraction(0)) + amount
        found = set()
        for name, value in container_limits.items():
            if amount := _amount(value):
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + amount
        if not _QOS_RESOURCES <= found:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(n) == a for n, a in requests.items()):
        return "Guaranteed"
    return "Burstable"
