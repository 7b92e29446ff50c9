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
    events = _watch(hub, start, timeout=0.3)
    first = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0)  # the watcher is registered and waits
    for i in range(3):
        store.create(CONFIGMAPS.collection, f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}", "namespace": "ns"}})
    await store.durable()
    kind, obj, encoded = await first
    assert (kind, _name(obj)) == ("ADDED", "cm-0")
    assert encoded is not None and json.loads(encoded) == obj  # the store's row, sent as it is
    # The client is slow: the watch's time runs out with cm-1 and cm-2 still queued for it.
    await asyncio.sleep(0.4)
    kind, mark, _ = await anext(events)
    assert kind == "BOOKMARK"
    resumed_from = int(mark["metadata"]["resourceVersion"])
    await events.aclose()
    # The client re-watches from the bookmark, as an informer does, and must still get what it was not sent.
    again = _watch(hub, resumed_from, timeout=0.2)
    seen = [_name(o) for k, o, _ in [item async for item in again] if k == "ADDED"]
    assert seen == ["cm-1", "cm-2"]
    store.close()


async def test_an_idle_watch_bookmarks_the_newest_revision(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    hub = WatchHub(store)
    store.create(CONFIGMAPS.collection, "other/cm", {"metadata": {"name": "cm", "namespace": "other"}})
    await store.durable()
    items = [item async for item in _watch(hub, 0 if store.revision == 0 else store.revision - 1, timeout=0.2)]
    assert [(k, int(o["metadata"]["resourceVersion"])) for k, o, _ in items] == [("BOOKMARK", store.revision)]
    store.close()
