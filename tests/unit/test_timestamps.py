"""metav1.Time's text, which format_time keeps for the last second it formatted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from pykubevirt.api.timestamps import format_time, parse_time


def _reference(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_each_value_gets_its_own_second_whatever_came_before() -> None:
    base = datetime(2026, 12, 5, 7, 59, 59, tzinfo=UTC)
    values = [
        base,
        base + timedelta(microseconds=999_999),  # the same second, from the kept text
        base + timedelta(seconds=1),  # the next second: not the kept text
        base + timedelta(microseconds=999_999),  # back again
        base.replace(tzinfo=None),  # naive means UTC
        datetime(2026, 12, 5, 9, 0, 0, 1, tzinfo=timezone(timedelta(hours=1))),  # another zone, the next second
        datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),  # before 1970: the floor, not the truncation
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2300, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC),  # past 2^32 s: made afresh
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ]
    assert [format_time(v) for v in values] == [_reference(v) for v in values]
    assert format_time(values[5]) == "2026-12-05T08:00:00Z"


def test_text_reads_back_as_the_same_second() -> None:
    value = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    assert parse_time(format_time(value)) == value.replace(microsecond=0)
