"""Kubernetes timestamps: metav1.Time's RFC 3339 form (UTC, whole seconds, `Z`) written and read."""

from __future__ import annotations

import math
from datetime import UTC, datetime

METAV1_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# The last second formatted and its text: a busy server stamps many objects within one second, and strftime costs
# more than the lookup.
_last_formatted: tuple[int, str] = (0, "1970-01-01T00:00:00Z")
# Within 2^32 s of 1970 (until the year 2106) a float timestamp keeps the last microsecond of a second below the
# next second, so its floor is the second; beyond, the text is made afresh.
_EXACT_SECONDS = 2**32


def format_time(value: datetime) -> str:
    """An RFC 3339 timestamp in UTC with second precision, as metav1.Time serialises (naive means UTC)."""
    global _last_formatted
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    stamp = value.timestamp()
    if not -_EXACT_SECONDS < stamp < _EXACT_SECONDS:
        return value.astimezone(UTC).strftime(METAV1_TIME_FORMAT)
    second = math.floor(stamp)
    last = _last_formatted
    if last[0] == second:
        return last[1]
    text = value.astimezone(UTC).strftime(METAV1_TIME_FORMAT)
    _last_formatted = (second, text)
    return text


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (naive means UTC); None when absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def now_rfc3339() -> str:
    """The wall-clock time now, as metav1.Time serialises it."""
    return format_time(datetime.now(UTC))
