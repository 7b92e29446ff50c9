"""List and watch parameters a strict client or an attacker may send: kube-apiserver's answers, never a 200 or 500."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from pykubevirt.apiserver.list_streaming import STREAM_THRESHOLD
from tests.integration.conftest import configmap
from tests.support.http_client import APIClient


def cms(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def assert_status(reply: Any, code: int, reason: str, message: str) -> None:
    assert reply.status == code, (reply.status, reply.body)
    assert reply.body["kind"] == "Status" and reply.body["reason"] == reason, reply.body
    assert reply.body["message"] == message


def token(**fields: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


async def test_a_resource_version_that_is_not_a_number_is_400(api: APIClient, namespace: str) -> None:
    invalid = (
        'invalid resource version: resourceVersion: Invalid value: "abc": '
        'strconv.ParseUint: parsing "abc": invalid syntax'
    )
    assert_status(await api.get(cms(namespace), resourceVersion="abc"), 400, "BadRequest", invalid)
    exact = await api.get(cms(namespace), resourceVersion="abc", resourceVersionMatch="Exact")
    assert_status(exact, 400, "BadRequest", invalid)
    negative = await api.get(cms(namespace), resourceVersion="-1")
    assert negative.status == 400 and 'parsing "-1": invalid syntax' in negative.message
    reply = await api.request("GET", cms(namespace), params={"watch": "true", "resourceVersion": "abc"})
    assert_status(reply, 400, "BadRequest", invalid)


async def test_timeout_seconds_must_be_an_integer(api: APIClient, namespace: str) -> None:
    for value in ("nan", "inf", "1.5"):
        reply = await api.request("GET", cms(namespace), params={"watch": "true", "timeoutSeconds": value})
        assert_status(reply, 400, "BadRequest", f'strconv.ParseInt: parsing "{value}": invalid syntax')


async def test_forged_continue_tokens_are_400(api: APIClient, namespace: str) -> None:
    for i in range(3):
        assert (await api.post(cms(namespace), configmap(f"cm-{i}"))).status == 201
    first = await api.get(cms(namespace), limit="1")
    genuine = first.body["metadata"]["continue"]
    revision = int(first.body["metadata"]["resourceVersion"])
    prefix = "invalid continue token: continue key is not valid"
    forged = {
        "not-base64!": f"{prefix}: Incorrect padding",
        token(v="meta.k8s.io/v2", rv=revision, start="x"): f"{prefix}: server does not recognize this encoded version "
        "meta.k8s.io/v2",
        token(v="meta.k8s.io/v1", rv=0, start="x"): f"{prefix}: incorrect encoded start resourceVersion (version "
        "meta.k8s.io/v1)",
        token(v="meta.k8s.io/v1", rv=revision + 10**6, start="x"): f"{prefix}: incorrect encoded start "
        "resourceVersion (version meta.k8s.io/v1)",
        token(v="meta.k8s.io/v1", rv="1", start="x"): f"{prefix}: incorrect encoded start resourceVersion (version "
        "meta.k8s.io/v1)",
        token(v="meta.k8s.io/v1", rv=revision, start=""): f"{prefix}: encoded start key empty (version meta.k8s.io/v1)",
    }
    for value, message in forged.items():
        reply = await api.get(cms(namespace), limit="1", **{"continue": value})
        assert reply.status == 400, (value, reply.body)
        assert reply.reason == "BadRequest"
        if value != "not-base64!":
            assert reply.message == message
        else:
            assert reply.message.startswith(prefix)
    with_version = await api.get(cms(namespace), limit="1", resourceVersion="5", **{"continue": genuine})
    assert_status(with_version, 400, "BadRequest", "specifying resource version is not allowed when using continue")
    # The genuine token still pages on.
    second = await api.get(cms(namespace), limit="1", **{"continue": genuine})
    assert [i["metadata"]["name"] for i in second.body["items"]] == ["cm-1"]


async def test_a_watch_from_a_future_resource_version_ends_with_too_large(api: APIClient, namespace: str) -> None:
    """kube-apiserver waits about 3 s for a resourceVersion it has not reached, then sends this ERROR event."""
    current = int((await api.get(cms(namespace))).body["metadata"]["resourceVersion"])
    future = current + 10**6
    started = time.monotonic()
    events = [e async for e in api.watch(cms(namespace), resourceVersion=str(future), timeoutSeconds="30")]
    assert time.monotonic() - started < 10
    assert len(events) == 1 and events[0]["type"] == "ERROR", events
    status = events[0]["object"]
    assert status["code"] == 504 and status["reason"] == "Timeout"
    assert status["message"].startswith(f"Timeout: Too large resource version: {future}, current: ")
    assert status["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]
    listed = await api.get(cms(namespace), resourceVersion=str(future))
    assert listed.status == 504 and listed.body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_a_watch_from_a_revision_reached_within_the_wait_starts_there(api: APIClient, namespace: str) -> None:
    current = int((await api.get(cms(namespace))).body["metadata"]["resourceVersion"])

    async def collect() -> list[dict[str, Any]]:
        return [e async for e in api.watch(cms(namespace), resourceVersion=str(current + 2), timeoutSeconds="2")]

    watch = asyncio.create_task(collect())
    written = []
    for i in range(3):
        written.append((await api.post(cms(namespace), configmap(f"later-{i}"))).body)
    events = await watch
    # Whatever other tests wrote meanwhile, the watch never reports anything at or before the revision it named.
    assert all(int(e["object"]["metadata"]["resourceVersion"]) > current + 2 for e in events), events
    assert written[2]["metadata"]["name"] in [e["object"]["metadata"]["name"] for e in events]


async def test_a_large_list_is_streamed_whole_and_in_order(api: APIClient, namespace: str) -> None:
    """Lists over STREAM_THRESHOLD items are written in chunks (so they do not stall other requests): same body."""
    names = [f"cm-{i:04d}" for i in range(STREAM_THRESHOLD + 150)]
    semaphore = asyncio.Semaphore(16)

    async def create(name: str) -> None:
        async with semaphore:
            assert (await api.post(cms(namespace), configmap(name, app="many"))).status == 201

    await asyncio.gather(*(create(n) for n in names))
    reply = await api.get(cms(namespace))
    assert reply.status == 200
    assert reply.headers.get("Transfer-Encoding") == "chunked"
    assert reply.body["kind"] == "ConfigMapList" and reply.body["apiVersion"] == "v1"
    # With the namespace's CA ConfigMap, which kube's root-ca-cert-publisher put there.
    names = sorted([*names, "kube-root-ca.crt"])
    assert [i["metadata"]["name"] for i in reply.body["items"]] == names
    assert int(reply.body["metadata"]["resourceVersion"]) >= max(
        int(i["metadata"]["resourceVersion"]) for i in reply.body["items"]
    )
    paged = await api.get(cms(namespace), limit=str(STREAM_THRESHOLD + 100), labelSelector="app=many")
    assert len(paged.body["items"]) == STREAM_THRESHOLD + 100 and paged.body["metadata"]["continue"]
    # kubectl get asks for a Table: its rows are streamed the same way.
    table = await api.request("GET", cms(namespace), headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    assert table.headers.get("Transfer-Encoding") == "chunked"
    assert table.body["kind"] == "Table" and table.body["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table.body["columnDefinitions"]][:2] == ["Name", "Data"]
    assert int(table.body["metadata"]["resourceVersion"]) >= int(reply.body["metadata"]["resourceVersion"])
    assert [row["cells"][0] for row in table.body["rows"]] == names
    assert table.body["rows"][0]["object"]["metadata"]["name"] == names[0]
