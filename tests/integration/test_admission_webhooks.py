"""The admission chain served as AdmissionReview v1 webhooks at KubeVirt's paths (for a real kube-apiserver)."""

from __future__ import annotations

import base64
import json

from pykubevirt.api.json_patch import apply_patch
from tests.integration.conftest import vm_manifest
from tests.support.http_client import APIClient


def admission_review(obj: dict, operation: str = "CREATE", uid: str = "req-1") -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "kubevirt.io", "version": "v1", "kind": obj["kind"]},
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
        },
    }


async def test_validating_webhook_denies_with_kubevirt_causes(api: APIClient) -> None:
    vm = vm_manifest("both")
    vm["spec"]["running"] = True
    reply = await api.post("/virtualmachines-validate", admission_review(vm, uid="abc"))
    assert reply.status == 200
    response = reply.body["response"]
    assert response["uid"] == "abc"
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        "Running and RunStrategy are mutually exclusive. "
        "Note that Running is deprecated, please use RunStrategy instead"
    )
    assert status["details"]["causes"][0]["field"] == "spec.running"


async def test_validating_webhook_allows_a_valid_vm(api: APIClient) -> None:
    reply = await api.post("/virtualmachines-validate", admission_review(vm_manifest("ok")))
    assert reply.body["response"] == {"uid": "req-1", "allowed": True}


async def test_mutating_webhook_returns_kubevirts_defaults_as_a_json_patch(api: APIClient) -> None:
    vmi = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "defaults"},
        "spec": vm_manifest("x")["spec"]["template"]["spec"],
    }
    reply = await api.post("/virtualmachineinstances-mutate", admission_review(vmi))
    response = reply.body["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patched = apply_patch(vmi, json.loads(base64.b64decode(response["patch"])))
    assert patched["spec"]["domain"]["machine"] == {"type": "q35"}
    assert patched["metadata"]["finalizers"] == ["kubevirt.io/foregroundDeleteVirtualMachine"]
    assert patched["status"]["phase"] == "Pending"


async def test_a_body_that_is_not_an_admission_review_is_a_400(api: APIClient) -> None:
    reply = await api.post("/virtualmachines-validate", {"kind": "Pod"})
    assert reply.status == 400
