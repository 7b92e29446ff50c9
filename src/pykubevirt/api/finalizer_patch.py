"""The JSON patch that moves an object's finalizers from one list to another, refused if they changed meanwhile."""

from __future__ import annotations

from typing import Any

from pykubevirt.api.guarded_patch import guarded_set

PATH = "/metadata/finalizers"


def finalizers_patch(old: list[str], new: list[str]) -> list[dict[str, Any]]:
    """`test` the list read, then `replace` it; an object without finalizers gets them with an `add`."""
    return guarded_set(PATH, old, new)
