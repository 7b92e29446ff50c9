"""The embedded store: kine's log-structured design on SQLite, with the latest state and recent events in memory.

Every create, update and delete appends a row; the row id is the global revision and therefore the
resourceVersion clients see. `UNIQUE(name, prev_revision)` is the compare-and-swap that makes a second writer
racing from the same revision fail. Committed rows are fanned out to watchers in memory; a watch that starts from
an older revision is replayed by store_history, until compaction removed the rows it would need (then it gets 410
Expired).

Durability is etcd's: a write is acknowledged only once it is fsynced. Group commit keeps the throughput: the writes
of one event-loop turn form one batch, handed at the start of the next turn, or, while an earlier batch is still
being written, once it is done (its writes wait for a later fsync anyway, and a busy server then commits and fsyncs
fewer, bigger groups instead of one each turn) to the store's thread. That thread inserts the batch's rows, commits
(which only hands the WAL's pages to the kernel: synchronous=NORMAL) and fsyncs the WAL, all outside the GIL for the
most part, so the event loop serves the next turn's requests meanwhile. Listeners hear of a batch once its fsync is
done, in commit order, and `durable()` is what a request awaits before answering.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import heapq
import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api import json_codec
from pykubevirt.apiserver import fields_v1
from pykubevirt.apiserver.store_history import StoreHistory
from pykubevirt.apiserver.store_records import (
    ADDED,
    DELETED,
    MODIFIED,
    AlreadyExists,
    ChangedInPlace,
    Compacted,
    Conflict,
    Event,
    Listener,
    NotFound,
    Past,
    Record,
    Row,
    StoreError,
    full_name,
    split_name,
    with_revision,
    without_resource_version,
)

log = logging.getLogger("pykubevirt.apiserver.store")

# Stored objects are never changed in place: writes share their unchanged parts with them (a status write, a patch),
# and reads hand them out. With this set (the test suite sets it), each write first checks that the version it
# replaces still encodes to the row it was written as, and fails loudly if not.
CHECK_STORED_ENV = "PYKUBEVIRT_CHECK_STORED_OBJECTS"

SCHEMA = """
CREATE TABLE IF NOT EXISTS kine (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    created INTEGER NOT NULL,
    deleted INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER NOT NULL,
    lease INTEGER NOT NULL DEFAULT 0,
    value BLOB,
    old_value BLOB
);
CREATE INDEX IF NOT EXISTS kine_name_id_index ON kine (name, id);
CREATE UNIQUE INDEX IF NOT EXISTS kine_name_prev_revision_uindex ON kine (name, prev_revision);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- kine's other indexes serve queries this store never makes (every lookup is by id or by name and id), and each
-- one is another B-tree insert a write: a quarter of a row's cost.
DROP INDEX IF EXISTS kine_name_index;
DROP INDEX IF EXISTS kine_id_deleted_index;
DROP INDEX IF EXISTS kine_prev_revision_index;
"""
COLUMNS = "id, name, created, deleted, create_revision, prev_revision, lease, value"
# A batch's rows go in with one statement each this many rows (8 variables a row; SQLite allows 32,766): one call
# into SQLite for the whole batch, so its thread hands the GIL back and forth once, not once a row.
ROWS_A_STATEMENT = 500


@dataclass(eq=False, slots=True)
class _Batch:
    """One group commit: its events (told to listeners once on disk) and the requests awaiting it, each with a
    future of its own so that one cancelled request cancels nothing else."""

    events: list[Event] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    synced: bool = False


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The thread's running event loop; None outside one (a write run by `run_suspendable`, or no loop at all)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _private_database(path: Path) -> None:
    """Make the database file 0600 and its directory 0700 (it holds Secrets in plain text).

    SQLite gives the -wal and -shm files the database file's mode; older ones are fixed here too.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    for suffix in ("", "-wal", "-shm"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            companion.chmod(0o600)


class Store:
    """Single-writer store; all methods run on the event loop's thread (the SQLite writes on the store's own).

    Without a running event loop every write commits before it returns; with one, writes are group-committed
    and a caller answers its client only after `await durable()`.
    """

    def __init__(self, path: Path | str, *, ring_size: int = 20000, fsync: bool = True) -> None:
        self._path = str(path)
        self._fsync = fsync
        self._check_stored = os.environ.get(CHECK_STORED_ENV) == "1"
        _private_database(Path(self._path))
        # Two connections: the store's thread writes with one (rows, commits, compaction, checkpoints); the event
        # loop reads history with the other, and finds rows still on their way in `_unwritten`.
        self._writer = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        self._writer.execute("PRAGMA journal_mode=WAL")
        # NORMAL: a commit writes the WAL without fsync (a killed process loses nothing). With `fsync` the store then
        # fsyncs the WAL itself, off the event loop, before anyone hears of the commit: what FULL does inside COMMIT,
        # so an acknowledged write survives an OS crash or power loss, as with etcd. fsync=False is the unsafe mode
        # (etcd's --unsafe-no-fsync): a commit per write, and an OS crash may lose the newest writes.
        self._writer.execute("PRAGMA synchronous=NORMAL")
        self._writer.execute("PRAGMA busy_timeout=30000")
        self._writer.executescript(SCHEMA)
        self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout=30000")
        # Rows appended and not yet committed by the store's thread: revision → row.
        self._unwritten: dict[int, Row] = {}
        # Row name → revision of the deletion that is its newest row, until compaction drops it: what a create of
        # that name replaces (prev_revision), known without asking the table.
        self._tombstones: dict[str, int] = {}
        self._current: dict[str, dict[str, Record]] = collections.defaultdict(dict)
        self._history = StoreHistory(self._db, ring_size)
        self._listeners: list[Listener] = []
        # (collection, key) → lease of the objects that have one; and the leases soonest first, so expiry looks only
        # at those that ran out (an entry whose object has since another lease, or none, is skipped then).
        self._leases: dict[tuple[str, str], float] = {}
        self._lease_heap: list[tuple[float, str, str]] = []
        self.revision = 0
        self.compact_revision = 0
        # The open group commit, and the committed ones whose fsync is still under way (oldest first).
        self._open = _Batch()
        self._batch_open = False
        self._unsynced: collections.deque[_Batch] = collections.deque()
        # fsyncs handed to the thread and not yet done; the open batch's commit waits for them (`_flush_turn`).
        self._fsyncs_in_flight = 0
        self._flush_deferred = False
        # One thread: batches are written and fsynced in commit order, and each fsync covers every commit before it.
        self._syncer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        self._failure: str = ""
        # Committed transactions and the writes in them, for measuring the group commit.
        self.commits = 0
        self.committed_writes = 0
        self._load()
        # The newest revision listeners have heard of: a watch's bookmark may not promise more, or a client resuming
        # from it would skip the writes still awaiting their fsync.
        self.announced_revision = self.revision

    # ---------------------------------------------------------------------------------------------------- state

    def _load(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key='compact_rev'").fetchone()
        self.compact_revision = int(row[0]) if row else 0
        row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='kine'").fetchone()
        self.revision = int(row[0]) if row else 0
        latest = self._db.execute(
            "SELECT k.id, k.name, k.create_revision, k.deleted, k.value, k.lease FROM kine k "
            "JOIN (SELECT name, MAX(id) AS id FROM kine GROUP BY name) m ON k.id = m.id"
        )
        for rev, name, create_rev, deleted, value, lease in latest:
            if deleted:
                self._tombstones[name] = rev
                continue
            collection, key = split_name(name)
            obj = with_revision(json_codec.loads(value), rev)
            fields_v1.compact_entries(obj)
            self._current[collection][key] = Record(collection, key, rev, create_rev, obj, lease or 0)
            self._track_lease(collection, key, lease or 0)

    def close(self) -> None:
        self._flush(wait=True)
        self._syncer.shutdown(wait=True)
        self._writer.close()
        self._db.close()

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` for every committed event, in revision order, right after the commit."""
        self._listeners.append(listener)

    # ---------------------------------------------------------------------------------------------------- reads

    def get(self, collection: str, key: str) -> Record | None:
        return self._current.get(collection, {}).get(key)

    def records(self, collection: str, key_prefix: str = "") -> list[Record]:
        """Current records of a collection whose key starts with `key_prefix`, sorted by key."""
        records = self._current.get(collection, {})
        if key_prefix:
            selected = [r for k, r in records.items() if k.startswith(key_prefix)]
        else:
            selected = list(records.values())
        selected.sort(key=lambda r: r.key)
        return selected

    def records_at(self, collection: str, revision: int, key_prefix: str = "") -> list[Record]:
        """The records of a collection as they were at `revision` (a consistent snapshot for paged lists).

        Rolls the current state back through the events after `revision`; Compacted when that history is gone.
        """
        if revision >= self.revision:
            return self.records(collection, key_prefix)
        state = {r.key: r for r in self.records(collection, key_prefix)}
        rolled_back: set[str] = set()
        for event in self.events_since(revision, collection):
            if event.key in rolled_back or not event.key.startswith(key_prefix):
                continue
            # The first change after `revision` knows what the object was at `revision`.
            rolled_back.add(event.key)
            if event.previous is None:
                state.pop(event.key, None)
            else:
                before = int(event.previous["metadata"]["resourceVersion"])
                current = state.get(event.key)
                create_revision = current.create_revision if current is not None else 0
                state[event.key] = Record(collection, event.key, before, create_revision, event.previous)
        return sorted(state.values(), key=lambda r: r.key)

    def collections(self) -> Iterable[str]:
        return list(self._current)

    def count(self, collection: str) -> int:
        """How many objects the collection holds now (apiserver_storage_objects)."""
        return len(self._current.get(collection, {}))

    # ---------------------------------------------------------------------------------------------------- writes

    def _append(
        self,
        kind: str,
        collection: str,
        key: str,
        revision: int,
        create_revision: int,
        prev_revision: int,
        text: str,
        lease: float,
    ) -> None:
        """Queue the row of a change for the open batch; its id, `revision`, is the next one (the one writer's)."""
        if self._failure:
            raise StoreError(self._failure)
        if not self._open.rows:
            self._begin()
        name = full_name(collection, key)
        row = (revision, name, int(kind == ADDED), int(kind == DELETED), create_revision, prev_revision, lease, text)
        self._open.rows.append(row)
        self._unwritten[revision] = row
        if kind == DELETED:
            self._tombstones[name] = revision
        elif kind == ADDED:
            self._tombstones.pop(name, None)
        self.revision = revision

    def _begin(self) -> None:
        """Open a group commit, written at the start of the event loop's next turn."""
        loop = _running_loop()
        if loop is None or not self._fsync:
            return  # _commit flushes right after the write
        self._batch_open = True
        # Callbacks scheduled in this turn run in the next one, in order: every write of this turn is in the batch,
        # and any task woken by one of them runs after the commit.
        loop.call_soon(self._flush_turn)

    def _flush_turn(self) -> None:
        """The next turn's commit of the open batch; left to the fsync under way, if any, to do once it is done."""
        if self._fsyncs_in_flight and self._batch_open:
            self._flush_deferred = True
            return
        self._flush()

    def _flush(self, *, wait: bool = False) -> None:
        """Hand the open batch to the store's thread, which commits its rows and fsyncs the WAL; without a running
        loop, unsafe (no fsync), or asked to `wait`, wait for that here. The batch is announced once on disk."""
        batch, self._open = self._open, _Batch()
        self._batch_open = False
        self._unsynced.append(batch)
        if not batch.rows:
            # Nothing of its own to write; its waiters (if any) still wait for the batches before it.
            batch.synced = True
            self._announce()
            return
        self.commits += 1
        self.committed_writes += len(batch.events)
        loop = None if wait or not self._fsync else _running_loop()
        if loop is None:
            try:
                self._syncer.submit(self._write, batch.rows).result()
            except (sqlite3.Error, OSError) as exc:
                self._fail(_failure_of(exc))
                return
            self._written(batch.rows)
            self._synced(batch)
            return
        future = loop.run_in_executor(self._syncer, self._write, batch.rows)
        self._fsyncs_in_flight += 1
        future.add_done_callback(lambda done: self._after_sync(batch, done))

    def _write(self, rows: list[Row]) -> None:
        """On the store's thread: commit `rows` in one transaction, then fsync the WAL (unless unsafe)."""
        db = self._writer
        chunks = [rows[start : start + ROWS_A_STATEMENT] for start in range(0, len(rows), ROWS_A_STATEMENT)]
        # One statement is a transaction of its own; each call into SQLite costs this thread a wait for the GIL,
        # up to the switch interval while the event loop is busy, so a batch that fits one statement is one call.
        explicit = len(chunks) > 1
        if explicit:
            db.execute("BEGIN IMMEDIATE")
        try:
            for chunk in chunks:
                values = ", ".join(("(?, ?, ?, ?, ?, ?, ?, ?)",) * len(chunk))
                db.execute(f"INSERT INTO kine ({COLUMNS}) VALUES {values}", [v for row in chunk for v in row])
            if explicit:
                db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if self._fsync:
            self._sync_wal()

    def _written(self, rows: list[Row]) -> None:
        """The rows are in the table: history reads find them there from now on."""
        for row in rows:
            self._unwritten.pop(row[0], None)

    def _sync_wal(self) -> None:
        # The fd is opened each time: a checkpoint may have truncated the file, and an fd costs nothing here.
        fd = os.open(self._path + "-wal", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _after_sync(self, batch: _Batch, done: asyncio.Future[None]) -> None:
        self._fsyncs_in_flight -= 1
        if done.cancelled():
            return  # the loop is closing
        exc = done.exception()
        if exc is None:
            self._written(batch.rows)
        if not batch.synced:  # else a later fsync (close's) already covered it
            if exc is not None:
                self._fail(_failure_of(exc))
            else:
                self._synced(batch)
        if self._flush_deferred and not self._fsyncs_in_flight:
            self._flush_deferred = False
            if self._batch_open and not self._failure:
                self._flush()

    def _synced(self, batch: _Batch) -> None:
        """The batch is on disk, and so is every batch committed before it (one fsync covers the whole log)."""
        if batch not in self._unsynced:
            return
        for earlier in self._unsynced:
            earlier.synced = True
            if earlier is batch:
                break
        self._announce()

    def _announce(self) -> None:
        """Tell the listeners of the batches on disk, oldest first, and wake the requests waiting on them."""
        while self._unsynced and self._unsynced[0].synced:
            batch = self._unsynced.popleft()
            # A watch's bookmark may promise no more than the listeners heard.
            if batch.events:
                self.announced_revision = max(self.announced_revision, batch.events[-1].revision)
            for event in batch.events:
                for listener in list(self._listeners):
                    try:
                        listener(event)
                    except Exception:
                        log.exception("a store listener failed on %s %s", event.type, event.key)
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _fail(self, what: str) -> None:
        # The memory state now holds writes the disk may not; refuse further writes rather than serve on as if they
        # were stored. A restart loads what is on disk.
        if self._failure:
            return
        self._failure = f"the store {what}; it refuses writes until restarted"
        log.critical("%s", self._failure)
        for failed in (*self._unsynced, self._open):
            for waiter in failed.waiters:
                if not waiter.done():
                    waiter.set_exception(StoreError(self._failure))
        self._unsynced.clear()

    async def durable(self) -> None:
        """Return once every write made so far is on disk; StoreError if its commit or fsync failed."""
        if self._failure:
            raise StoreError(self._failure)
        if self._batch_open:
            batch = self._open
        elif self._unsynced:
            batch = self._unsynced[-1]
        else:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        batch.waiters.append(waiter)
        await waiter

    def _track_lease(self, collection: str, key: str, lease: float) -> None:
        if lease:
            previous = self._leases.get((collection, key))
            self._leases[(collection, key)] = lease
            if previous != lease:
                heapq.heappush(self._lease_heap, (lease, collection, key))
                if len(self._lease_heap) > 2 * len(self._leases) + 1024:
                    # Renewed and removed leases left their entries behind: keep the heap within twice the live ones.
                    self._lease_heap = [(v, c, k) for (c, k), v in self._leases.items()]
                    heapq.heapify(self._lease_heap)
        else:
            self._leases.pop((collection, key), None)

    def _commit(
        self, kind: str, collection: str, key: str, value: dict[str, Any], current: Record | None, lease: float
    ) -> Record:
        """Append the row, update the in-memory state and tell the listeners; `current` is None for a create."""
        if current is not None and self._check_stored:
            self._check_unchanged(current)
        # The single writer knows the id the row will get: one past the sequence.
        revision = self.revision + 1
        if current is None:
            create_revision, prev_revision = revision, self._last_revision_of(collection, key)
        else:
            create_revision, prev_revision = current.create_revision, current.revision
        # The row is the object as readers get it, resourceVersion included, so the watch events of the commit can
        # send the row's bytes instead of encoding it again.
        obj = with_revision(without_resource_version(value), revision)
        encoded = json_codec.dumps(obj)
        text = encoded.decode()
        self._append(kind, collection, key, revision, create_revision, prev_revision, text, lease)
        record = Record(collection, key, revision, create_revision, obj, lease)
        if kind == DELETED:
            del self._current[collection][key]
        else:
            self._current[collection][key] = record
        self._track_lease(collection, key, lease)
        previous, replaced = (current.value, current.revision) if current is not None else (None, 0)
        event = Event(kind, collection, key, revision, obj, previous, encoded)
        self._history.remember(Past(kind, collection, key, revision, replaced, text))
        self._open.events.append(event)
        if not self._batch_open:
            self._flush()
        return record

    def _check_unchanged(self, current: Record) -> None:
        text = self._history.row_text(current.revision)
        if text is not None and json_codec.dumps_text(current.value) != text:
            raise ChangedInPlace(f"{current.collection}/{current.key} at {current.revision} was changed in place")

    def _last_revision_of(self, collection: str, key: str) -> int:
        """The newest row of a key with no object now: its deletion's, or none (0) once compaction removed it."""
        return self._tombstones.get(full_name(collection, key), 0)

    def _current_at(self, collection: str, key: str, expected_revision: int | None) -> Record:
        current = self.get(collection, key)
        if current is None:
            raise NotFound(key)
        if expected_revision is not None and expected_revision != current.revision:
            raise Conflict(key)
        return current

    def create(self, collection: str, key: str, value: dict[str, Any], *, lease: float = 0) -> Record:
        """Store a new object; AlreadyExists when the key is taken. The record's object carries its resourceVersion."""
        if key in self._current.get(collection, {}):
            raise AlreadyExists(key)
        return self._commit(ADDED, collection, key, value, None, lease)

    def update(
        self,
        collection: str,
        key: str,
        value: dict[str, Any],
        *,
        expected_revision: int | None = None,
        lease: float | None = None,
    ) -> Record:
        """Replace an object; Conflict when `expected_revision` is given and is no longer the latest.

        `lease` renews the object's lease; None keeps the current one.
        """
        current = self._current_at(collection, key, expected_revision)
        return self._commit(MODIFIED, collection, key, value, current, current.lease if lease is None else lease)

    def delete(self, collection: str, key: str, *, expected_revision: int | None = None) -> Record:
        """Remove an object; the returned record carries the object as it was, with the deletion's revision."""
        current = self._current_at(collection, key, expected_revision)
        return self._commit(DELETED, collection, key, current.value, current, 0)

    # ---------------------------------------------------------------------------------------------------- history

    def events_since(self, revision: int, collection: str | None = None) -> list[Event]:
        """Committed events after `revision` (for one collection or all), oldest first; Compacted if too old."""
        if revision < self.compact_revision:
            raise Compacted(revision, self.compact_revision)
        return self._history.events_since(revision, collection, self._unwritten)

    def compact(self, keep_revisions: int) -> int:
        """Drop history older than the newest `keep_revisions` revisions; returns the new compaction revision."""
        target = self.revision - keep_revisions
        if target <= self.compact_revision:
            return self.compact_revision
        self._flush()
        # On the store's thread, after the batches before it; the loop waits, as its readers must not see a
        # compaction revision whose rows are still there.
        self._syncer.submit(self._compact_rows, target).result()
        self.compact_revision = target
        self._tombstones = {name: rev for name, rev in self._tombstones.items() if rev > target}
        self._history.forget_through(target)
        return target

    def _compact_rows(self, target: int) -> None:
        with self._writer:
            # Rows superseded by a row at or below the target, and deletion markers, are history only. A row
            # superseded only after the target is still the object's state at the target and must stay.
            self._writer.execute(
                "DELETE FROM kine WHERE id <= ? AND (id IN (SELECT prev_revision FROM kine WHERE id <= ?)"
                " OR deleted = 1)",
                (target, target),
            )
            self._writer.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('compact_rev', ?)", (target,))

    def expired(self, now: float | None = None) -> list[Record]:
        """Records whose lease (an absolute UNIX time) has passed."""
        moment = now if now is not None else time.time()
        found = []
        due = []
        heap = self._lease_heap
        while heap and heap[0][0] <= moment:
            entry = heapq.heappop(heap)
            lease, collection, key = entry
            if self._leases.get((collection, key)) != lease:
                continue  # renewed, or gone: its current lease, if any, has its own entry
            due.append(entry)
            record = self.get(collection, key)
            if record is not None:
                found.append(record)
        # Still due until the caller deletes them (a failed delete is tried again next time).
        for entry in due:
            heapq.heappush(heap, entry)
        return found

    def checkpoint(self) -> None:
        """Copy the WAL into the database file, on the store's thread after the batches before it."""
        self._flush()
        self._syncer.submit(self._checkpoint_wal)

    def _checkpoint_wal(self) -> None:
        try:
            self._writer.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error as exc:
            log.warning("could not checkpoint the WAL: %s", exc)


def _failure_of(exc: BaseException) -> str:
    if isinstance(exc, sqlite3.Error):
        return f"could not commit: {exc}"
    return f"could not fsync its log: {exc}"
