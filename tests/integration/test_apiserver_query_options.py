"""List and watch parameters read as kube-apiserver's ListOptions decoding reads them, and the Accept header
negotiated as it negotiates it: a malformed number is a 400, any watch value but "false" or "0" watches, and a client
accepting nothing the server serves gets a 406."""

from __future__ import annotations

import uuid

import pytest

from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient

CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"
NOT_ACCEPTABLE = (
    "only the following media types are accepted: application/json, application/yaml, "
    "application/vnd.kubernetes.protobuf"
)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"timeoutSeconds": "abc"}, 'strconv.ParseInt: parsing "abc": invalid syntax'),
        ({"timeoutSeconds": ""}, 'strconv.ParseInt: parsing "": invalid syntax'),
        ({"limit": "1.5"}, 'strconv.ParseInt: parsing "1.5": invalid syntax'),
        ({"limit": "9223372036854775808"}, 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
        ({"timeoutSeconds": "x", "watch": "true"}, 'strconv.ParseInt: parsing "x": invalid syntax'),
    ],
)
async def test_a_malformed_number_is_refused_before_listing_or_watching(
    apiserver: APIServerProcess, params: dict[str, str], message: str
) -> None:
    async with APIClient(apiserver) as http:
        reply = await http.get(CONFIG_MAPS, **params)
    assert (reply.status, reply.reason, reply.message) == (400, "BadRequest", message)


async def test_watch_is_true_unless_it_says_false_or_0(apiserver: APIServerProcess) -> None:
    group = uuid.uuid4().hex[:8]
    name = f"q-{group}"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"group": group}}}
    selector = f"group={group}"
    async with APIClient(apiserver) as http:
        assert (await http.post(CONFIG_MAPS, body)).status == 201
        for value in ("maybe", "", "TRUE"):
            reply = await http.get(CONFIG_MAPS, watch=value, labelSelector=selector, timeoutSeconds="1")
            assert reply.status == 200
            # A watch's stream, ended by its timeout: one event, the object as it stands (two lines would not parse).
            assert isinstance(reply.body, dict), (value, reply.body)
            assert (reply.body["type"], reply.body["object"]["metadata"]["name"]) == ("ADDED", name), value
        for value in ("false", "FALSE", "0"):
            listed = await http.get(CONFIG_MAPS, watch=value, labelSelector=selector)
            assert listed.body["kind"] == "ConfigMapList" and len(listed.body["items"]) == 1, value
        # A limit of 0 or less lists everything, as kube's storage reads it.
        unlimited = await http.get(CONFIG_MAPS, limit="-1", labelSelector=selector)
        assert len(unlimited.body["items"]) == 1 and "continue" not in unlimited.body["metadata"]


@pytest.mark.parametrize(
    ("accept", "status"),
    [
        ("text/html", 406),
        ("application/json;q=0", 406),
        ("text/*", 406),
        ("text/html, */*;q=0.1", 200),
        ("application/*", 200),
        ("application/yaml", 200),
        ("application/json;as=Table;v=v1;g=meta.k8s.io", 200),
    ],
)
async def test_a_client_must_accept_a_media_type_kube_serves(
    apiserver: APIServerProcess, accept: str, status: int
) -> None:
    async with APIClient(apiserver) as http:
        listed = await http.request("GET", CONFIG_MAPS, headers={"Accept": accept})
        created = await http.request(
            "POST",
            CONFIG_MAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"a-{uuid.uuid4().hex[:8]}"}},
            headers={"Accept": accept},
        )
    assert (listed.status, created.status) == (status, 201 if status == 200 else status)
    if status == 406:
        assert (listed.reason, listed.message) == ("NotAcceptable", NOT_ACCEPTABLE)
