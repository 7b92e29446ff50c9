"""How Go's encoding/json names a JSON value in an UnmarshalTypeError ("cannot unmarshal number into …"). Pure."""

from __future__ import annotations

from typing import Any


def go_json_value(value: Any) -> str:
    """bool, number, string, array or object: the `Value` of Go's UnmarshalTypeError for this decoded JSON value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
