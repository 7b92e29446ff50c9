"""Kubernetes API semantics of the embedded server, over HTTPS with a bearer token, as any client sees them."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pykubevirt.apiserver import protobuf
from pykubevirt.apiserver.server import EmbeddedAPIServer, ServerOptions
from pykubevirt.virtapi.identities import CONTROLLER_USER
from tests.integration.conftest import (
    NOT_ROOT_CA,
    VM_API,
    configmap,
    custom_resource_definition,
    pod_manifest,
    unique,
    vm_manifest,
    vmi_manifest,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient
from tests.support.waiting import consistently, eventually

VMI_FINALIZER = "kubevirt.io/foregroundDeleteVirtualMachine"
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def vms(namespace: str) -> str:
    return f"{VM_API}/namespaces/{namespace}/virtualmachines"


def vmis(namespace: str) -> str:
    return f"{VM_API}/namespaces/{namespace}/virtualmachineinstances"


def cms(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps"


def pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


async def snapshot(api: APIClient, path: str) -> dict[str, str]:
    """name → resourceVersion of everything a LIST of `path` returns."""
    reply = await api.get(path)
    assert reply.status == 200, reply.body
    return {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in reply.body["items"]}


@contextlib.asynccontextmanager
async def nothing_stored(api: APIClient, *paths: str) -> AsyncIterator[None]:
    """Asserts that the collections under `paths` are exactly as before the block."""
    before = [await snapshot(api, p) for p in paths]
    yield
    after = [await snapshot(api, p) for p in paths]
    assert after == before


def assert_status(reply: Any, code: int, reason: str) -> None:
    assert reply.status == code, (reply.status, reply.body)
    assert reply.body["kind"] == "Status", reply.body
    assert reply.body["code"] == code
    assert reply.body["status"] == "Failure"
    assert reply.body["reason"] == reason, reply.body


# --------------------------------------------------------------------------------------------------------- bad input


async def test_malformed_json_is_400_and_stores_nothing(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        reply = await api.request("POST", cms(namespace), raw=b'{"metadata": {"name": "x"')
        assert_status(reply, 400, "BadRequest")
        reply = await api.request("POST", vms(namespace), raw=b"[1, 2")
        assert_status(reply, 400, "BadRequest")
        reply = await api.post(cms(namespace), ["not", "an", "object"])
        assert_status(reply, 400, "BadRequest")


async def test_unknown_resource_path_is_404(api: APIClient, namespace: str) -> None:
    for path in (
        f"{VM_API}/namespaces/{namespace}/nothings",
        "/api/v1/widgets",
        "/apis/nonexistent.example.com/v1/things",
        f"{vms(namespace)}/x/nosuchsubresource",
    ):
        reply = await api.get(path)
        assert_status(reply, 404, "NotFound")
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(f"/api/v1/namespaces/{namespace}/gadgets", configmap("g"))
        assert_status(reply, 404, "NotFound")
    reply = await api.get(f"{vms(namespace)}/absent")
    assert_status(reply, 404, "NotFound")
    assert reply.message == 'virtualmachines.kubevirt.io "absent" not found'
    assert reply.body["details"] == {"name": "absent", "group": "kubevirt.io", "kind": "virtualmachines"}


async def test_unsupported_content_type_is_415(api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace)):
        reply = await api.request(
            "POST", cms(namespace), raw=b"name: x\n", content_type="text/plain", headers={"Accept": "*/*"}
        )
        assert_status(reply, 415, "UnsupportedMediaType")
        assert "accepted media types include: application/json" in reply.message


async def test_protobuf_bodies_of_built_in_kinds(api: APIClient, namespace: str) -> None:
    """Typed clients (kubectl create namespace|configmap|secret) send Kubernetes' protobuf encoding."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "proto", "labels": {"via": "protobuf"}},
        "data": {"key": "value"},
        "binaryData": {"bin": "AAEC"},
    }
    reply = await api.request("POST", cms(namespace), raw=protobuf.encode(cm), content_type=protobuf.CONTENT_TYPE)
    assert reply.status == 201, reply.body
    stored = (await api.get(f"{cms(namespace)}/proto")).body
    assert stored["metadata"]["labels"] == {"via": "protobuf"}
    assert (stored["data"], stored["binaryData"]) == ({"key": "value"}, {"bin": "AAEC"})
    async with nothing_stored(api, pods(namespace), cms(namespace)):
        pod = protobuf.MAGIC + protobuf.encode_message(
            {"typeMeta": {"apiVersion": "v1", "kind": "Pod"}, "raw": b"\x0a\x00"}, protobuf.MESSAGES["Unknown"]
        )
        reply = await api.request("POST", pods(namespace), raw=pod, content_type=protobuf.CONTENT_TYPE)
        assert_status(reply, 415, "UnsupportedMediaType")
        garbage = await api.request("POST", cms(namespace), raw=b"k8s\x00\xff\xff", content_type=protobuf.CONTENT_TYPE)
        assert_status(garbage, 400, "BadRequest")


async def test_invalid_vm_is_422_with_kubevirt_causes(api: APIClient, namespace: str) -> None:
    vm = vm_manifest("bad")
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["name"] = "other"
    async with nothing_stored(api, vms(namespace)):
        reply = await api.post(vms(namespace), vm)
    assert_status(reply, 422, "Invalid")
    causes = reply.body["details"]["causes"]
    assert causes, reply.body
    # metav1.StatusCause: {reason, message, field}
    assert all(set(cause) <= {"reason", "message", "field"} for cause in causes), causes
    assert causes[0]["reason"] == "FieldValueInvalid"
    assert causes[0]["field"] == "spec.template.spec.domain.devices.disks[0].name"
    assert "other" in causes[0]["message"]
    assert reply.message.startswith('admission webhook "virtualmachine-validator.kubevirt.io" denied the request: ')


async def test_stale_resource_version_on_put_is_409(api: APIClient, namespace: str) -> None:
    created = (await api.post(cms(namespace), configmap("c"))).body
    stale = dict(created, data={"k": "first"})
    assert (await api.put(f"{cms(namespace)}/c", stale)).status == 200
    async with nothing_stored(api, cms(namespace)):
        reply = await api.put(f"{cms(namespace)}/c", dict(created, data={"k": "second"}))
        assert_status(reply, 409, "Conflict")
    assert reply.message == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert (await api.get(f"{cms(namespace)}/c")).body["data"] == {"k": "first"}


async def test_body_over_3_mib_is_413(api: APIClient, namespace: str) -> None:
    big = configmap("big")
    big["data"] = {"blob": "x" * (3 * 1024 * 1024 + 10)}
    async with nothing_stored(api, cms(namespace)):
        reply = await api.post(cms(namespace), big)
        assert_status(reply, 413, "RequestEntityTooLarge")


async def test_missing_or_wrong_token_is_401(apiserver: APIServerProcess, api: APIClient, namespace: str) -> None:
    async with nothing_stored(api, cms(namespace)):
        for token in (None, "not-a-token", apiserver.token() + "x"):
            async with APIClient(apiserver, token) as stranger:
                reply = await stranger.post(cms(namespace), configmap("intruder"))
                assert_status(reply, 401, "Unauthorized")
                assert (await stranger.get(cms(namespace))).status == 401


async def test_create_of_an_existing_name_is_409_already_exists(api: APIClient, namespace: str) -> None:
    assert (await api.post(vms(namespace), vm_manifest("dup"))).status == 201
    async with nothing_stored(api, vms(namespace)):
        reply = await api.post(vms(namespace), vm_manifest("dup"))
    assert_status(reply, 409, "AlreadyExists")
    assert reply.message == 'virtualmachines.kubevirt.io "dup" already exists'


# --------------------------------------------------------------------------------------------------------- reads


async def test_generate_name(api: APIClient, namespace: str) -> None:
    body = configmap("")
    body["metadata"] = {"generateName": "gen-"}
    first = await api.post(cms(namespace), body)
    second = await api.post(cms(namespace), body)
    assert first.status == second.status == 201
    names = [first.body["metadata"]["name"], second.body["metadata"]["name"]]
    assert all(re.fullmatch(r"gen-[a-z0-9]{5}", n) for n in names), names
    assert names[0] != names[1]
    assert await api.names(cms(namespace), fieldSelector=NOT_ROOT_CA) == sorted(names)


async def test_limit_and_continue_page_through_25_objects(api: APIClient, namespace: str) -> None:
    expected = sorted(f"cm-{i:02d}" for i in range(25))
    for name in expected:
        assert (await api.post(cms(namespace), configmap(name))).status == 201
    seen: list[str] = []
    token = ""
    pages = 0
    list_rv = ""
    while True:
        params = {"limit": "10", "fieldSelector": NOT_ROOT_CA}
        if token:
            params["continue"] = token
        reply = await api.get(cms(namespace), **params)
        assert reply.status == 200
        pages += 1
        page = [item["metadata"]["name"] for item in reply.body["items"]]
        assert len(page) == (10 if pages < 3 else 5)
        seen += page
        list_rv = list_rv or reply.body["metadata"]["resourceVersion"]
        token = reply.body["metadata"].get("continue", "")
        if not token:
            break
        # A write between pages does not show up in later pages of the same list.
        await api.post(cms(namespace), configmap(f"late-{pages}"))
    assert pages == 3
    assert seen == expected
    # The list's revision still names that state: resourceVersionMatch=Exact reads it back.
    exact = await api.names(
        cms(namespace), resourceVersion=list_rv, resourceVersionMatch="Exact", fieldSelector=NOT_ROOT_CA
    )
    assert exact == expected
    assert len(await api.names(cms(namespace), fieldSelector=NOT_ROOT_CA)) == 27
    future = await api.get(cms(namespace), resourceVersion="999999999", resourceVersionMatch="Exact")
    assert_status(future, 504, "Timeout")
    assert future.message.startswith("Timeout: Too large resource version: 999999999, current: ")
    unset = await api.get(cms(namespace), resourceVersionMatch="Exact")
    assert_status(unset, 422, "Invalid")
    bad = await api.get(cms(namespace), limit="10", **{"continue": "garbage!"})
    assert_status(bad, 400, "BadRequest")


async def test_label_selectors(api: APIClient, namespace: str) -> None:
    for name, labels in {
        "a": {"app": "web", "tier": "front"},
        "b": {"app": "web", "tier": "back"},
        "c": {"app": "db"},
        "d": {},
    }.items():
        assert (await api.post(cms(namespace), configmap(name, **labels))).status == 201
    cases = {
        "app=web": ["a", "b"],
        "app==db": ["c"],
        "app!=web": ["c", "d"],
        "tier in (front,back)": ["a", "b"],
        "app notin (web)": ["c", "d"],
        "tier": ["a", "b"],
        "!tier": ["c", "d"],
        "app=web,tier=back": ["b"],
        "app in (web,db),!tier": ["c"],
    }
    for selector, names in cases.items():
        assert await api.names(cms(namespace), labelSelector=selector, fieldSelector=NOT_ROOT_CA) == names, selector
    reply = await api.get(cms(namespace), labelSelector="app in (web")
    assert_status(reply, 400, "BadRequest")


async def test_field_selectors(api: APIClient, namespace: str) -> None:
    other = unique("t")
    await api.post("/api/v1/namespaces", {"metadata": {"name": other}})
    for ns in (namespace, other):
        await api.post(cms(ns), configmap("same"))
    await api.post(cms(namespace), configmap("different"))
    assert await api.names(cms(namespace), fieldSelector="metadata.name=same") == ["same"]
    assert await api.names(cms(namespace), fieldSelector=f"metadata.name!=same,{NOT_ROOT_CA}") == ["different"]
    everywhere = await api.get("/api/v1/configmaps", fieldSelector=f"metadata.namespace={other},{NOT_ROOT_CA}")
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in everywhere.body["items"]] == [(other, "same")]

    running = pod_manifest("running", node="node-a")
    running["status"] = {"phase": "Running"}
    created = await api.post(pods(namespace), running)
    # A new pod is Pending whatever status it was sent with; its node reports the rest through /status.
    assert created.body["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    await api.patch(f"{pods(namespace)}/running/status", {"status": {"phase": "Running"}})
    await api.post(pods(namespace), pod_manifest("pending"))
    assert await api.names(pods(namespace), fieldSelector="status.phase=Running") == ["running"]
    assert await api.names(pods(namespace), fieldSelector="spec.nodeName=node-a") == ["running"]
    assert await api.names(pods(namespace), fieldSelector="spec.nodeName=") == ["pending"]
    assert await api.names(pods(namespace), fieldSelector="spec.nodeName!=,status.phase!=Pending") == ["running"]

    for name, involved in (("e1", "vm-one"), ("e2", "vm-two")):
        event = {
            "metadata": {"name": name},
            "involvedObject": {"kind": "VirtualMachine", "name": involved, "namespace": namespace},
            "reason": "Test",
            "message": "m",
            "type": "Normal",
        }
        assert (await api.post(f"/api/v1/namespaces/{namespace}/events", event)).status == 201
    assert await api.names(
        f"/api/v1/namespaces/{namespace}/events",
        fieldSelector="involvedObject.name=vm-two,involvedObject.kind=VirtualMachine",
    ) == ["e2"]

    reply = await api.get(cms(namespace), fieldSelector="data.k=v")
    assert_status(reply, 400, "BadRequest")
    assert reply.message == "field label not supported: data.k"
    reply = await api.get(vms(namespace), fieldSelector="spec.runStrategy=Halted")
    assert_status(reply, 400, "BadRequest")
    assert reply.message == "field label not supported: spec.runStrategy"


async def test_cluster_wide_list_of_a_namespaced_kind(api: APIClient, namespace: str) -> None:
    other = unique("t")
    await api.post("/api/v1/namespaces", {"metadata": {"name": other}})
    await api.post(vms(namespace), vm_manifest("one"))
    await api.post(vms(other), vm_manifest("two"))
    reply = await api.get(f"{VM_API}/virtualmachines")
    assert reply.status == 200
    assert reply.body["kind"] == "VirtualMachineList"
    found = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in reply.body["items"]}
    assert {(namespace, "one"), (other, "two")} <= found
    assert any(i["metadata"]["namespace"] == namespace for i in reply.body["items"])


async def test_dry_run_stores_nothing(api: APIClient, namespace: str) -> None:
    await api.post(cms(namespace), configmap("kept"))
    async with nothing_stored(api, cms(namespace), vms(namespace)):
        created = await api.post(vms(namespace), vm_manifest("dry"), dryRun="All")
        assert created.status == 201
        assert created.body["metadata"]["name"] == "dry"
        # Admission ran: KubeVirt's defaults are in the answer.
        assert created.body["spec"]["template"]["spec"]["domain"].get("machine"), created.body
        assert (await api.patch(f"{cms(namespace)}/kept", {"data": {"k": "changed"}}, dryRun="All")).status == 200
        assert (await api.delete(f"{cms(namespace)}/kept", dryRun="All")).status == 200
        kept = (await api.get(f"{cms(namespace)}/kept")).body
        assert (await api.put(f"{cms(namespace)}/kept", dict(kept, data={"x": "y"}), dryRun="All")).status == 200
    assert (await api.get(f"{cms(namespace)}/kept")).body["data"] == {"k": "v"}
    reply = await api.post(cms(namespace), configmap("x"), dryRun="Some")
    assert_status(reply, 400, "BadRequest")


async def test_field_validation_strict_warn_ignore(api: APIClient, namespace: str) -> None:
    def with_unknown(name: str) -> dict[str, Any]:
        vm = vm_manifest(name)
        vm["spec"]["bogusField"] = 1
        return vm

    async with nothing_stored(api, vms(namespace)):
        strict = await api.post(vms(namespace), with_unknown("strict"), fieldValidation="Strict")
    assert_status(strict, 400, "BadRequest")
    assert 'unknown field "spec.bogusField"' in strict.message

    warn = await api.post(vms(namespace), with_unknown("warn"), fieldValidation="Warn")
    assert warn.status == 201
    # apimachinery's Warning header: code 299, no agent, the text quoted with \" escapes.
    assert warn.warnings == ['299 - "unknown field \\"spec.bogusField\\""'], warn.warnings
    assert "bogusField" not in warn.body["spec"]

    ignore = await api.post(vms(namespace), with_unknown("ignore"), fieldValidation="Ignore")
    assert ignore.status == 201
    assert ignore.warnings == []
    assert "bogusField" not in ignore.body["spec"]
    stored = (await api.get(f"{vms(namespace)}/ignore")).body
    assert "bogusField" not in stored["spec"]

    bad = await api.post(vms(namespace), with_unknown("other"), fieldValidation="Loose")
    assert_status(bad, 400, "BadRequest")


# --------------------------------------------------------------------------------------------------------- writes


async def test_status_subresource_semantics_of_vms(api: APIClient, namespace: str) -> None:
    path = f"{vms(namespace)}/vm"
    vm = vm_manifest("vm")
    vm["status"] = {"printableStatus": "Running"}
    created = (await api.post(vms(namespace), vm)).body
    assert "printableStatus" not in (created.get("status") or {})
    assert created["metadata"]["generation"] == 1
    rvs = [created["metadata"]["resourceVersion"]]

    # Main resource: status ignored, spec change bumps generation.
    body = dict(created, status={"printableStatus": "Running"})
    body["spec"] = dict(created["spec"], runStrategy="Always")
    updated = (await api.put(path, body)).body
    assert updated["spec"]["runStrategy"] == "Always"
    assert "printableStatus" not in (updated.get("status") or {})
    assert updated["metadata"]["generation"] == 2
    rvs.append(updated["metadata"]["resourceVersion"])

    # /status: spec ignored, status taken, generation unchanged.
    body = dict(updated, status={"printableStatus": "Stopped", "ready": False})
    body["spec"] = dict(updated["spec"], runStrategy="Manual")
    status_reply = await api.put(f"{path}/status", body)
    assert status_reply.status == 200, status_reply.body
    after_status = status_reply.body
    assert after_status["status"]["printableStatus"] == "Stopped"
    assert after_status["spec"]["runStrategy"] == "Always"
    assert after_status["metadata"]["generation"] == 2
    rvs.append(after_status["metadata"]["resourceVersion"])

    # merge patch of /status, and a metadata-only change: new resourceVersion, same generation.
    patched = (await api.patch(f"{path}/status", {"status": {"printableStatus": "Starting"}})).body
    assert patched["status"]["printableStatus"] == "Starting"
    rvs.append(patched["metadata"]["resourceVersion"])
    labelled = (await api.patch(path, {"metadata": {"labels": {"x": "y"}}, "status": {"ready": True}})).body
    assert labelled["metadata"]["generation"] == 2
    assert labelled["status"] == patched["status"]
    rvs.append(labelled["metadata"]["resourceVersion"])
    assert len(set(rvs)) == len(rvs)
    assert [int(rv) for rv in rvs] == sorted(int(rv) for rv in rvs)
    got = (await api.get(f"{path}/status")).body
    assert got["status"]["printableStatus"] == "Starting"


async def test_vmi_has_no_status_subresource(apiserver: APIServerProcess, api: APIClient, namespace: str) -> None:
    """Like KubeVirt: VMI status is written through the main resource, by KubeVirt's own service accounts."""
    listing = (await api.get(VM_API)).body
    names = {r["name"] for r in listing["resources"]}
    assert "virtualmachines/status" in names
    assert "virtualmachineinstances/status" not in names
    created = (await api.post(vmis(namespace), vmi_manifest("vmi"))).body
    assert created["status"]["phase"] == "Pending"
    body = dict(created, status={"phase": "Scheduling", "nodeName": "node-a"})
    async with APIClient(apiserver, apiserver.token_of(CONTROLLER_USER)) as controller:
        updated = await controller.put(f"{vmis(namespace)}/vmi", body)
    assert updated.status == 200, updated.body
    assert updated.body["status"] == {"phase": "Scheduling", "nodeName": "node-a"}
    # Without a status subresource every non-metadata change counts as a new generation.
    assert updated.body["metadata"]["generation"] == created["metadata"]["generation"] + 1
    assert (await api.get(f"{vmis(namespace)}/vmi")).body["status"]["nodeName"] == "node-a"
    # KubeVirt's VMI mutator reverts status edits by anybody else.
    edited = await api.patch(f"{vmis(namespace)}/vmi", {"status": {"phase": "Running"}})
    assert edited.status == 200
    assert edited.body["status"]["phase"] == "Scheduling"
    reply = await api.put(f"{vmis(namespace)}/vmi/status", updated.body)
    assert_status(reply, 404, "NotFound")


async def test_finalizers_hold_deletion_and_cannot_be_added_while_deleting(api: APIClient, namespace: str) -> None:
    cm = configmap("held")
    cm["metadata"]["finalizers"] = ["example.com/hold"]
    await api.post(cms(namespace), cm)
    reply = await api.delete(f"{cms(namespace)}/held")
    assert reply.status == 200
    meta = reply.body["metadata"]
    assert meta["deletionTimestamp"]
    assert meta["deletionGracePeriodSeconds"] == 0
    held = (await api.get(f"{cms(namespace)}/held")).body
    assert held["metadata"]["finalizers"] == ["example.com/hold"]
    # A second delete changes nothing.
    again = await api.delete(f"{cms(namespace)}/held")
    assert again.status == 200
    assert again.body["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    assert again.body["metadata"]["resourceVersion"] == meta["resourceVersion"]

    async with nothing_stored(api, cms(namespace)):
        reply = await api.patch(
            f"{cms(namespace)}/held", {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
        )
        assert_status(reply, 422, "Invalid")
        assert "no new finalizers can be added if the object is being deleted" in reply.message
    # Other changes are still allowed; removing the last finalizer removes the object.
    assert (await api.patch(f"{cms(namespace)}/held", {"data": {"k": "w"}})).status == 200
    assert (await api.patch(f"{cms(namespace)}/held", {"metadata": {"finalizers": None}})).status == 200
    assert (await api.get(f"{cms(namespace)}/held")).status == 404


async def test_graceful_pod_deletion(api: APIClient, namespace: str) -> None:
    await api.post(pods(namespace), pod_manifest("bound", node="node-a"))
    reply = await api.delete(f"{pods(namespace)}/bound")
    assert reply.status == 200
    assert reply.body["metadata"]["deletionTimestamp"]
    assert reply.body["metadata"]["deletionGracePeriodSeconds"] == 30
    assert (await api.get(f"{pods(namespace)}/bound")).status == 200
    # A shorter grace period shortens it; grace 0 removes the pod.
    shorter = await api.delete(f"{pods(namespace)}/bound", {"gracePeriodSeconds": 5})
    assert shorter.body["metadata"]["deletionGracePeriodSeconds"] == 5
    gone = await api.delete(f"{pods(namespace)}/bound", {"gracePeriodSeconds": 0})
    assert gone.status == 200
    assert (await api.get(f"{pods(namespace)}/bound")).status == 404
    # An unscheduled pod goes at once.
    await api.post(pods(namespace), pod_manifest("unbound"))
    assert (await api.delete(f"{pods(namespace)}/unbound")).status == 200
    assert (await api.get(f"{pods(namespace)}/unbound")).status == 404


async def test_pod_binding(api: APIClient, namespace: str) -> None:
    await api.post(pods(namespace), pod_manifest("p"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }
    reply = await api.post(f"{pods(namespace)}/p/binding", binding)
    assert reply.status == 201, reply.body
    assert (await api.get(f"{pods(namespace)}/p")).body["spec"]["nodeName"] == "node-a"
    async with nothing_stored(api, pods(namespace)):
        second = await api.post(f"{pods(namespace)}/p/binding", dict(binding, target={"kind": "Node", "name": "b"}))
        assert_status(second, 409, "Conflict")
    assert 'is already assigned to node "node-a"' in second.message


# --------------------------------------------------------------------------------------------------------- GC


async def _owner_and_dependent(api: APIClient, namespace: str, *, block: bool = False) -> tuple[str, str]:
    """A VM and a VMI it owns; KubeVirt's VMI mutator gives the VMI its foregroundDeleteVirtualMachine finalizer."""
    owner = (await api.post(vms(namespace), vm_manifest("owner"))).body
    vmi = vmi_manifest("dependent")
    ref: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    if block:
        ref["blockOwnerDeletion"] = True
    vmi["metadata"]["ownerReferences"] = [ref]
    created = await api.post(vmis(namespace), vmi)
    assert created.status == 201
    assert created.body["metadata"]["finalizers"] == [VMI_FINALIZER]
    return f"{vms(namespace)}/owner", f"{vmis(namespace)}/dependent"


async def test_background_propagation_deletes_dependents(api: APIClient, namespace: str) -> None:
    owner, dependent = await _owner_and_dependent(api, namespace)
    reply = await api.delete(owner, {"propagationPolicy": "Background"})
    assert reply.status == 200
    assert (await api.get(owner)).status == 404

    async def dependent_deleting() -> bool:
        return bool((await api.get(dependent)).body["metadata"].get("deletionTimestamp"))

    await eventually(dependent_deleting, timeout=10)
    # The VMI controller's finalizer is all that keeps it; once that is removed it is gone.
    assert (await api.patch(dependent, {"metadata": {"finalizers": None}})).status == 200
    assert (await api.get(dependent)).status == 404


async def test_foreground_propagation_waits_for_blocking_dependents(api: APIClient, namespace: str) -> None:
    owner, dependent = await _owner_and_dependent(api, namespace, block=True)
    reply = await api.delete(owner, {"propagationPolicy": "Foreground"})
    assert reply.status == 200
    assert "foregroundDeletion" in reply.body["metadata"]["finalizers"]

    async def dependent_deleting() -> bool:
        return bool((await api.get(dependent)).body["metadata"].get("deletionTimestamp"))

    await eventually(dependent_deleting, timeout=10)

    async def owner_waits() -> bool:
        still = await api.get(owner)
        assert still.status == 200
        assert still.body["metadata"]["deletionTimestamp"]
        assert still.body["metadata"]["finalizers"] == ["foregroundDeletion"]
        return True

    await consistently(owner_waits, for_=0.3)
    assert (await api.patch(dependent, {"metadata": {"finalizers": None}})).status == 200

    async def owner_gone() -> bool:
        return (await api.get(owner)).status == 404

    await eventually(owner_gone, timeout=10)
    assert (await api.get(dependent)).status == 404


async def test_orphan_propagation_keeps_dependents(api: APIClient, namespace: str) -> None:
    owner, dependent = await _owner_and_dependent(api, namespace)
    reply = await api.delete(owner, {"propagationPolicy": "Orphan"})
    assert reply.status == 200

    async def owner_gone() -> bool:
        return (await api.get(owner)).status == 404

    await eventually(owner_gone, timeout=10)

    async def dependent_kept() -> bool:
        kept = await api.get(dependent)
        assert kept.status == 200
        assert not kept.body["metadata"].get("ownerReferences")
        assert not kept.body["metadata"].get("deletionTimestamp")
        return True

    await consistently(dependent_kept, for_=0.3)


async def test_namespace_termination_then_metadata_finalizers(api: APIClient) -> None:
    name = unique("ns")
    created = await api.post("/api/v1/namespaces", {"metadata": {"name": name, "finalizers": ["example.com/keep"]}})
    assert created.status == 201
    assert created.body["spec"] == {"finalizers": ["kubernetes"]}
    assert created.body["status"] == {"phase": "Active"}
    assert created.body["metadata"]["labels"] == {"kubernetes.io/metadata.name": name}
    await api.post(cms(name), configmap("content"))
    reply = await api.delete(f"/api/v1/namespaces/{name}")
    assert reply.status == 200
    assert reply.body["status"]["phase"] == "Terminating"
    refused = await api.post(cms(name), configmap("late"))
    assert_status(refused, 403, "Forbidden")

    async def emptied() -> bool:
        ns = (await api.get(f"/api/v1/namespaces/{name}")).body
        return ns["spec"].get("finalizers") == [] and await api.names(cms(name)) == []

    # The namespace controller's part is done; the namespace's own finalizer still holds it.
    await eventually(emptied, timeout=10)

    async def namespace_held() -> bool:
        return (await api.get(f"/api/v1/namespaces/{name}")).status == 200

    await consistently(namespace_held, for_=0.3)
    assert (await api.patch(f"/api/v1/namespaces/{name}", {"metadata": {"finalizers": None}})).status == 200
    assert (await api.get(f"/api/v1/namespaces/{name}")).status == 404


# --------------------------------------------------------------------------------------------------------- concurrency


async def test_concurrent_writers_from_the_same_resource_version(api: APIClient, namespace: str) -> None:
    base = (await api.post(cms(namespace), configmap("contended"))).body
    writers = 12
    replies = await asyncio.gather(
        *(api.put(f"{cms(namespace)}/contended", dict(base, data={"writer": str(i)})) for i in range(writers))
    )
    codes = sorted(r.status for r in replies)
    assert codes == [200] + [409] * (writers - 1), codes
    winner = next(r for r in replies if r.status == 200).body
    stored = (await api.get(f"{cms(namespace)}/contended")).body
    assert stored["data"] == winner["data"]
    assert stored["metadata"]["resourceVersion"] == winner["metadata"]["resourceVersion"]
    assert all(r.reason == "Conflict" for r in replies if r.status == 409)


# --------------------------------------------------------------------------------------------------------- CRDs


async def test_posting_a_crd_serves_its_kind(api: APIClient, namespace: str) -> None:
    group = f"{unique('g')}.example.com"
    widget_schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"size": {"type": "integer", "default": 3}, "color": {"type": "string"}},
            }
        },
    }
    color = {"name": "Color", "type": "string", "jsonPath": ".spec.color"}
    crd = custom_resource_definition(group, "Widget", widget_schema, short_names=["wd"], printer_columns=[color])
    assert (await api.get(f"/apis/{group}/v1")).status == 404
    reply = await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    assert reply.status == 201, reply.body
    groups = (await api.get("/apis")).body
    assert group in {g["name"] for g in groups["groups"]}
    listing = (await api.get(f"/apis/{group}/v1")).body
    widget = next(r for r in listing["resources"] if r["name"] == "widgets")
    assert widget["kind"] == "Widget"
    assert widget["shortNames"] == ["wd"]
    index = (await api.get("/openapi/v3")).body
    assert f"apis/{group}/v1" in index["paths"]
    document = (await api.get(index["paths"][f"apis/{group}/v1"]["serverRelativeURL"])).body
    assert any(
        {"group": group, "version": "v1", "kind": "Widget"} in (s.get("x-kubernetes-group-version-kind") or [])
        for s in document["components"]["schemas"].values()
    )
    crd_status = (await api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}")).body
    assert {c["type"]: c["status"] for c in crd_status["status"]["conditions"]}["Established"] == "True"

    path = f"/apis/{group}/v1/namespaces/{namespace}/widgets"
    made = await api.post(
        path,
        {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"color": "blue", "extra": 1},
        },
    )
    assert made.status == 201, made.body
    assert made.body["spec"] == {"color": "blue", "size": 3}
    table = await api.request("GET", path, headers={"Accept": TABLE_ACCEPT})
    assert [c["name"] for c in table.body["columnDefinitions"]] == ["Name", "Color"]
    assert table.body["rows"][0]["cells"] == ["w", "blue"]

    # Custom resource names are DNS subdomains, as apiextensions-apiserver validates them.
    rejected = await api.post(path, {"metadata": {"name": "size=3,color=red"}, "spec": {}})
    assert rejected.status == 422, rejected.body
    assert rejected.body["details"]["causes"][0]["field"] == "metadata.name"
    # A single-object watch selects exactly the one named.
    dotted = "w.x"
    assert (await api.post(path, {"metadata": {"name": dotted}, "spec": {}})).status == 201
    stream = api.watch(f"{path}/{dotted}", resourceVersion="0", timeoutSeconds="1")
    async with contextlib.aclosing(stream):
        events = [event async for event in stream]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", dotted)]

    assert (await api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}")).status == 200
    assert (await api.get(f"/apis/{group}/v1")).status == 404
    assert (await api.get(path)).status == 404


async def test_a_yaml_alias_of_the_metadata_keeps_what_the_server_adds_to_the_metadata(
    api: APIClient, namespace: str
) -> None:
    group = f"{unique('g')}.example.com"
    free = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"copy": free}}}}
    crd = custom_resource_definition(group, "Gadget", schema)
    assert (await api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)).status == 201
    path = f"/apis/{group}/v1/namespaces/{namespace}/gadgets"
    body = (
        f"apiVersion: {group}/v1\nkind: Gadget\nmetadata: &meta {{name: g, labels: {{a: b}}}}\nspec: {{copy: *meta}}\n"
    )
    made = await api.request("POST", path, raw=body.encode(), content_type="application/yaml")
    assert made.status == 201, made.body
    # One mapping at two paths in the YAML: what the server sets in the metadata (namespace, uid, ...) stays there.
    assert made.body["metadata"]["namespace"] == namespace
    assert made.body["spec"] == {"copy": {"name": "g", "labels": {"a": "b"}}}
    assert (await api.get(f"{path}/g")).body["spec"] == {"copy": {"name": "g", "labels": {"a": "b"}}}
    assert (await api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}")).status == 200


# --------------------------------------------------------------------------------------------------------- Table


async def test_table_output_for_vms(api: APIClient, namespace: str) -> None:
    await api.post(vms(namespace), vm_manifest("tabled"))
    await api.patch(
        f"{vms(namespace)}/tabled/status",
        {"status": {"printableStatus": "Stopped", "conditions": [{"type": "Ready", "status": "False"}]}},
    )
    reply = await api.request("GET", vms(namespace), headers={"Accept": TABLE_ACCEPT})
    assert reply.status == 200
    table = reply.body
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age", "Status", "Ready"]
    assert table["metadata"]["resourceVersion"]
    (row,) = table["rows"]
    name, age, status, ready = row["cells"]
    assert (name, status, ready) == ("tabled", "Stopped", "False")
    assert re.fullmatch(r"\d+s", age), age
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["name"] == "tabled"
    single = await api.request(
        "GET", f"{vms(namespace)}/tabled", params={"includeObject": "Object"}, headers={"Accept": TABLE_ACCEPT}
    )
    assert single.body["rows"][0]["object"]["kind"] == "VirtualMachine"
    vmi_table = await api.request("GET", vmis(namespace), headers={"Accept": TABLE_ACCEPT})
    columns = [(c["name"], c.get("priority", 0)) for c in vmi_table.body["columnDefinitions"]]
    assert columns == [
        ("Name", 0),
        ("Age", 0),
        ("Phase", 0),
        ("IP", 0),
        ("NodeName", 0),
        ("Ready", 0),
        ("Live-Migratable", 1),
        ("Paused", 1),
    ]


# --------------------------------------------------------------------------------------------------------- in-process


@contextlib.asynccontextmanager
async def in_process(tmp_path: Path, **options: Any) -> AsyncIterator[tuple[EmbeddedAPIServer, APIClient]]:
    """An API server in the test's own event loop, for what only its internals or its options can show.

    No extensions: the server stands alone, without KubeVirt's kinds or admission.
    """
    server = EmbeddedAPIServer(ServerOptions(data_dir=tmp_path / "data", port=0, **options))
    await server.start()
    try:
        async with APIClient(None, server.admin_token(), url=server.url, ca_file=str(server.pki.ca_cert_path)) as api:
            yield server, api
    finally:
        await server.stop()


async def test_events_expire_after_their_ttl(tmp_path: Path) -> None:
    """Events carry a lease; the server removes them when it runs out (TTL lowered through a server option)."""
    ttl = 4
    async with in_process(tmp_path, event_ttl_seconds=ttl, lease_check_interval_seconds=0.1) as (_, api):
        events = "/api/v1/namespaces/default/events"
        event = {
            "metadata": {"name": "short-lived"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Test",
            "message": "m",
            "type": "Normal",
        }
        before_create = time.monotonic()
        created = await api.post(events, event)
        assert created.status == 201
        await api.post(cms("default"), configmap("durable"))
        rv = created.body["metadata"]["resourceVersion"]
        assert await api.names(events) == ["short-lived"]

        # An update renews the lease: the event outlives its first lease (the TTL from its creation).
        async def present() -> bool:
            return await api.names(events) == ["short-lived"]

        await consistently(present, for_=1.0)
        assert (await api.patch(f"{events}/short-lived", {"count": 2})).status == 200
        await consistently(present, for_=max(0.1, before_create + ttl + 0.3 - time.monotonic()))

        async def expired() -> bool:
            return await api.names(events) == []

        await eventually(expired, timeout=5)
        watched = []
        async for item in api.watch(events, resourceVersion=rv, timeoutSeconds="1"):
            watched.append((item["type"], item["object"]["metadata"]["name"]))
        assert watched == [("MODIFIED", "short-lived"), ("DELETED", "short-lived")]
        assert await api.names(cms("default"), fieldSelector=NOT_ROOT_CA) == ["durable"]


async def test_a_disconnected_watch_releases_its_watcher(tmp_path: Path) -> None:
    async with in_process(tmp_path) as (server, api):
        assert server.hub.watcher_count() == 0
        stream = api.watch(cms("default"), resourceVersion="1")
        reader = asyncio.create_task(anext(stream))

        async def registered() -> bool:
            return server.hub.watcher_count() == 1

        await eventually(registered, timeout=5)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await stream.aclose()

        async def released() -> bool:
            return server.hub.watcher_count() == 0

        # No event arrives on this watch: only the disconnect can end it.
        await eventually(released, timeout=3)
