"""Status writes and bindings share what they do not change with the stored object instead of copying it.

Each version a write replaces must stay as it was written: read back exactly, it is what its write returned. The
suite's API servers also check, at every write, that the version replaced still encodes to its stored row (a 500
otherwise), so any write here that changed a shared part in place fails with that 500.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.integration.conftest import VM_API, pod_manifest, vm_manifest
from tests.support.http_client import APIClient

JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


async def _exact(api: APIClient, collection: str, name: str, version: str) -> dict[str, Any]:
    reply = await api.get(collection, resourceVersion=version, resourceVersionMatch="Exact")
    assert reply.status == 200, reply.body
    (item,) = [i for i in reply.body["items"] if i["metadata"]["name"] == name]
    item.pop("apiVersion")
    item.pop("kind")
    return item


async def _check_versions(api: APIClient, collection: str, name: str, written: list[dict[str, Any]]) -> None:
    for body in written:
        expected = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
        assert await _exact(api, collection, name, body["metadata"]["resourceVersion"]) == expected


async def test_vm_status_writes_leave_every_replaced_version_as_written(api: APIClient, namespace: str) -> None:
    vms = f"{VM_API}/namespaces/{namespace}/virtualmachines"
    created = await api.post(vms, vm_manifest("shared"))
    assert created.status == 201, created.body
    written = [copy.deepcopy(created.body)]

    async def put_status(status: dict[str, Any], manager: str) -> None:
        body = copy.deepcopy(written[-1])
        body["status"] = status
        reply = await api.put(f"{vms}/shared/status", body, fieldManager=manager)
        assert reply.status == 200, reply.body
        written.append(copy.deepcopy(reply.body))

    async def patch_status(patch: Any, content_type: str) -> None:
        reply = await api.patch(f"{vms}/shared/status", patch, content_type=content_type)
        assert reply.status == 200, reply.body
        written.append(copy.deepcopy(reply.body))

    condition = {"type": "Ready", "status": "False", "reason": "Stopped", "message": "", "lastProbeTime": None}
    # Two PUTs (the second is the first the server knows passed its schema walks, so it shares), by two managers.
    await put_status({"printableStatus": "Stopped", "conditions": [condition]}, "first-writer")
    await put_status({"printableStatus": "Starting", "conditions": [condition], "created": True}, "second-writer")
    # Patches that reach into lists: an insert at the front shifts every stored condition to a new index.
    await patch_status(
        [{"op": "add", "path": "/status/conditions/0", "value": {"type": "Paused", "status": "False"}}], JSON_PATCH
    )
    await patch_status([{"op": "replace", "path": "/status/conditions/1/status", "value": "True"}], JSON_PATCH)
    await patch_status({"status": {"printableStatus": "Running", "ready": True}}, "application/merge-patch+json")
    # A status patch cannot change the spec: nothing changes, so nothing is written.
    unchanged = await api.patch(
        f"{vms}/shared/status", [{"op": "replace", "path": "/spec/runStrategy", "value": "Always"}], JSON_PATCH
    )
    assert unchanged.status == 200, unchanged.body
    assert unchanged.body == written[-1]
    # A main-resource write after the shared ones.
    labelled = await api.patch(f"{vms}/shared", {"metadata": {"labels": {"after": "status"}}})
    assert labelled.status == 200, labelled.body
    written.append(copy.deepcopy(labelled.body))

    assert [w["status"].get("printableStatus") for w in written[1:]] == [
        "Stopped",
        "Starting",
        "Starting",
        "Starting",
        "Running",
        "Running",
    ]
    assert [c["type"] for c in written[-1]["status"]["conditions"]] == ["Paused", "Ready"]
    assert written[-1]["status"]["conditions"][1]["status"] == "True"
    assert written[-1]["spec"]["runStrategy"] == written[0]["spec"]["runStrategy"]
    assert len({w["metadata"]["resourceVersion"] for w in written}) == len(written)
    await _check_versions(api, vms, "shared", written)


async def test_pod_binding_and_status_patches_leave_every_replaced_version_as_written(
    api: APIClient, namespace: str
) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    created = await api.post(pods, pod_manifest("shared-pod"))
    assert created.status == 201, created.body
    written = [copy.deepcopy(created.body)]
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "shared-pod"}, "target": {"name": "n1"}}
    bound = await api.post(f"{pods}/shared-pod/binding", binding)
    assert bound.status == 201, bound.body
    after_binding = await api.get(f"{pods}/shared-pod")
    written.append(copy.deepcopy(after_binding.body))

    for patch, content_type in [
        ({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, STRATEGIC),
        ({"status": {"conditions": [{"type": "ContainersReady", "status": "True"}]}}, STRATEGIC),
        # kube's strategic merge puts the patch's new condition first: Ready is now the second.
        ([{"op": "replace", "path": "/status/conditions/1/status", "value": "False"}], JSON_PATCH),
        ({"status": {"podIP": "10.0.0.9"}}, "application/merge-patch+json"),
    ]:
        reply = await api.patch(f"{pods}/shared-pod/status", patch, content_type=content_type)
        assert reply.status == 200, reply.body
        written.append(copy.deepcopy(reply.body))

    final = written[-1]
    assert final["spec"]["nodeName"] == "n1"
    assert written[0]["spec"].get("nodeName") is None
    assert final["status"]["phase"] == "Running"
    assert final["status"]["podIP"] == "10.0.0.9"
    assert {c["type"]: c["status"] for c in final["status"]["conditions"]} == {
        "Ready": "False",
        "ContainersReady": "True",
    }
    await _check_versions(api, pods, "shared-pod", written)
