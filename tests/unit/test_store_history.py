"""The store's watch history: recent changes replay from the ring (kept as their rows' text), older ones from the
table, and both give the same events: each change's object and the version it replaced."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import json_codec
from pykubevirt.apiserver.store import CHECK_STORED_ENV, Store
from pykubevirt.apiserver.store_records import ChangedInPlace, Event


def cm(name: str, value: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "data": {"v": value}}


def summary(events: list[Event]) -> list[tuple[Any, ...]]:
    return [(e.type, e.key, e.revision, e.value, e.previous) for e in events]


def test_a_replay_has_each_change_and_the_version_it_replaced_from_the_ring_as_from_the_table(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = Store(path, ring_size=4, fsync=False)
    first = store.create("configmaps", "ns/a", cm("a", "1"))
    changed = store.update("configmaps", "ns/a", cm("a", "2"))
    other = store.create("configmaps", "ns/b", cm("b", "1"))
    deleted = store.delete("configmaps", "ns/a")
    everything = summary(store.events_since(first.revision - 1))  # all four, from the ring
    replay = store.events_since(first.revision)
    assert [(e.type, e.key, e.revision) for e in replay] == [
        ("MODIFIED", "ns/a", changed.revision),
        ("ADDED", "ns/b", other.revision),
        ("DELETED", "ns/a", deleted.revision),
    ]
    modified, added, gone = replay
    assert modified.value["data"] == {"v": "2"} and modified.value["metadata"]["resourceVersion"] == str(
        changed.revision
    )
    assert modified.previous is not None and modified.previous["data"] == {"v": "1"}
    assert modified.previous["metadata"]["resourceVersion"] == str(first.revision)
    assert added.previous is None
    assert gone.value["data"] == {"v": "2"} and gone.value["metadata"]["resourceVersion"] == str(deleted.revision)
    assert gone.previous is not None and gone.previous["metadata"]["resourceVersion"] == str(changed.revision)

    # Four more changes push those out of the ring: the first one's replaced version is read from the table.
    updates = [store.update("configmaps", "ns/b", cm("b", str(i))) for i in range(2, 6)]
    recent = store.events_since(deleted.revision)
    assert [e.revision for e in recent] == [u.revision for u in updates]
    # The ring's events carry their rows' bytes, which are exactly the objects a watch would encode.
    assert all(e.encoded is not None and e.encoded == json_codec.dumps(e.value) for e in recent)
    assert recent[0].previous is not None and recent[0].previous["data"] == {"v": "1"}
    from_ring = {first.revision - 1: everything, deleted.revision: summary(recent)}
    store.close()

    without_ring = Store(path, ring_size=0, fsync=False)
    try:
        for start, events in from_ring.items():
            # The table has every change since; the ring's replay was taken when the newest was events[-1].
            from_table = [e for e in without_ring.events_since(start) if e.revision <= events[-1][2]]
            assert summary(from_table) == events
            assert all(e.encoded is None for e in from_table)
    finally:
        without_ring.close()


def test_an_objects_history_in_the_ring_adds_nothing_for_the_garbage_collector_to_walk(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db", fsync=False)
    try:

        def pod(n: int) -> dict[str, Any]:  # decoded afresh, as a request's body is
            spec = {"containers": [{"name": f"c{i}", "ports": [{"containerPort": i}]} for i in range(5)]}
            return {"metadata": {"name": "p", "labels": {"n": str(n)}}, "spec": spec}

        store.create("pods", "ns/p", pod(0))
        gc.collect()
        before = len(gc.get_objects())
        for i in range(1000):
            store.update("pods", "ns/p", pod(i))
        gc.collect()
        # Decoded, each old version kept a dozen dicts and lists (and its event) alive; as text, one small tuple.
        assert len(gc.get_objects()) - before < 2 * 1000
        assert len(store.events_since(1)) == 1000
    finally:
        store.close()


def test_with_the_check_on_a_write_fails_when_the_version_it_replaces_was_changed_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHECK_STORED_ENV, "1")
    store = Store(tmp_path / "state.db", fsync=False)
    first = store.create("configmaps", "ns/a", cm("a", "1"))
    store.update("configmaps", "ns/a", cm("a", "2"))  # the stored version is as written: no complaint
    second = store.get("configmaps", "ns/a")
    assert second is not None
    second.value["data"]["v"] = "changed"  # what a write sharing the stored object must never do
    with pytest.raises(ChangedInPlace, match=f"configmaps/ns/a at {first.revision + 1} was changed in place"):
        store.update("configmaps", "ns/a", cm("a", "3"))
    monkeypatch.delenv(CHECK_STORED_ENV)
    unchecked = Store(tmp_path / "other.db", fsync=False)
    record = unchecked.create("configmaps", "ns/a", cm("a", "1"))
    record.value["data"]["v"] = "changed"
    unchecked.update("configmaps", "ns/a", cm("a", "2"))
