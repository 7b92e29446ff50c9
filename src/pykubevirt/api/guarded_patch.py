"""JSON patches that change a field only if it still holds what was read, so a concurrent write is refused (409/422)
instead of overwritten."""

from __future__ import annotations

from typing import Any


def guarded_replace(path: str, old: Any, new: Any) -> list[dict[str, Any]]:
    """`test` the value read, then `replace` it."""
    return [{"op": "test", "path": path, "value": old}, {"op": "replace", "path": path, "value": new}]


def guarded_set(path: str, old: Any, new: Any) -> list[dict[str, Any]]:
    """As guarded_replace; an empty value read (a list or map the object may not have at all) is set with an `add`."""
    if not old:
        return [{"op": "add", "path": path, "value": new}]
    return guarded_replace(path, old, new)
