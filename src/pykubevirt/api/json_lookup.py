"""Reading nested JSON objects the way Go reads typed structs: a missing level is simply absent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.api.quantity import Quantity


def get(obj: Any, *path: str) -> Any:
    """Follow `path` through nested mappings; None as soon as a step is missing or not a mapping."""
    for key in path:
        # Decoded JSON is plain dicts: the exact type test spares the ABC check on nearly every step.
        if type(obj) is not dict and not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def as_map(value: Any) -> dict[str, Any]:
    """The value if it is a dict, else an empty dict (Go's zero struct)."""
    return dict(value) if type(value) is dict or isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    """The value if it is a list, else an empty list (Go's nil slice)."""
    return list(value) if isinstance(value, list) else []


def as_str(value: Any) -> str:
    """A string field; anything else reads as Go's zero string."""
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int:
    """An integer field; anything else reads as zero."""
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int) else 0


def parse_quantity(value: Any) -> Quantity | None:
    """The quantity in a field, or None when absent or unparsable (the schema layer rejects those)."""
    if value is None:
        return None
    try:
        return Quantity.parse(value)  # which keeps the strings it parsed
    except ValueError:  # QuantityError, or a number with more digits than int() converts
        return None
