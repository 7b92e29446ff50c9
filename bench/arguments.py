"""Types for the benches' size flags: a size out of range is one argparse error line, not a traceback or a hang."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pykubevirt.api.quantity import Quantity


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


def memory_size(text: str) -> str:
    """A Kubernetes quantity above zero, as a guest's memory is written (128Mi)."""
    try:
        value = Quantity.parse(text).value
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (like 128Mi)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a memory size must be above 0, not {text}")
    return text


def one_of(*names: str) -> Callable[[str], str]:
    """One of `names`."""

    def parse(text: str) -> str:
        if text not in names:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(names)}")
        return text

    return parse


def comma_separated(item: Callable[[str], str]) -> Callable[[str], str]:
    """A comma-separated list, each item checked by `item`; the text as given."""

    def parse(text: str) -> str:
        for part in text.split(","):
            item(part)
        return text

    return parse
