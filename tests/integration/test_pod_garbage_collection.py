"""The pod garbage collector (kube-controller-manager's PodGC) against a real API server process, run with a short
period and quarantine so its passes come within a test."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient
from tests.support.waiting import consistently, eventually

# The quarantine leaves a loaded machine time for a test's few writes inside it.
PERIOD, QUARANTINE = 0.3, 3.0
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    flags = ("--pod-gc-period", str(PERIOD), "--pod-gc-quarantine", str(QUARANTINE))
    process = APIServerProcess(tmp_path_factory.mktemp("podgc") / "data", *flags)
    yield process.start()
    process.stop()


@pytest_asyncio.fixture
async def api(server: APIServerProcess) -> AsyncIterator[APIClient]:
    async with APIClient(server) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def node(api: APIClient, name: str, *, ready: bool = True, taints: list[dict[str, str]] | None = None) -> None:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    if taints:
        body["spec"] = {"taints": taints}
    assert (await api.post("/api/v1/nodes", body)).status == 201
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    assert (await api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": [condition]}})).status == 200


async def pod(api: APIClient, name: str, node_name: str = "", phase: str = "Running", **meta: Any) -> None:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node_name:
        spec["nodeName"] = node_name
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta}, "spec": spec}
    assert (await api.post(PODS, body)).status == 201
    if phase != "Pending":
        status = {"phase": "Failed", "reason": "Evicted"} if phase == "Evicted" else {"phase": phase}
        assert (await api.patch(f"{PODS}/{name}/status", {"status": status})).status == 200


async def exists(api: APIClient, name: str) -> bool:
    return (await api.get(f"{PODS}/{name}")).status == 200


async def test_a_pod_on_a_node_gone_for_the_quarantine_is_failed_with_a_disruption_target_then_deleted(
    api: APIClient,
) -> None:
    gone, kept, here = unique("orphan"), unique("kept"), unique("node")
    await node(api, here)
    await pod(api, kept, here)
    seen: list[dict[str, Any]] = []
    opened = asyncio.Event()
    deleted_at = 0.0

    async def watch() -> None:
        nonlocal deleted_at
        async for event in api.watch(PODS, opened, fieldSelector=f"metadata.name={gone}"):
            seen.append(event)
            if event["type"] == "DELETED":
                deleted_at = time.monotonic()
                return

    watching = asyncio.create_task(watch())
    await opened.wait()
    created_by = time.monotonic()
    await pod(api, gone, "never-registered")
    await asyncio.wait_for(watching, timeout=QUARANTINE + 10)
    # Not before the node has been missing for the whole quarantine, counted from the first pass that saw the pod.
    assert deleted_at - created_by >= QUARANTINE
    last = seen[-1]["object"]
    assert seen[-1]["type"] == "DELETED"
    assert last["status"]["phase"] == "Failed"
    (condition,) = [c for c in last["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert condition["status"] == "True"
    assert condition["reason"] == "DeletionByPodGC"
    assert condition["message"] == "PodGC: node no longer exists"
    managers = {(e["manager"], e.get("subresource", "")) for e in last["metadata"]["managedFields"]}
    assert ("PodGC", "status") in managers
    # The pod on a node that exists stays.
    assert await exists(api, kept)


async def test_a_node_back_within_the_quarantine_keeps_its_pods_and_one_deleted_loses_them(api: APIClient) -> None:
    name, pod_name = unique("node"), unique("bound")
    await node(api, name)
    await pod(api, pod_name, name)
    assert (await api.delete(f"/api/v1/nodes/{name}")).status == 200
    await asyncio.sleep(QUARANTINE / 2)
    await node(api, name)
    await consistently(lambda: exists(api, pod_name), for_=QUARANTINE + 2 * PERIOD)
    assert (await api.delete(f"/api/v1/nodes/{name}")).status == 200
    await eventually(lambda: _gone(api, pod_name), timeout=QUARANTINE + 5)


async def _gone(api: APIClient, name: str) -> bool:
    return not await exists(api, name)


async def test_a_terminating_pod_on_an_out_of_service_node_that_is_not_ready_is_force_deleted(api: APIClient) -> None:
    fenced, ready = unique("fenced"), unique("ready")
    taint = [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]
    await node(api, fenced, ready=False, taints=taint)
    await node(api, ready, ready=True, taints=taint)
    on_fenced, on_ready, running = unique("on-fenced"), unique("on-ready"), unique("running")
    await pod(api, on_fenced, fenced)
    await pod(api, on_ready, ready)
    await pod(api, running, fenced)
    for name in (on_fenced, on_ready):
        reply = await api.delete(f"{PODS}/{name}")
        assert reply.status == 200 and reply.body["metadata"]["deletionTimestamp"], reply.body
    await eventually(lambda: _gone(api, on_fenced), timeout=5)
    # Only terminating pods go, and only from a node that is not Ready.
    assert await exists(api, on_ready)
    assert await exists(api, running)


async def test_an_unscheduled_terminating_pod_is_failed_and_deleted(api: APIClient) -> None:
    name = unique("unscheduled")
    await pod(api, name, phase="Pending", finalizers=["example.com/hold"])
    assert (await api.delete(f"{PODS}/{name}")).status == 200

    async def failed() -> bool:
        reply = await api.get(f"{PODS}/{name}")
        return reply.status == 200 and reply.body["status"].get("phase") == "Failed"

    await eventually(failed, timeout=5)
    # The finalizer still holds it, as it holds any deletion; once gone, so is the pod.
    assert (await api.patch(f"{PODS}/{name}", {"metadata": {"finalizers": None}})).status == 200
    await eventually(lambda: _gone(api, name), timeout=5)


async def test_beyond_the_threshold_the_evicted_then_the_oldest_finished_pods_go(tmp_path: Path) -> None:
    # An API server of its own: the other tests' finished pods would count too.
    flags = ("--pod-gc-period", str(PERIOD), "--terminated-pod-gc-threshold", "3")
    own = APIServerProcess(tmp_path / "data", *flags).start()
    try:
        async with APIClient(own) as api:
            here = unique("node")
            await node(api, here)
            names = [unique(f"p{i}") for i in range(6)]
            phases = ["Succeeded", "Failed", "Running", "Succeeded", "Evicted", "Succeeded"]
            for name, phase in zip(names, phases, strict=True):
                await pod(api, name, here, phase=phase)
                if name == names[0]:
                    await asyncio.sleep(1.05)  # older by a whole second, creationTimestamp's resolution

            # Five finished, three kept: the evicted one goes first, then the oldest; running ones never count.
            # A pass between the creations may already have taken the evicted pod alone (four finished then), and
            # the oldest goes only at the next pass: wait for both.
            await eventually(lambda: _count(api, names, 4), timeout=5)
            await consistently(lambda: _count(api, names, 4), for_=3 * PERIOD)
            assert [n for n in names if await exists(api, n)] == [names[1], names[2], names[3], names[5]]
    finally:
        own.stop()


async def _count(api: APIClient, names: list[str], expected: int) -> bool:
    return sum([await exists(api, n) for n in names]) == expected
