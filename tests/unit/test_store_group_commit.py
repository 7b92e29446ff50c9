"""The store's group commit: the writes of one event-loop turn share one transaction (one fsync), and nothing
about them reaches a listener, another reader of the database or a waiting request before that commit."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
from pathlib import Path

from pykubevirt.apiserver.store import Event, Store


def _rows_seen_by_another_connection(path: Path) -> int:
    with sqlite3.connect(path) as other:
        return int(other.execute("SELECT COUNT(*) FROM kine").fetchone()[0])


async def test_the_writes_of_one_turn_share_one_commit(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    heard: list[Event] = []
    store.add_listener(heard.append)
    commits = store.commits
    records = [store.create("configmaps", f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}"}}) for i in range(5)]
    # Written into the open transaction: this process sees them, the disk and the listeners not yet.
    assert store.get("configmaps", "ns/cm-4") is not None
    assert heard == []
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 0
    await store.durable()
    assert store.commits == commits + 1
    assert store.committed_writes == 5
    assert [e.revision for e in heard] == [r.revision for r in records]
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 5
    # The next turn's writes are the next commit.
    store.update("configmaps", "ns/cm-0", {"metadata": {"name": "cm-0"}, "data": {"k": "v"}})
    await store.durable()
    assert store.commits == commits + 2
    store.close()


async def test_a_cancelled_request_does_not_cancel_the_commit_others_await(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    commits = store.commits

    async def write(name: str) -> None:
        store.create("configmaps", f"ns/{name}", {"metadata": {"name": name}})
        await store.durable()

    gone, waiting = asyncio.create_task(write("a")), asyncio.create_task(write("b"))
    # Both write in the next turn and wait for its commit; this task runs after them, before the commit.
    await asyncio.sleep(0)
    gone.cancel()
    await waiting
    assert gone.cancelled()
    assert store.commits == commits + 1
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 2
    store.close()


def test_without_an_event_loop_every_write_commits_before_it_returns(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 1
    store.close()


async def test_unsafe_no_fsync_commits_each_write_at_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db", fsync=False)
    commits = store.commits
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    store.create("configmaps", "ns/b", {"metadata": {"name": "b"}})
    assert store.commits == commits + 2
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 2
    store.close()


def test_the_database_is_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "state.db").touch(mode=0o644)
    store = Store(data / "state.db")
    store.create("secrets", "ns/s", {"metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}})
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    store.close()


async def test_the_announced_revision_waits_for_the_commit(tmp_path: Path) -> None:
    """What a watch's bookmark may promise: a client resuming from it must not skip writes not yet announced."""
    store = Store(tmp_path / "state.db")
    before = store.announced_revision
    record = store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    assert store.revision == record.revision
    assert store.announced_revision == before
    await store.durable()
    assert store.announced_revision == record.revision
    store.close()
