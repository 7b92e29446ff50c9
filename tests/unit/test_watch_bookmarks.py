"""A watch's bookmark never promises events the watcher has not been sent yet.

Seen under bench.control_plane with 8,000 VMs: a client behind its watch (events still queued at the server) got
the timeout's bookmark at the store's newest revision, re-watched from there, and never heard of the queued events:
VMIs stayed Pending and pods unbound for good.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pykubevirt.apiserver.builtin import BUILTIN_RESOURCES
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.watch import WatchHub, watch_events

CONFIGMAPS = next(r for r in BUILTIN_RESOURCES if r.plural == "configmaps")


def _watch(hub: WatchHub, since: int, timeout: float) -> Any:
    return watch_events(
        hub,
        CONFIGMAPS,
        "ns",
        label_selector=None,
        field_selector=None,
        resource_version=str(since),
        send_initial_events=False,
        allow_bookmarks=True,
        timeout_seconds=timeout,
    )


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


async def test_the_closing_bookmark_of_a_watch_behind_does_not_skip_its_queued_events(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    hub = WatchHub(store)
    start = store.revision
    # Long enough for a slow disk's fsync to come before the watch's end, which the test then waits out.
    timeout = 2.0
    events = _watch(hub, start, timeout=timeout)
    first = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)  # the watcher is registered and waits
    store.create(CONFIGMAPS.collection, "ns/cm-0", {"metadata": {"name": "cm-0", "namespace": "ns"}})
    await store.durable()
    [(kind, obj, encoded)] = await first
    assert (kind, _name(obj)) == ("ADDED", "cm-0")
    assert encoded is not None and json.loads(encoded) == obj  # the store's row, sent as it is
    # The client is slow: the watch's time runs out with cm-1 and cm-2 still queued for it.
    for i in (1, 2):
        store.create(CONFIGMAPS.collection, f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}", "namespace": "ns"}})
    await store.durable()
    await asyncio.sleep(timeout + 0.1)
    [(kind, mark, _)] = await anext(events)
    assert kind == "BOOKMARK"
    resumed_from = int(mark["metadata"]["resourceVersion"])
    await events.aclose()
    # The client re-watches from the bookmark, as an informer does, and must still get what it was not sent.
    again = _watch(hub, resumed_from, timeout=0.2)
    seen = [_name(o) for batch in [b async for b in again] for k, o, _ in batch if k == "ADDED"]
    assert seen == ["cm-1", "cm-2"]
    store.close()


async def test_an_idle_watch_bookmarks_the_newest_revision(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    hub = WatchHub(store)
    store.create(CONFIGMAPS.collection, "other/cm", {"metadata": {"name": "cm", "namespace": "other"}})
    await store.durable()
    since = 0 if store.revision == 0 else store.revision - 1
    items = [item async for batch in _watch(hub, since, timeout=0.2) for item in batch]
    assert [(k, int(o["metadata"]["resourceVersion"])) for k, o, _ in items] == [("BOOKMARK", store.revision)]
    store.close()


async def test_the_events_ready_together_reach_the_watch_as_one_batch_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    hub = WatchHub(store)
    events = _watch(hub, store.revision, timeout=5.0)
    first = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)
    for i in range(5):
        store.create(CONFIGMAPS.collection, f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}", "namespace": "ns"}})
    store.create(CONFIGMAPS.collection, "other/cm", {"metadata": {"name": "cm", "namespace": "other"}})
    await store.durable()
    batch = await first
    # One commit's events, in revision order, without the other namespace's.
    assert [(k, _name(o)) for k, o, _ in batch] == [("ADDED", f"cm-{i}") for i in range(5)]
    revisions = [int(o["metadata"]["resourceVersion"]) for _, o, _ in batch]
    assert revisions == sorted(revisions)
    await events.aclose()
    store.close()
