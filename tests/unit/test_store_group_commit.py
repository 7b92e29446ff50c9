"""The store's group commit: the writes of one event-loop turn share one transaction (one fsync, off the event loop),
and nothing about them reaches a listener, another reader of the database or a waiting request before it is on disk."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import Event, StoreError


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


class _HeldFsync:
    """Holds the store's WAL fsync on its thread until released, as a slow disk would."""

    def __init__(self, store: Store) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self._real = store._sync_wal
        store._sync_wal = self._held  # type: ignore[method-assign]

    def _held(self) -> None:
        self.entered.set()
        assert self.release.wait(10), "the test never released the fsync"
        self._real()

    async def started(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 5), "no fsync started"


async def test_the_event_loop_serves_the_next_writes_while_a_commit_is_fsynced(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    heard: list[Event] = []
    store.add_listener(heard.append)
    held = _HeldFsync(store)
    first = store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    waiting = asyncio.create_task(store.durable())
    await held.started()
    # The first batch is committed and its fsync under way: the loop runs on and takes the next write.
    second = store.create("configmaps", "ns/b", {"metadata": {"name": "b"}})
    await asyncio.sleep(0.05)
    assert not waiting.done()
    assert heard == []
    assert store.announced_revision < first.revision
    held.release.set()
    await waiting
    await store.durable()
    # Listeners hear of both batches once on disk, in commit order.
    assert [e.revision for e in heard] == [first.revision, second.revision]
    assert store.announced_revision == second.revision
    store.close()


async def test_the_turns_written_during_an_fsync_are_committed_together_after_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    heard: list[Event] = []
    store.add_listener(heard.append)
    held = _HeldFsync(store)
    commits = store.commits
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    await held.started()
    # Three more turns of writes while the first commit's fsync runs: nothing of them is committed yet.
    for name in ("b", "c", "d"):
        store.create("configmaps", f"ns/{name}", {"metadata": {"name": name}})
        await asyncio.sleep(0.01)
    assert store.commits == commits + 1
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 1
    held.release.set()
    await store.durable()
    # Then one commit (and one fsync) for the three, announced in order.
    assert store.commits == commits + 2
    assert store.committed_writes == 4
    assert [e.key for e in heard] == ["ns/a", "ns/b", "ns/c", "ns/d"]
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 4
    store.close()


async def test_a_failed_fsync_fails_its_requests_and_refuses_further_writes(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    heard: list[Event] = []
    store.add_listener(heard.append)

    def broken() -> None:
        raise OSError(5, "Input/output error")

    store._sync_wal = broken  # type: ignore[method-assign]
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    with pytest.raises(StoreError, match="could not fsync its log"):
        await store.durable()
    assert heard == []
    with pytest.raises(StoreError, match="refuses writes until restarted"):
        store.create("configmaps", "ns/b", {"metadata": {"name": "b"}})
    store.close()


async def test_closing_waits_for_the_fsync_under_way_and_announces_everything(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    heard: list[Event] = []
    store.add_listener(heard.append)
    held = _HeldFsync(store)
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    await held.started()
    store.create("configmaps", "ns/b", {"metadata": {"name": "b"}})
    threading.Timer(0.1, held.release.set).start()
    store.close()
    assert [e.key for e in heard] == ["ns/a", "ns/b"]
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 2


async def test_history_reads_find_the_rows_still_on_their_way_to_the_table(tmp_path: Path) -> None:
    """A watch from before the ring is replayed from the table; the rows of the batch being written are in it too."""
    store = Store(tmp_path / "state.db", ring_size=0)
    first = store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    await store.durable()
    held = _HeldFsync(store)
    second = store.update("configmaps", "ns/a", {"metadata": {"name": "a"}, "data": {"k": "1"}})
    await held.started()
    third = store.update("configmaps", "ns/a", {"metadata": {"name": "a"}, "data": {"k": "2"}})
    # One row committed and awaiting its fsync, one not handed to the store's thread yet: both replay, in order,
    # each with the version it replaced.
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 2
    replay = store.events_since(first.revision)
    assert [(e.revision, (e.previous or {}).get("data")) for e in replay] == [
        (second.revision, None),
        (third.revision, {"k": "1"}),
    ]
    held.release.set()
    await store.durable()
    assert [e.revision for e in store.events_since(first.revision)] == [second.revision, third.revision]
    store.close()


async def test_an_object_deleted_and_created_again_in_one_turn_is_stored_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    await store.durable()
    gone = store.delete("configmaps", "ns/a")
    again = store.create("configmaps", "ns/a", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    await store.durable()
    assert again.revision == gone.revision + 1
    store.close()
    reopened = Store(tmp_path / "state.db")
    record = reopened.get("configmaps", "ns/a")
    assert record is not None and record.value["data"] == {"k": "v"} and record.revision == again.revision
    # A deletion read back from the table is what the next create replaces, after a restart too.
    reopened.delete("configmaps", "ns/a")
    await reopened.durable()
    reopened.close()
    last = Store(tmp_path / "state.db")
    last.create("configmaps", "ns/a", {"metadata": {"name": "a"}})
    await last.durable()
    last.close()


async def test_a_batch_larger_than_one_statement_is_still_one_commit(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    commits = store.commits
    # What the store's thread asks of SQLite: the batch must be one transaction, however many INSERTs it takes.
    statements: list[str] = []
    store._writer.set_trace_callback(lambda sql: statements.append(sql.split(" (", 1)[0]))
    for i in range(1200):
        store.create("configmaps", f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}"}})
    await store.durable()
    assert store.commits == commits + 1
    assert statements == ["BEGIN IMMEDIATE", *["INSERT INTO kine"] * 3, "COMMIT"]
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 1200
    store.close()
    reopened = Store(tmp_path / "state.db")
    assert len(reopened.records("configmaps")) == 1200
    reopened.close()


async def test_a_batch_that_fits_one_statement_is_that_statement_alone(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    statements: list[str] = []
    store._writer.set_trace_callback(lambda sql: statements.append(sql.split(" (", 1)[0]))
    for i in range(3):
        store.create("configmaps", f"ns/cm-{i}", {"metadata": {"name": f"cm-{i}"}})
    await store.durable()
    # One INSERT is a transaction of its own: no BEGIN and COMMIT around it.
    assert statements == ["INSERT INTO kine"]
    assert _rows_seen_by_another_connection(tmp_path / "state.db") == 3
    store.close()
