"""Events that reach a watch together (one commit, a burst): none is held back, none is lost or reordered."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.conftest import NOT_ROOT_CA, configmap
from tests.support.http_client import APIClient


def cms(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


async def test_an_event_followed_by_one_the_selector_drops_is_sent_at_once(api: APIClient, namespace: str) -> None:
    # The two creates land in one commit: the watcher is given both, keeps the first, drops the second, and must send
    # the first before it waits for more (its time here is 60 s).
    opened = asyncio.Event()
    events = api.watch(cms(namespace), opened, labelSelector="app=kept", timeoutSeconds="60")
    first = asyncio.ensure_future(anext(events))
    await asyncio.wait_for(opened.wait(), 10)
    replies = await asyncio.gather(
        api.post(cms(namespace), configmap("kept", app="kept")),
        api.post(cms(namespace), configmap("dropped", app="other")),
    )
    assert [r.status for r in replies] == [201, 201]
    try:
        event = await asyncio.wait_for(first, 5)
    finally:
        await events.aclose()
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "kept")


async def test_a_burst_of_events_arrives_whole_and_in_order(api: APIClient, namespace: str) -> None:
    count = 230
    opened = asyncio.Event()
    seen: list[dict[str, Any]] = []

    async def collect() -> None:
        async for event in api.watch(cms(namespace), opened, timeoutSeconds="60", fieldSelector=NOT_ROOT_CA):
            seen.append(event)
            if len(seen) == count:
                return

    watch = asyncio.create_task(collect())
    await asyncio.wait_for(opened.wait(), 10)
    replies = await asyncio.gather(*(api.post(cms(namespace), configmap(f"cm-{i:03d}")) for i in range(count)))
    assert all(r.status == 201 for r in replies)
    await asyncio.wait_for(watch, 30)
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in seen]
    assert versions == sorted(versions)
    assert sorted(e["object"]["metadata"]["name"] for e in seen) == [f"cm-{i:03d}" for i in range(count)]
    assert {e["type"] for e in seen} == {"ADDED"}
