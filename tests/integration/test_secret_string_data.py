"""Secret stringData on the embedded API server: folded into data on create and update, as kube-apiserver does."""

from __future__ import annotations

import uuid

from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient

SECRETS = "/api/v1/namespaces/default/secrets"


async def test_string_data_is_folded_into_data(apiserver: APIServerProcess) -> None:
    name = f"s-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {"a": "b2xk", "b": "a2VlcA=="},
        "stringData": {"a": "new", "c": "ssh-ed25519 AAAA key"},
    }
    async with APIClient(apiserver) as http:
        created = await http.post(SECRETS, body)
        assert created.status == 201, created.body
        assert "stringData" not in created.body
        assert created.body["data"] == {"a": "bmV3", "b": "a2VlcA==", "c": "c3NoLWVkMjU1MTkgQUFBQSBrZXk="}
        assert created.body["type"] == "Opaque"
        updated = await http.patch(f"{SECRETS}/{name}", {"stringData": {"b": "changed"}})
        assert updated.status == 200, updated.body
        assert updated.body["data"]["b"] == "Y2hhbmdlZA==" and "stringData" not in updated.body
        stored = await http.get(f"{SECRETS}/{name}")
        assert stored.body["data"] == {"a": "bmV3", "b": "Y2hhbmdlZA==", "c": "c3NoLWVkMjU1MTkgQUFBQSBrZXk="}
        await http.delete(f"{SECRETS}/{name}")
