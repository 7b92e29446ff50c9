"""A store holding objects today's validation refuses (as an older version wrote them) still starts and serves.

Before, one ConfigMap whose ownerReferences was a dict made every start fail in the garbage collector's index, and
labels stored as a list made every list or watch with a label selector answer 500.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from typing import Any

from tests.integration.conftest import VM_API, configmap, vm_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient

CMS = "/api/v1/namespaces/default/configmaps"
VMS = f"{VM_API}/namespaces/default/virtualmachines"


def poisoned_configmap(name: Any, **fields: Any) -> dict[str, Any]:
    metadata = {
        "name": name,
        "namespace": "default",
        "uid": str(uuid.uuid4()),
        "creationTimestamp": "2024-01-01T00:00:00Z",
    }
    metadata.update(fields.pop("metadata", {}))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, **fields}


# (collection, key, object): one for each kind of write issue 12 found accepted.
POISON: list[tuple[str, str, dict[str, Any]]] = [
    (
        "core/configmaps",
        "default/owner-dict",
        poisoned_configmap("owner-dict", metadata={"ownerReferences": {"uid": "x"}}),
    ),
    ("core/configmaps", "default/owner-list", poisoned_configmap("owner-list", metadata={"ownerReferences": ["x"]})),
    ("core/configmaps", "default/labels-list", poisoned_configmap("labels-list", metadata={"labels": ["app"]})),
    ("core/configmaps", "default/not-a-number", poisoned_configmap("not-a-number", data={"a": float("nan")})),
    ("core/configmaps", "default/expanded", poisoned_configmap("expanded", data={"k": "lol" * 2_000_000})),
    ("core/configmaps", "default/Bad Name", poisoned_configmap("Bad Name")),
    ("core/configmaps", "default/five", poisoned_configmap(5)),
    (
        "core/configmaps",
        "default/finalizer-string",
        poisoned_configmap("finalizer-string", metadata={"finalizers": "a"}),
    ),
    ("core/configmaps", "default/generate-five", poisoned_configmap("generate-five", metadata={"generateName": 5})),
    (
        "core/configmaps",
        "default/label-value",
        poisoned_configmap("label-value", metadata={"labels": {"app": "v" * 70_000}}),
    ),
    (
        "core/configmaps",
        "default/annotations",
        poisoned_configmap("annotations", metadata={"annotations": {"a": "x" * 300_000}}),
    ),
    ("core/configmaps", "default/data-ints", poisoned_configmap("data-ints", data={"a": 1})),
    ("core/configmaps", "default/extra-field", poisoned_configmap("extra-field", spec={"replicas": 3})),
    (
        "kubevirt.io/virtualmachines",
        "default/vm-labels-list",
        {
            **vm_manifest("vm-labels-list"),
            "metadata": {
                "name": "vm-labels-list",
                "namespace": "default",
                "uid": "vm-uid",
                "labels": ["app"],
                "generation": 1,
            },
        },
    ),
    (
        "apiextensions.k8s.io/customresourcedefinitions",
        "broken.example.com",
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "broken.example.com", "uid": "crd-uid"},
            "spec": "x",
        },
    ),
]


def store_directly(server: APIServerProcess, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Append rows as the store writes them (kine's table), bypassing the API, as an older version could have."""
    db = sqlite3.connect(server.data_dir / "state.db")
    try:
        for collection, key, value in rows:
            cursor = db.execute(
                "INSERT INTO kine (name, created, deleted, create_revision, prev_revision, lease, value, old_value) "
                "VALUES (?, 1, 0, 0, 0, 0, ?, NULL)",
                (f"{collection}\x00{key}", json.dumps(value)),
            )
            db.execute("UPDATE kine SET create_revision = id WHERE id = ?", (cursor.lastrowid,))
        db.commit()
    finally:
        db.close()


async def eventually_gone(api: APIClient, path: str, within: float = 20) -> None:
    for _ in range(int(within / 0.1)):
        if (await api.get(path)).status == 404:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} still exists after {within}s")


async def test_a_poisoned_store_starts_and_serves_everything_else(fresh_apiserver: APIServerProcess) -> None:
    server = fresh_apiserver
    async with APIClient(server) as api:
        assert (await api.post(CMS, configmap("good", app="web"))).status == 201
        owner = (await api.post(CMS, configmap("owner"))).body
        dependent = configmap("dependent")
        dependent["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        ]
        assert (await api.post(CMS, dependent)).status == 201
        assert (await api.post(VMS, vm_manifest("good-vm"))).status == 201
    server.stop()
    store_directly(server, POISON)
    server.start()

    async with APIClient(server) as api:
        assert (await api.get(f"{CMS}/good")).status == 200
        assert (await api.get(f"{VMS}/good-vm")).status == 200
        listing = await api.get(CMS)
        assert listing.status == 200
        names = {str(item["metadata"]["name"]) for item in listing.body["items"]}
        assert {"good", "owner", "dependent", "owner-dict", "labels-list", "Bad Name", "5"} <= names
        # Label selectors over labels that are not a map: those objects simply do not match.
        for path in (CMS, "/api/v1/configmaps", VMS, f"{VM_API}/virtualmachines"):
            for selector in ("app", "app=web", "!app", "app notin (x)"):
                reply = await api.get(path, labelSelector=selector)
                assert reply.status == 200, (path, selector, reply.body)
        assert await api.names(CMS, labelSelector="app=web") == ["good"]
        stream = api.watch(CMS, labelSelector="app", resourceVersion="0", timeoutSeconds="1")
        events = [e async for e in stream]
        assert "good" in [e["object"]["metadata"]["name"] for e in events]

        # The garbage collector still runs: an owner's deletion takes its dependent.
        assert (await api.delete(f"{CMS}/owner")).status == 200
        await eventually_gone(api, f"{CMS}/dependent")

        # A poisoned object can be repaired or deleted.
        reply = await api.patch(f"{CMS}/labels-list", {"metadata": {"labels": {"app": "fixed"}}})
        assert reply.status == 200, reply.body
        assert reply.body["metadata"]["labels"] == {"app": "fixed"}
        reply = await api.patch(f"{CMS}/owner-dict", {"data": {"k": "v"}})
        assert reply.status == 200, reply.body
        assert "ownerReferences" not in reply.body["metadata"]
        for name in ("owner-list", "not-a-number", "expanded", "five", "finalizer-string", "data-ints"):
            assert (await api.delete(f"{CMS}/{name}")).status == 200, name
            assert (await api.get(f"{CMS}/{name}")).status == 404, name
        assert (await api.delete(f"{VMS}/vm-labels-list")).status == 200
