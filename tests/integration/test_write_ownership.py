"""A write changes only its own object: pruning, defaulting and KubeVirt's admission work on it in place, and
the stored versions it replaces (what a watch replays, what an exact read returns) stay as they were written."""

from __future__ import annotations

import copy

from tests.integration.conftest import VM_API, vm_manifest
from tests.support.http_client import APIClient


async def test_updates_leave_the_versions_they_replace_as_they_were(api: APIClient, namespace: str) -> None:
    vms = f"{VM_API}/namespaces/{namespace}/virtualmachines"
    created = await api.post(vms, vm_manifest("kept"))
    assert created.status == 201, created.body
    first = copy.deepcopy(created.body)
    version = first["metadata"]["resourceVersion"]

    # A status write, then a spec write with a field the schema prunes and one admission must default.
    status = copy.deepcopy(first)
    status["status"] = {"printableStatus": "Stopped", "unknownToTheSchema": 1}
    put_status = await api.put(f"{vms}/kept/status", status)
    assert put_status.status == 200, put_status.body
    edited = copy.deepcopy(put_status.body)
    edited["metadata"]["labels"] = {"app": "edited"}
    template_spec = edited["spec"]["template"]["spec"]
    template_spec.pop("architecture")
    template_spec["domain"].pop("machine")
    template_spec["notAField"] = True
    put_spec = await api.put(f"{vms}/kept", edited)
    assert put_spec.status == 200, put_spec.body
    assert "unknownToTheSchema" not in put_status.body["status"]
    assert "notAField" not in put_spec.body["spec"]["template"]["spec"]
    defaulted = put_spec.body["spec"]["template"]["spec"]
    assert defaulted["architecture"] == first["spec"]["template"]["spec"]["architecture"]
    assert defaulted["domain"]["machine"] == first["spec"]["template"]["spec"]["domain"]["machine"]

    # The first version, read back exactly and replayed by a watch, is what its create returned.
    exact = await api.get(vms, resourceVersion=version, resourceVersionMatch="Exact")
    assert exact.status == 200, exact.body
    assert [item for item in exact.body["items"] if item["metadata"]["name"] == "kept"] == [
        {**first, "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine"}
    ]
    replayed = []
    async for event in api.watch(vms, resourceVersion=str(int(version) - 1), timeoutSeconds="1"):
        replayed.append(event)
    assert replayed[0]["type"] == "ADDED"
    assert replayed[0]["object"] == first
    assert [e["object"]["metadata"]["resourceVersion"] for e in replayed] == [
        version,
        put_status.body["metadata"]["resourceVersion"],
        put_spec.body["metadata"]["resourceVersion"],
    ]
    assert replayed[1]["object"] == put_status.body
