"""Types for the benches' size flags: a size out of range is one argparse error line, not a traceback or a hang."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number no smaller than `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def positive(text: str) -> float:
    """A number above zero (a rate, a duration)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return value


def fraction(text: str) -> float:
    """A share: above 0, at most 1."""
    value = positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be at most 1, not {text}")
    return value
