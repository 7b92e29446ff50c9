"""Reading nested JSON objects the way Go reads typed structs: a missing level is simply absent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def get(obj: Any, *path: str) -> Any:
    """Follow `path` through nested mappings; None as soon as a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj
