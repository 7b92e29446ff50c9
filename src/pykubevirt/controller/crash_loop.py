"""Start-failure tracking and the CrashLoopBackOff delay between VMI restarts.

Upstream: pkg/virt-controller/watch/vm/vm.go: calculateStartBackoffTime, syncStartFailureStatus.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pykubevirt.api.constants import (
    PHASE_RUNNING,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
)
from pykubevirt.api.objects import as_aware, is_final, uid_of
from pykubevirt.api.timestamps import format_time, parse_time

DEFAULT_MAX_CRASH_LOOP_BACKOFF_DELAY_SECONDS = 300
MIN_BACKOFF_INTERVAL_SECONDS = 10

# Only strategies that restart a failed VMI by themselves back off.
BACKOFF_STRATEGIES = frozenset({RUN_STRATEGY_ALWAYS, RUN_STRATEGY_RERUN_ON_FAILURE, RUN_STRATEGY_ONCE})


def start_backoff_seconds(
    fail_count: int,
    max_delay: int = DEFAULT_MAX_CRASH_LOOP_BACKOFF_DELAY_SECONDS,
    randint: Callable[[int, int], int] = random.randint,
) -> int:
    """Seconds to wait before the next start: interval·count², plus up to half again at random, capped at max_delay."""
    fail_count = max(fail_count, 1)
    # The interval scales with max_delay so that a tuned maximum keeps the curve's shape.
    interval = max(max_delay // 30, MIN_BACKOFF_INTERVAL_SECONDS)
    delay = interval * fail_count**2
    # The random part spreads out VMs that failed together; randint's bounds are inclusive.
    delay += randint(0, delay // 2)
    return min(delay, max_delay)


def was_vmi_in_running_phase(vmi: Mapping[str, Any] | None) -> bool:
    """True when the VMI's phaseTransitionTimestamps record a Running phase."""
    if vmi is None:
        return False
    stamps = (vmi.get("status") or {}).get("phaseTransitionTimestamps") or []
    return any(stamp.get("phase") == PHASE_RUNNING for stamp in stamps)


def vmi_failed_early(vmi: Mapping[str, Any] | None) -> bool:
    """True when the VMI is final (Succeeded or Failed) without ever having run."""
    return is_final(vmi) and not was_vmi_in_running_phase(vmi)


def should_clear_start_failure(vmi: Mapping[str, Any] | None, strategy: str | None) -> bool:
    """Forget start failures once the VMI ran, or when the strategy does not restart by itself."""
    if was_vmi_in_running_phase(vmi):
        return True
    # An unresolvable strategy (None) leaves the record alone, as upstream does on RunStrategy() errors.
    return strategy is not None and strategy not in BACKOFF_STRATEGIES


def sync_start_failure(
    vm: Mapping[str, Any],
    vmi: Mapping[str, Any] | None,
    strategy: str | None,
    now: datetime,
    randint: Callable[[int, int], int] = random.randint,
) -> dict[str, Any] | None:
    """The new `status.startFailure` (None to clear); the current value is returned unchanged when nothing applies."""
    current = (vm.get("status") or {}).get("startFailure")
    if should_clear_start_failure(vmi, strategy):
        return None
    if vmi is None or not vmi_failed_early(vmi):
        return dict(current) if current is not None else None
    uid = uid_of(vmi)
    if current is not None and (current.get("lastFailedVMIUID") or "") == uid:
        # This VMI's failure has been counted already.
        return dict(current)
    count = int(current.get("consecutiveFailCount") or 0) + 1 if current is not None else 1
    delay = start_backoff_seconds(count, DEFAULT_MAX_CRASH_LOOP_BACKOFF_DELAY_SECONDS, randint)
    failure: dict[str, Any] = {"consecutiveFailCount": count}
    if uid:
        failure["lastFailedVMIUID"] = uid
    failure["retryAfterTimestamp"] = format_time(as_aware(now) + timedelta(seconds=delay))
    return failure


def backoff_remaining(vm: Mapping[str, Any], now: datetime) -> float:
    """Seconds until `status.startFailure.retryAfterTimestamp`; 0 when there is none or it has passed."""
    failure = (vm.get("status") or {}).get("startFailure") or {}
    retry_after = parse_time(failure.get("retryAfterTimestamp"))
    if retry_after is None:
        return 0.0
    return max(0.0, (retry_after - as_aware(now)).total_seconds())
