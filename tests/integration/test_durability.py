"""The store survives `kill -9`: acknowledged writes stay, resourceVersions are stable and watches resume."""

from __future__ import annotations

import asyncio
import contextlib
import stat
from pathlib import Path
from typing import Any

from tests.integration.conftest import NOT_ROOT_CA, VM_API, configmap, vm_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.fsync_count import counting_fsyncs
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

CREATES = 200
CMS = "/api/v1/namespaces/default/configmaps"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def _collect(
    api: APIClient, path: str, count: int, within: float, opened: asyncio.Event | None = None, **params: str
) -> list[dict[str, Any]]:
    """Up to `count` watch events, or what arrived in `within` seconds."""
    events: list[dict[str, Any]] = []

    async def read() -> None:
        stream = api.watch(path, opened, **params)
        async with contextlib.aclosing(stream):
            async for event in stream:
                events.append(event)
                if len(events) >= count:
                    return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(read(), within)
    return events


async def _compaction_revision(api: APIClient) -> int:
    """The store's compaction revision, as the 410 of a watch from revision 1 states it (0 before any compaction)."""
    first = await _collect(api, CMS, 1, 5, resourceVersion="1", timeoutSeconds="1")
    if not first or first[0]["type"] != "ERROR":
        return 0
    message = first[0]["object"]["message"]  # "too old resource version: 1 (N)"
    return int(message.rsplit("(", 1)[1].rstrip(")"))


async def _compacted_up_to_newest(api: APIClient, history: int) -> None:
    """Wait until a compaction ran after the latest write: only the newest `history` revisions are left."""
    newest = int((await api.get(CMS)).body["metadata"]["resourceVersion"])

    async def caught_up() -> bool:
        return await _compaction_revision(api) >= newest - history

    await eventually(caught_up, timeout=10)


async def test_acknowledged_writes_survive_kill_9_and_watches_resume(fresh_apiserver: APIServerProcess) -> None:
    server = fresh_apiserver
    acknowledged: dict[str, str] = {}
    async with APIClient(server) as api:
        semaphore = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            async with semaphore:
                reply = await api.post(CMS, configmap(f"cm-{i:03d}"))
            assert reply.status == 201, reply.body
            acknowledged[reply.body["metadata"]["name"]] = reply.body["metadata"]["resourceVersion"]

        await asyncio.gather(*(create(i) for i in range(CREATES)))
        await api.post(f"{VM_API}/namespaces/default/virtualmachines", vm_manifest("survivor"))
        last_seen = (await api.get(CMS)).body["metadata"]["resourceVersion"]
    assert len(acknowledged) == CREATES

    server.kill9()
    server.start()

    async with APIClient(server) as api:
        listing = await api.get(CMS, fieldSelector=NOT_ROOT_CA)
        stored = {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in listing.body["items"]}
        assert stored == acknowledged
        assert int(listing.body["metadata"]["resourceVersion"]) >= int(last_seen)
        assert (await api.get(f"{VM_API}/namespaces/default/virtualmachines/survivor")).status == 200

        # A watch from the last resourceVersion seen before the kill: nothing old is replayed, new changes arrive.
        opened = asyncio.Event()
        watch = asyncio.create_task(_collect(api, CMS, 2, 10, opened, resourceVersion=last_seen))
        await asyncio.wait_for(opened.wait(), 10)
        changed = await api.patch(f"{CMS}/cm-007", {"data": {"k": "after-restart"}})
        created = await api.post(CMS, configmap("born-after-restart"))
        events = await watch
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("MODIFIED", "cm-007"),
            ("ADDED", "born-after-restart"),
        ]
        assert events[0]["object"]["metadata"]["resourceVersion"] == changed.body["metadata"]["resourceVersion"]
        assert int(changed.body["metadata"]["resourceVersion"]) > int(last_seen)
        assert events[1]["object"]["metadata"]["resourceVersion"] == created.body["metadata"]["resourceVersion"]

        # An older resourceVersion is replayed from the store's history: exactly the writes after it.
        since = acknowledged["cm-150"]
        replay = await _collect(api, CMS, 1000, 2, resourceVersion=since, timeoutSeconds="1")
        expected = sorted(
            [int(rv) for rv in acknowledged.values() if int(rv) > int(since)]
            + [int(changed.body["metadata"]["resourceVersion"]), int(created.body["metadata"]["resourceVersion"])]
        )
        assert [int(e["object"]["metadata"]["resourceVersion"]) for e in replay] == expected


async def test_restart_keeps_crds_and_namespaces_without_duplicates(fresh_apiserver: APIServerProcess) -> None:
    server = fresh_apiserver

    async def state() -> tuple[dict[str, str], dict[str, str], list[str]]:
        async with APIClient(server) as api:
            crds = {
                i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in (await api.get(CRDS)).body["items"]
            }
            namespaces = {
                i["metadata"]["name"]: i["metadata"]["uid"] for i in (await api.get("/api/v1/namespaces")).body["items"]
            }
            names = [i["metadata"]["name"] for i in (await api.get("/api/v1/namespaces")).body["items"]]
            return crds, namespaces, names

    async with APIClient(server) as api:
        assert (await api.post("/api/v1/namespaces", {"metadata": {"name": "mine"}})).status == 201
    before = await state()
    assert "virtualmachines.kubevirt.io" in before[0]
    assert {"default", "kube-system", "kubevirt", "mine"} <= set(before[1])

    server.stop()
    server.start()
    assert await state() == before
    server.kill9()
    server.start()
    after = await state()
    assert after == before
    assert len(after[2]) == len(set(after[2]))


async def test_compaction_keeps_the_state_retained_revisions_need(tmp_path: Path) -> None:
    """A row superseded only after the compaction point is still history: watches and exact lists need it."""
    server = APIServerProcess(tmp_path / "data", "--history-revisions", "5", "--compact-interval", "0.1").start()
    try:
        async with APIClient(server) as api:
            tracked = (await api.post(CMS, configmap("tracked", app="t"))).body
            for i in range(10):
                await api.post(CMS, configmap(f"filler-{i}"))
            await _compacted_up_to_newest(api, 5)  # past the creation of "tracked"
            since = (await api.get(CMS)).body["metadata"]["resourceVersion"]
            changed = (await api.patch(f"{CMS}/tracked", {"data": {"k": "changed"}})).body
            await _compacted_up_to_newest(api, 5)  # again, now that the creation row is superseded
        # The in-memory history is gone after a restart; only the table can answer.
        server.stop()
        server.start()
        async with APIClient(server) as api:
            events = await _collect(api, CMS, 10, 3, resourceVersion=since, labelSelector="app=t", timeoutSeconds="1")
            assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
                ("MODIFIED", changed["metadata"]["resourceVersion"])
            ]
            exact = await api.get(CMS, resourceVersion=since, resourceVersionMatch="Exact", labelSelector="app=t")
            assert exact.status == 200, exact.body
            (item,) = exact.body["items"]
            assert item["metadata"]["resourceVersion"] == tracked["metadata"]["resourceVersion"]
            assert item["data"] == {"k": "v"}
            too_old = await api.get(
                CMS, resourceVersion=tracked["metadata"]["resourceVersion"], resourceVersionMatch="Exact"
            )
            assert too_old.status == 410
    finally:
        server.stop()


async def test_acknowledged_writes_are_fsynced_and_concurrent_ones_share_a_commit(
    fresh_apiserver: APIServerProcess,
) -> None:
    """Durable to an OS crash: each answer waits for an fsync, and writes of one event-loop turn share it."""
    server = fresh_apiserver
    async with APIClient(server) as api:
        with counting_fsyncs(server.pid) as sequential:
            for i in range(20):
                assert (await api.post(CMS, configmap(f"one-by-one-{i}"))).status == 201
        # One writer at a time: every acknowledged write had its own fsync before its answer.
        assert sequential.calls >= 20

        async def create(i: int) -> None:
            assert (await api.post(CMS, configmap(f"together-{i}"))).status == 201

        with counting_fsyncs(server.pid) as concurrent:
            await asyncio.gather(*(create(i) for i in range(100)))
        assert 1 <= concurrent.calls <= 50


async def test_database_files_are_private(fresh_apiserver: APIServerProcess) -> None:
    """The database holds Secrets in plain text: 0600 files in a 0700 directory, fixed at start for older ones."""
    server = fresh_apiserver
    database = [server.data_dir / name for name in ("state.db", "state.db-wal", "state.db-shm")]

    def modes() -> list[int]:
        return [stat.S_IMODE(p.stat().st_mode) for p in [server.data_dir, *database]]

    async with APIClient(server) as api:
        assert (await api.post(CMS, configmap("secretive"))).status == 201
    assert modes() == [0o700, 0o600, 0o600, 0o600]
    server.stop()
    server.data_dir.chmod(0o755)
    for path in database:
        if path.exists():
            path.chmod(0o644)
    server.start()
    assert modes() == [0o700, 0o600, 0o600, 0o600]
