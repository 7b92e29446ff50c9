"""A pod's QoS class as Kubernetes' GetPodQOS computes it: Guaranteed, Burstable or BestEffort."""

from __future__ import annotations

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
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        container_limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in _QOS_RESOURCES}
        container_requests = dict(container_limits)
        container_requests.update({k: v for k, v in (resources.get("requests") or {}).items() if k in _QOS_RESOURCES})
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
