"""ConfigMaps and Secrets on the embedded API server: keys, base64, the keys a Secret's type needs, and what
`immutable: true` keeps, with kube-apiserver's codes and messages."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient

CONFIG_MAPS = "/api/v1/namespaces/default/configmaps"
SECRETS = "/api/v1/namespaces/default/secrets"
IMMUTABLE = "Forbidden: field is immutable when `immutable` is set"


def _name() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def config_map(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **fields}


def secret(name: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, **fields}


async def test_an_immutable_config_map_keeps_its_data_and_its_immutability(apiserver: APIServerProcess) -> None:
    name = _name()
    async with APIClient(apiserver) as http:
        assert (await http.post(CONFIG_MAPS, config_map(name, data={"a": "1"}, immutable=True))).status == 201
        changed = await http.patch(f"{CONFIG_MAPS}/{name}", {"data": {"a": "2"}})
        assert changed.status == 422, changed.body
        assert changed.message == f'ConfigMap "{name}" is invalid: data: {IMMUTABLE}'
        assert changed.body["details"]["causes"] == [
            {"reason": "FieldValueForbidden", "message": IMMUTABLE, "field": "data"}
        ]
        unset = await http.patch(f"{CONFIG_MAPS}/{name}", {"immutable": False, "binaryData": {"b": "AA=="}})
        assert unset.status == 422
        assert unset.message == f'ConfigMap "{name}" is invalid: [immutable: {IMMUTABLE}, binaryData: {IMMUTABLE}]'
        # Its metadata may still change, and it may be deleted.
        labelled = await http.patch(f"{CONFIG_MAPS}/{name}", {"metadata": {"labels": {"x": "y"}}})
        assert labelled.status == 200 and labelled.body["data"] == {"a": "1"}
        assert (await http.delete(f"{CONFIG_MAPS}/{name}")).status == 200


async def test_a_secret_keeps_its_type_and_an_immutable_one_its_data(apiserver: APIServerProcess) -> None:
    name = _name()
    async with APIClient(apiserver) as http:
        assert (await http.post(SECRETS, secret(name, data={"a": "MQ=="}, immutable=True))).status == 201
        retyped = await http.patch(f"{SECRETS}/{name}", {"type": "kubernetes.io/basic-auth"})
        assert retyped.status == 422
        assert retyped.message.startswith(f'Secret "{name}" is invalid: [data[username]: Required value, type:')
        assert 'type: Invalid value: "kubernetes.io/basic-auth": field is immutable' in retyped.message
        rewritten = await http.patch(f"{SECRETS}/{name}", {"stringData": {"a": "2"}})
        assert rewritten.status == 422 and rewritten.message == f'Secret "{name}" is invalid: data: {IMMUTABLE}'
        assert (await http.get(f"{SECRETS}/{name}")).body["data"] == {"a": "MQ=="}


async def test_keys_must_be_config_keys_and_not_repeated_across_bags(apiserver: APIServerProcess) -> None:
    name = _name()
    async with APIClient(apiserver) as http:
        bad = await http.post(CONFIG_MAPS, config_map(name, data={"bad key!": "x", "k": "v"}, binaryData={"k": "AA=="}))
        assert bad.status == 422
        causes = bad.body["details"]["causes"]
        assert [c["field"] for c in causes] == ["data[bad key!]", "data[k]"]
        assert causes[0]["message"].startswith(
            'Invalid value: "bad key!": a valid config key must consist of alphanumeric characters'
        )
        assert causes[1]["message"] == 'Invalid value: "k": duplicate of key present in binaryData'
        dots = await http.post(SECRETS, secret(name, data={"..a": "AA=="}))
        assert dots.status == 422 and dots.message.endswith("must not start with '..'")
        assert (await http.get(f"{CONFIG_MAPS}/{name}")).status == 404


async def test_base64_that_does_not_decode_is_a_bad_request(apiserver: APIServerProcess) -> None:
    async with APIClient(apiserver) as http:
        reply = await http.post(SECRETS, secret(_name(), data={"a": "!!!notb64"}))
        assert reply.status == 400
        assert (
            reply.message == 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 0'
        )
        binary = await http.post(CONFIG_MAPS, config_map(_name(), binaryData={"k": "QUJD!"}))
        assert binary.status == 400 and binary.message.endswith("illegal base64 data at input byte 4")


async def test_a_typed_secret_needs_its_keys(apiserver: APIServerProcess) -> None:
    name = _name()
    async with APIClient(apiserver) as http:
        tls = await http.post(SECRETS, secret(name, type="kubernetes.io/tls", data={"tls.crt": "AA=="}))
        assert tls.status == 422 and tls.message == f'Secret "{name}" is invalid: data[tls.key]: Required value'
        whole = {"tls.crt": "AA==", "tls.key": "AA=="}
        assert (await http.post(SECRETS, secret(name, type="kubernetes.io/tls", data=whole))).status == 201
