"""Objects with a lease (Events) expire when it runs out: the store finds exactly those, however many it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pykubevirt.apiserver.store import Store


def event(name: str, count: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns"}, "count": count}


def names(records: list[Any]) -> list[str]:
    return sorted(r.key for r in records)


def test_expiry_finds_the_run_out_leases_and_keeps_a_due_one_until_it_is_deleted(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db", fsync=False)
    try:
        store.create("events", "ns/a", event("a"), lease=100.0)
        store.create("events", "ns/b", event("b"), lease=200.0)
        store.create("events", "ns/c", event("c"), lease=150.0)
        store.create("configmaps", "ns/kept", event("kept"))
        assert store.expired(now=50.0) == []
        assert names(store.expired(now=160.0)) == ["ns/a", "ns/c"]
        # Not deleted yet (say the delete failed): still due the next time.
        assert names(store.expired(now=160.0)) == ["ns/a", "ns/c"]
        store.delete("events", "ns/a")
        # A renewed lease counts from its renewal, not from the first one.
        store.update("events", "ns/c", event("c", 2), lease=300.0)
        assert store.expired(now=160.0) == []
        assert names(store.expired(now=250.0)) == ["ns/b"]
        assert names(store.expired(now=400.0)) == ["ns/b", "ns/c"]
    finally:
        store.close()


def test_renewing_leases_many_times_keeps_expiry_exact_and_its_index_small(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db", fsync=False)
    try:
        for i in range(50):
            store.create("events", f"ns/e{i}", event(f"e{i}"), lease=1000.0 + i)
        for renewal in range(100):
            for i in range(50):
                store.update("events", f"ns/e{i}", event(f"e{i}", renewal), lease=2000.0 + renewal * 100 + i)
        last = 2000.0 + 99 * 100
        assert store.expired(now=last - 1) == []
        assert names(store.expired(now=last + 10)) == sorted(f"ns/e{i}" for i in range(11))
        # 5,050 leases were set; the index holds at most twice the 50 live ones, plus its slack.
        assert len(store._lease_heap) <= 2 * 50 + 1024
    finally:
        store.close()
