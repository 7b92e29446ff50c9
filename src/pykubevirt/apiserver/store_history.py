"""The changes behind the store's current state, for watches that resume and lists at a past revision.

The newest changes are kept in memory as the JSON text of their rows (decoded only for a replay: as decoded objects
their old versions were a third of the API server's heap); older ones are read back from the table, and rows still
on their way to it from the writes that have not been committed yet.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import json_codec
from pykubevirt.apiserver.store_records import ADDED, DELETED, MODIFIED, Event, Past, Row, split_name, with_revision


class StoreHistory:
    """A ring of the newest changes over the table's rows; reads only, on the event loop's connection."""

    def __init__(self, db: sqlite3.Connection, ring_size: int) -> None:
        self._db = db
        # revision → change, oldest first: replayed in order, and looked up for the version a change replaced.
        self._ring: collections.OrderedDict[int, Past] = collections.OrderedDict()
        self._ring_size = ring_size

    def remember(self, past: Past) -> None:
        if self._ring_size <= 0:
            return
        if len(self._ring) >= self._ring_size:
            self._ring.popitem(last=False)
        self._ring[past.revision] = past

    def row_text(self, revision: int) -> str | None:
        """The text the change at `revision` was stored as, while the ring still holds it."""
        past = self._ring.get(revision)
        return past.text if past is not None else None

    def forget_through(self, revision: int) -> None:
        """Drop the changes at or before `revision` (compacted away)."""
        while (oldest := next(iter(self._ring), None)) is not None and oldest <= revision:
            self._ring.popitem(last=False)

    def events_since(self, revision: int, collection: str | None, unwritten: Mapping[int, Row]) -> list[Event]:
        """The changes after `revision`, oldest first: from the ring when it reaches back that far."""
        oldest = next(iter(self._ring), None)
        if oldest is not None and oldest <= revision + 1:
            return [
                self._replayed(p, unwritten)
                for p in self._ring.values()
                if p.revision > revision and (collection is None or p.collection == collection)
            ]
        return self._events_from_table(revision, collection, unwritten)

    def _replayed(self, past: Past, unwritten: Mapping[int, Row]) -> Event:
        previous = None
        if past.replaced:
            replaced = self._ring.get(past.replaced)
            previous = (
                self._value_at(past.replaced, unwritten)
                if replaced is None
                else with_revision(json_codec.loads(replaced.text), past.replaced)
            )
        value = with_revision(json_codec.loads(past.text), past.revision)
        # The ring holds only rows this process wrote, with their resourceVersion: the text is the value's JSON.
        return Event(past.type, past.collection, past.key, past.revision, value, previous, past.text.encode())

    def _events_from_table(self, revision: int, collection: str | None, unwritten: Mapping[int, Row]) -> list[Event]:
        rows = {
            row[0]: row
            for row in self._db.execute(
                "SELECT id, name, created, deleted, prev_revision, value FROM kine WHERE id > ? ORDER BY id",
                (revision,),
            )
        }
        for rev, name, created, deleted, _, prev_rev, _, text in list(unwritten.values()):
            if rev > revision:
                rows[rev] = (rev, name, created, deleted, prev_rev, text)
        events: list[Event] = []
        for rev, name, created, deleted, prev_rev, value in sorted(rows.values()):
            coll, key = split_name(name)
            if collection is not None and coll != collection:
                continue
            previous = self._value_at(prev_rev, unwritten) if prev_rev and not created else None
            kind = DELETED if deleted else ADDED if created else MODIFIED
            events.append(Event(kind, coll, key, rev, with_revision(json_codec.loads(value), rev), previous))
        return events

    def _value_at(self, revision: int, unwritten: Mapping[int, Row]) -> dict[str, Any] | None:
        row = unwritten.get(revision)
        if row is not None:
            return with_revision(json_codec.loads(row[7]), revision)
        found = self._db.execute("SELECT value FROM kine WHERE id = ?", (revision,)).fetchone()
        return with_revision(json_codec.loads(found[0]), revision) if found else None
