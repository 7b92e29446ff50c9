"""Go's time.ParseDuration, for durations the API and virtctl carry as strings (metav1.Duration: `5m`, `1h30m`,
`250ms`), with Go's error texts."""

from __future__ import annotations

import re

_SECOND = 10**9
_UNIT_NANOSECONDS = {"ns": 1, "us": 1000, "µs": 1000, "μs": 1000, "ms": 10**6, "s": _SECOND, "m": 60 * _SECOND}
_UNIT_NANOSECONDS["h"] = 3600 * _SECOND
_NUMBER = re.compile(r"([0-9]*)(\.[0-9]*)?")
_UNIT = re.compile(r"[^.0-9]*")
_MAX_DURATION = 2**63 - 1


class GoDurationError(ValueError):
    """What time.ParseDuration refuses, with Go's message."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _leading(pattern: re.Pattern[str], text: str) -> tuple[str, str, str]:
    """The pattern's first group (or whole match) and second group at the start of `text`, and what follows."""
    match = pattern.match(text)
    if match is None:
        return "", "", text
    groups = [g or "" for g in match.groups()] or [match.group(0)]
    return groups[0], groups[1] if len(groups) > 1 else "", text[match.end() :]


def go_duration_nanoseconds(text: str) -> int:
    """time.ParseDuration in nanoseconds; GoDurationError with Go's message for what it refuses."""
    invalid_duration = GoDurationError(f"time: invalid duration {_quote(text)}")
    rest = text[1:] if text[:1] in ("+", "-") else text
    sign = -1 if text[:1] == "-" else 1
    if rest == "0":
        return 0
    if not rest:
        raise invalid_duration
    total = 0
    while rest:
        whole, fraction, rest = _leading(_NUMBER, rest)
        if not whole and len(fraction) <= 1:
            raise invalid_duration
        unit, _, rest = _leading(_UNIT, rest)
        if not unit:
            raise GoDurationError(f"time: missing unit in duration {_quote(text)}")
        if unit not in _UNIT_NANOSECONDS:
            raise GoDurationError(f"time: unknown unit {_quote(unit)} in duration {_quote(text)}")
        scale = _UNIT_NANOSECONDS[unit]
        total += int(whole or "0") * scale
        if fraction[1:]:
            total += int(fraction[1:]) * scale // 10 ** len(fraction[1:])
        if total > _MAX_DURATION:
            raise invalid_duration
    return sign * total


def parse_go_duration(text: str) -> float:
    """Seconds; GoDurationError (a ValueError) for what Go refuses."""
    return go_duration_nanoseconds(text) / _SECOND
