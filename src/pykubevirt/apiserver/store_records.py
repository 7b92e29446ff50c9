"""What the embedded store holds and tells: records, committed events, its errors and the names of its rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"


class StoreError(Exception):
    """Base of the store's errors."""


class NotFound(StoreError):
    pass


class ChangedInPlace(StoreError):
    """A stored object was changed after it was written (a bug: every writer must copy what it changes)."""


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    """The object changed since the revision the writer started from."""


class Compacted(StoreError):
    """The requested revision is older than the retained history."""

    def __init__(self, requested: int, compact_revision: int) -> None:
        super().__init__(f"too old resource version: {requested} ({compact_revision})")
        self.requested = requested
        self.compact_revision = compact_revision


@dataclass(frozen=True, slots=True)
class Record:
    """The latest version of one object: its key, the revision that wrote it and the object."""

    collection: str
    key: str
    revision: int
    create_revision: int
    value: dict[str, Any]
    # When the object expires (UNIX seconds); 0 for objects without a lease.
    lease: float = 0


@dataclass(frozen=True, slots=True)
class Event:
    """One committed change. `previous` is the object before the change (None for ADDED)."""

    type: str
    collection: str
    key: str
    revision: int
    value: dict[str, Any]
    previous: dict[str, Any] | None
    # `value` as JSON, when the commit had it encoded already (its row): a watch sends these bytes as they are.
    encoded: bytes | None = None


Listener = Callable[[Event], None]
# A row of the kine table, in COLUMNS' order.
Row = tuple[int, str, int, int, int, int, float, str]


class Past(NamedTuple):
    """A change in the ring: its row's text, and the revision of the version it replaced (0 for a create)."""

    type: str
    collection: str
    key: str
    revision: int
    replaced: int
    text: str


def full_name(collection: str, key: str) -> str:
    return f"{collection}\x00{key}"


def split_name(name: str) -> tuple[str, str]:
    collection, _, key = name.partition("\x00")
    return collection, key


def without_resource_version(value: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of `value` whose metadata has no resourceVersion (to compare versions, or to set a new one)."""
    metadata = {k: v for k, v in (value.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**value, "metadata": metadata}


def with_revision(value: dict[str, Any], revision: int) -> dict[str, Any]:
    metadata = value.setdefault("metadata", {})
    metadata["resourceVersion"] = str(revision)
    return value
