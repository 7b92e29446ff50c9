"""Watches: fan-out of committed events to watchers, replay from a resourceVersion, selector transitions, bookmarks."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.apiserver.query_options import reached
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.selectors import FieldSelector
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import ADDED, DELETED, MODIFIED, Compacted, Event

BOOKMARK = "BOOKMARK"
ERROR = "ERROR"
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"
BOOKMARK_INTERVAL_SECONDS = 30.0
# A watcher this far behind is closed; the client re-watches from its last resourceVersion, as with kube-apiserver.
MAX_PENDING_EVENTS = 10000
# Initial and replayed events go out this many at a time.
REPLAY_BATCH = 100
WatchItem = tuple[str, dict[str, Any], bytes | None]


@dataclass(eq=False, slots=True)
class Watcher:
    resource: Resource
    namespace: str | None
    label_selector: LabelSelector | None
    field_selector: FieldSelector | None
    pending: collections.deque[Event] = field(default_factory=collections.deque)
    overflowed: bool = False
    # Set while the watch waits for an event: the next offer wakes it (cheaper than a queue getter and its timeout).
    _wake: asyncio.Future[None] | None = None

    def offer(self, event: Event) -> None:
        if self.overflowed:
            return
        if len(self.pending) >= MAX_PENDING_EVENTS:
            self.overflowed = True
            return
        self.pending.append(event)
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def wait(self, seconds: float) -> None:
        """Return once an event is pending, or after `seconds`."""
        if self.pending:
            return
        loop = asyncio.get_running_loop()
        wake = self._wake = loop.create_future()
        timer = loop.call_later(seconds, _release, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self._wake = None

    def take_ready(self, last: int) -> tuple[list[WatchItem], int]:
        """The pending events after revision `last` as this watcher sees them, and the last revision taken."""
        taken = self.take(self.pending, last)  # translating never adds to pending: nothing awaits in between
        self.pending.clear()
        return taken

    def take(self, events: Iterable[Event], last: int) -> tuple[list[WatchItem], int]:
        """`events` after revision `last` as this watcher sees them, and the last revision looked at."""
        batch: list[WatchItem] = []
        for event in events:
            if event.revision <= last:
                continue
            last = event.revision
            translated = self.translate(event)
            if translated is not None:
                batch.append(_with_encoding(translated, event))
        return batch, last

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if self.label_selector is not None and not self.label_selector.matches(meta.get("labels")):
            return False
        return self.field_selector is None or self.field_selector.matches(obj)

    def translate(self, event: Event) -> tuple[str, dict[str, Any]] | None:
        """The event as this watcher sees it, given its selectors (objects entering or leaving the selection)."""
        now_matches = self._matches(event.value)
        if event.type == ADDED:
            return (ADDED, event.value) if now_matches else None
        if event.type == DELETED:
            return (DELETED, event.value) if now_matches else None
        before = self._matches(event.previous)
        if now_matches and before:
            return MODIFIED, event.value
        if now_matches:
            return ADDED, event.value
        if before and event.previous is not None:
            # Leaving the selection is a deletion of the previous content, at the revision of the change.
            gone = copy_json(event.previous)
            gone.setdefault("metadata", {})["resourceVersion"] = str(event.revision)
            return DELETED, gone
        return None


class WatchHub:
    """Routes every committed event to the watchers of its collection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._watchers: dict[str, set[Watcher]] = {}
        store.add_listener(self._dispatch)

    def _dispatch(self, event: Event) -> None:
        for watcher in self._watchers.get(event.collection, ()):
            watcher.offer(event)

    def register(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: LabelSelector | None,
        field_selector: FieldSelector | None,
    ) -> Watcher:
        watcher = Watcher(resource, namespace, label_selector, field_selector)
        self._watchers.setdefault(resource.collection, set()).add(watcher)
        return watcher

    def unregister(self, watcher: Watcher) -> None:
        watchers = self._watchers.get(watcher.resource.collection)
        if watchers is not None:
            watchers.discard(watcher)

    def watcher_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())


def bookmark(resource: Resource, revision: int, *, initial_events_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if initial_events_end:
        meta["annotations"] = {INITIAL_EVENTS_END_ANNOTATION: "true"}
    return {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": meta}


def _delivered_through(watcher: Watcher, last: int, store: Store) -> int:
    """The revision a bookmark may promise: every event up to it has been sent to this watcher.

    Committed events reach every watcher's queue in the commit's own turn, so with the queue empty the watcher has
    all the store has announced. With events still queued (a client behind), only `last` is safe: a bookmark past
    them would make the client re-watch after them, and they would be lost to it for good.
    """
    return max(last, store.announced_revision) if not watcher.pending else last


async def watch_events(
    hub: WatchHub,
    resource: Resource,
    namespace: str | None,
    *,
    label_selector: LabelSelector | None,
    field_selector: FieldSelector | None,
    resource_version: str,
    send_initial_events: bool,
    allow_bookmarks: bool,
    timeout_seconds: float,
) -> AsyncIterator[list[WatchItem]]:
    """Batches of (type, object, the object's JSON when the store had it): the initial or replayed events, then the
    live ones as they become ready, until the timeout or an overflow."""
    store = hub.store
    watcher = hub.register(resource, namespace, label_selector, field_selector)
    try:
        if resource_version in ("", "0") or send_initial_events:
            last = store.revision
            items = _initial_items(store, watcher, namespace, last, send_initial_events=send_initial_events)
        else:
            start = int(resource_version)
            if start > store.revision and not await reached(store, start):
                # A revision from the future (another server's, or made up): kube's watch cache waits for it a
                # while, then ends the watch with this error rather than skip the events up to it.
                yield [(ERROR, errors.too_large_resource_version(start, store.revision).status(), None)]
                return
            try:
                items, last = watcher.take(store.events_since(start, resource.collection), start)
            except Compacted as exc:
                yield [(ERROR, errors.expired(str(exc)).status(), None)]
                return
        for at in range(0, len(items), REPLAY_BATCH):
            yield items[at : at + REPLAY_BATCH]
        deadline = time.monotonic() + timeout_seconds
        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL_SECONDS
        while True:
            if watcher.overflowed:
                return
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                if allow_bookmarks:
                    yield [(BOOKMARK, bookmark(resource, _delivered_through(watcher, last, store)), None)]
                return
            if not watcher.pending:
                wait = min(remaining, max(next_bookmark - now, 0.0)) if allow_bookmarks else remaining
                await watcher.wait(wait)
                if not watcher.pending:
                    if allow_bookmarks and time.monotonic() >= next_bookmark:
                        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL_SECONDS
                        yield [(BOOKMARK, bookmark(resource, _delivered_through(watcher, last, store)), None)]
                    continue
            # Every event ready now goes out as one batch: one write to the client, not one each.
            batch, last = watcher.take_ready(last)
            if batch:
                yield batch
    finally:
        hub.unregister(watcher)


def _initial_items(
    store: Store, watcher: Watcher, namespace: str | None, revision: int, *, send_initial_events: bool
) -> list[WatchItem]:
    """The stored objects the watcher selects, as ADDED events; with sendInitialEvents, the bookmark ending them."""
    resource = watcher.resource
    items: list[WatchItem] = [
        (ADDED, record.value, None)
        for record in store.records(resource.collection, resource.namespace_prefix(namespace))
        if watcher._matches(record.value)
    ]
    if send_initial_events:
        items.append((BOOKMARK, bookmark(resource, revision, initial_events_end=True), None))
    return items


def _release(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


def _with_encoding(translated: tuple[str, dict[str, Any]], event: Event) -> WatchItem:
    kind, obj = translated
    return kind, obj, event.encoded if obj is event.value else None
