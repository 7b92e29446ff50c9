"""Go's time.ParseDuration, for durations the API carries as strings (metav1.Duration: `5m`, `1h30m`, `250ms`)."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> float:
    """Seconds; ValueError for what Go refuses (`time: invalid duration "x"`, a number without a unit but 0)."""
    body = text
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(body):
        match = _PART.match(body, at)
        if match is None:
            raise ValueError(f'time: invalid duration "{text}"')
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * total
