"""JSON on the hot paths: storage rows, watch events, API responses and the clients' decoding of them.

orjson is several times faster than the json module and writes the same compact text, in UTF-8 rather than with
`\\u` escapes. What orjson refuses (integers beyond 64 bits, keys that are not strings, lone surrogates) falls back
to the json module, so every value still encodes, and every text decodes, as it did with the json module alone.

A `bytes` value inside an object is JSON already encoded and is written as it is: the API server keeps managedFields'
field sets so (`apiserver/fields_v1.py`). JSON itself has no bytes, so no decoded value is mistaken for one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson


def _encoded_json(value: Any) -> orjson.Fragment:
    if type(value) is bytes:
        return orjson.Fragment(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def decoded_json(value: Any) -> Any:
    """The json module's `default` for objects that may hold encoded JSON (bytes)."""
    if type(value) is bytes:
        return json.loads(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any) -> bytes:
    """Compact JSON of `value` as UTF-8 bytes."""
    try:
        return orjson.dumps(value, default=_encoded_json)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, separators=(",", ":"), default=decoded_json).encode()


def dumps_indented(value: Any) -> bytes:
    """JSON of `value` with two-space indents (orjson's), or TypeError for what orjson refuses."""
    return orjson.dumps(value, default=_encoded_json, option=orjson.OPT_INDENT_2)


def dumps_text(value: Any) -> str:
    """Compact JSON of `value` as text."""
    return dumps(value).decode()


def loads_plain(data: bytes | str) -> Any:
    """The value of a JSON text orjson takes; orjson.JSONDecodeError (a ValueError) for anything else.

    What it refuses (NaN and Infinity, numbers that overflow to infinity or beyond 64 bits, lone surrogates, nesting
    past 1,024 levels) is left to `loads` and the checks after it, so a value from here is finite and plain.
    """
    return orjson.loads(data)


def loads(data: bytes | str, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """The value of a JSON text; json.JSONDecodeError (a ValueError) when it is not one.

    `parse_constant` is the json module's hook for NaN and Infinity, which orjson always refuses.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # The json module takes what orjson does not (big integers, lone surrogates, UTF-16, NaN unless
        # parse_constant refuses it) and words the real errors.
        return json.loads(data, parse_constant=parse_constant)
