"""A VirtualMachine's run strategy and its state change requests, as KubeVirt's API types read them.

Upstream `staging/src/kubevirt.io/api/core/v1/types.go`: `VirtualMachine.RunStrategy()`, `StateChangeRequest`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.constants import RUN_STRATEGY_ALWAYS, RUN_STRATEGY_HALTED
from pykubevirt.api.objects import status

START_REQUEST = "Start"
STOP_REQUEST = "Stop"
START_REQUEST_PAUSED_KEY = "paused"
START_REQUEST_PAUSED_TRUE = "true"


class RunStrategyError(ValueError):
    """The VM's spec names no single run strategy."""


def run_strategy(vm: Mapping[str, Any]) -> str:
    """KubeVirt's `VirtualMachine.RunStrategy()`: `running` maps to Always/Halted, neither set means Halted."""
    spec = vm.get("spec") or {}
    running = spec.get("running")
    strategy = spec.get("runStrategy")
    if running is not None and strategy is not None:
        raise RunStrategyError("running and runstrategy are mutually exclusive")
    if running is not None:
        return RUN_STRATEGY_ALWAYS if running is True else RUN_STRATEGY_HALTED
    if strategy is not None:
        return str(strategy)
    return RUN_STRATEGY_HALTED


def run_strategy_or_none(vm: Mapping[str, Any]) -> str | None:
    """`run_strategy`, or None where upstream's callers log the error and carry on."""
    try:
        return run_strategy(vm)
    except RunStrategyError:
        return None


def state_change_requests(vm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VM's status.stateChangeRequests (a copy of the list)."""
    return list(status(vm).get("stateChangeRequests") or [])
