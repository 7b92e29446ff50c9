"""The Event recorder against the API server: repeats are aggregated into a count, and the events it remembers for
that are a bounded LRU (client-go's 4096), so recording stays O(1) however many objects a component touches."""

from __future__ import annotations

import pytest

from pykubevirt.client import events as events_mod
from pykubevirt.client.events import NORMAL, EventRecorder
from pykubevirt.client.resources import EVENTS, NAMESPACES
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for

pytestmark = pytest.mark.asyncio(loop_scope="function")


def pod(namespace: str, name: str) -> dict[str, object]:
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


async def test_repeats_are_counted_and_the_least_recently_recorded_are_forgotten_first(
    apiserver: APIServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_mod, "RECENT_EVENTS", 3)
    client = client_for(apiserver)
    try:
        namespace = "events-lru"
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        recorder = EventRecorder(client, "test-component", host="h1")

        async def record(name: str) -> None:
            recorder.event(pod(namespace, name), NORMAL, "Started", f"Started {name}")
            await recorder.flush()

        for name in ("a", "b", "c"):
            await record(name)
        await record("a")  # a repeat: a's count is 2, and a is now the most recently recorded
        await record("d")  # the fourth signature: b, the least recently recorded, is forgotten
        await record("b")  # so b's repeat is a new Event
        await record("a")  # a is still remembered: its count is 3
        listed = (await client.list(EVENTS, namespace))["items"]
        counts = sorted((e["involvedObject"]["name"], e["count"]) for e in listed)
        assert counts == [("a", 3), ("b", 1), ("b", 1), ("c", 1), ("d", 1)]
        assert len(recorder._recent) == 3
    finally:
        await client.close()
