"""Kubernetes timestamps: metav1.Time's RFC 3339 form (UTC, whole seconds, `Z`) written and read."""

from __future__ import annotations

from datetime import UTC, datetime

METAV1_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_time(value: datetime) -> str:
    """An RFC 3339 timestamp in UTC with second precision, as metav1.Time serialises (naive means UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime(METAV1_TIME_FORMAT)


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
