"""Updates of custom resources against a CRD whose schema changed after the object was stored."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import custom_resource_definition, unique
from tests.support.http_client import APIClient

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def gauge_schema(color: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": color}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
        },
    }


async def test_an_update_walks_what_it_left_unchanged_when_the_schema_changed_since(
    api: APIClient, namespace: str
) -> None:
    group = f"{unique('g')}.example.com"
    crd = custom_resource_definition(group, "Gauge", gauge_schema({"type": "string"}))
    assert (await api.post(CRDS, crd)).status == 201
    path = f"/apis/{group}/v1/namespaces/{namespace}/gauges"
    made = await api.post(path, {"apiVersion": f"{group}/v1", "kind": "Gauge", "metadata": {"name": "g"}, "spec": {}})
    assert made.status == 201, made.body
    try:
        # Unchanged parts are skipped only while the schema is the one they were checked against.
        stored = (await api.get(f"{CRDS}/gauges.{group}")).body
        stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = gauge_schema({"type": "string", "default": "red"})
        assert (await api.put(f"{CRDS}/gauges.{group}", stored)).status == 200
        labelled = await api.patch(f"{path}/g", {"metadata": {"labels": {"a": "b"}}})
        assert labelled.status == 200, labelled.body
        assert labelled.body["spec"] == {"color": "red"}

        # Written under the current schema, a later update's unchanged spec is still what was stored.
        again = await api.patch(f"{path}/g", {"metadata": {"labels": {"a": "c"}}})
        assert again.body["spec"] == {"color": "red"}
        bad = await api.patch(f"{path}/g", {"spec": {"size": "big"}})
        assert bad.status == 422, bad.body
    finally:
        assert (await api.request("DELETE", f"{CRDS}/gauges.{group}")).status == 200
