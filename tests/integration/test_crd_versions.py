"""Custom resources served in several versions of their CRD: stored in one, read and written through any.

As kube-apiserver with conversion strategy None: only apiVersion differs between versions; a deprecated version
answers every request with its Warning; KubeVirt's core kinds are still served as kubevirt.io/v1alpha3.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.conftest import Kubectl, custom_resource_definition, unique
from tests.support.http_client import APIClient

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def two_version_crd(group: str, *, storage: str = "v1", deprecated_alpha: bool = True) -> dict[str, Any]:
    """Dials of `group`, served as v1alpha1 and v1 with one schema, stored as `storage`."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
    }
    crd = custom_resource_definition(group, "Dial", schema)
    ga = crd["spec"]["versions"][0]
    alpha = {**ga, "name": "v1alpha1", "storage": storage == "v1alpha1"}
    if deprecated_alpha:
        alpha["deprecated"] = True
    crd["spec"]["versions"] = [alpha, {**ga, "storage": storage == "v1"}]
    return crd


def dial(group: str, version: str, name: str, size: int = 1) -> dict[str, Any]:
    return {"apiVersion": f"{group}/{version}", "kind": "Dial", "metadata": {"name": name}, "spec": {"size": size}}


async def test_an_object_written_through_one_version_reads_as_any_other(api: APIClient, namespace: str) -> None:
    group = f"{unique('g')}.example.com"
    assert (await api.post(CRDS, two_version_crd(group))).status == 201
    alpha, ga = (f"/apis/{group}/{v}/namespaces/{namespace}/dials" for v in ("v1alpha1", "v1"))
    try:
        made = await api.post(alpha, dial(group, "v1alpha1", "a", 3))
        assert made.status == 201, made.body
        assert made.body["apiVersion"] == f"{group}/v1alpha1"
        assert made.warnings == [f'299 - "{group}/v1alpha1 Dial is deprecated; use {group}/v1 Dial"']

        read = await api.get(f"{ga}/a")
        assert read.body["apiVersion"] == f"{group}/v1"
        assert read.body["spec"] == {"size": 3} and read.warnings == []
        listed = await api.get(ga)
        assert listed.body["apiVersion"] == f"{group}/v1"
        assert [item["apiVersion"] for item in listed.body["items"]] == [f"{group}/v1"]

        # A write through v1 of the object read through v1 (its resourceVersion) is a plain update.
        read.body["spec"]["size"] = 4
        updated = await api.put(f"{ga}/a", read.body)
        assert updated.status == 200, updated.body
        again = await api.get(f"{alpha}/a")
        assert again.body["apiVersion"] == f"{group}/v1alpha1"
        assert again.body["spec"] == {"size": 4}
        assert again.body["metadata"]["resourceVersion"] == updated.body["metadata"]["resourceVersion"]

        # Sending back what was read through the other version changes nothing and stores nothing.
        same = await api.put(f"{alpha}/a", again.body)
        assert same.status == 200
        assert same.body["metadata"]["resourceVersion"] == again.body["metadata"]["resourceVersion"]

        # A body of the other version on a version's path is refused, as kube refuses it.
        wrong = await api.post(ga, dial(group, "v1alpha1", "b"))
        assert wrong.status == 400, wrong.body
        assert "does not match the expected API version" in wrong.message
    finally:
        assert (await api.delete(f"{CRDS}/dials.{group}")).status == 200


async def test_a_watch_sees_each_write_in_its_own_version(api: APIClient, namespace: str) -> None:
    group = f"{unique('g')}.example.com"
    assert (await api.post(CRDS, two_version_crd(group))).status == 201
    alpha, ga = (f"/apis/{group}/{v}/namespaces/{namespace}/dials" for v in ("v1alpha1", "v1"))
    try:
        opened = asyncio.Event()
        seen: list[tuple[str, str]] = []

        async def watch() -> None:
            async for event in api.watch(alpha, opened, timeoutSeconds="20"):
                seen.append((event["type"], event["object"]["apiVersion"]))
                if len(seen) == 2:
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(opened.wait(), 10)
        assert (await api.post(ga, dial(group, "v1", "w"))).status == 201
        assert (await api.patch(f"{ga}/w", {"spec": {"size": 9}})).status == 200
        await asyncio.wait_for(watcher, 20)
        assert seen == [("ADDED", f"{group}/v1alpha1"), ("MODIFIED", f"{group}/v1alpha1")]
    finally:
        assert (await api.delete(f"{CRDS}/dials.{group}")).status == 200


async def test_changing_the_storage_version_keeps_the_objects_and_records_both(api: APIClient, namespace: str) -> None:
    group = f"{unique('g')}.example.com"
    made = await api.post(CRDS, two_version_crd(group, storage="v1alpha1", deprecated_alpha=False))
    assert made.status == 201, made.body
    alpha, ga = (f"/apis/{group}/{v}/namespaces/{namespace}/dials" for v in ("v1alpha1", "v1"))
    try:
        assert (await api.post(alpha, dial(group, "v1alpha1", "old", 2))).status == 201
        crd = (await api.get(f"{CRDS}/dials.{group}")).body
        assert crd["status"]["storedVersions"] == ["v1alpha1"]
        crd["spec"]["versions"][0]["storage"], crd["spec"]["versions"][1]["storage"] = False, True
        assert (await api.put(f"{CRDS}/dials.{group}", crd)).status == 200

        crd = (await api.get(f"{CRDS}/dials.{group}")).body
        assert crd["status"]["storedVersions"] == ["v1alpha1", "v1"]
        old = await api.get(f"{ga}/old")
        assert old.status == 200 and old.body["apiVersion"] == f"{group}/v1" and old.body["spec"] == {"size": 2}
    finally:
        assert (await api.delete(f"{CRDS}/dials.{group}")).status == 200


async def test_a_crd_must_store_exactly_one_version_under_unique_names(api: APIClient) -> None:
    group = f"{unique('g')}.example.com"
    crd = two_version_crd(group)
    crd["spec"]["versions"][0]["storage"] = True
    reply = await api.post(CRDS, crd)
    assert reply.status == 422, reply.body
    assert (
        'spec.versions: Invalid value: ["v1alpha1", "v1"]: must have exactly one version marked as storage version'
        in reply.message
    )

    crd = two_version_crd(group)
    crd["spec"]["versions"][0]["name"] = "v1"
    reply = await api.post(CRDS, crd)
    assert reply.status == 422 and "must contain unique version names" in reply.message, reply.body

    crd = two_version_crd(group)
    crd["spec"]["versions"][0]["name"] = "V1beta"
    reply = await api.post(CRDS, crd)
    assert reply.status == 422, reply.body
    assert 'spec.versions[0].name: Invalid value: "V1beta": a DNS-1035 label must consist of' in reply.message


def test_an_old_kubevirt_manifest_in_v1alpha3_still_applies(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    manifest = """
apiVersion: kubevirt.io/v1alpha3
kind: VirtualMachine
metadata:
  name: legacy
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        devices: {}
        resources: {requests: {memory: 64Mi}}
"""
    applied = kubectl_cli("apply", "-n", kubectl_namespace, "-f", "-", stdin=manifest)
    assert "virtualmachine.kubevirt.io/legacy created" in applied.stdout
    assert "Warning: kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release." in applied.stderr
    # Stored as v1: what KubeVirt's controllers and `kubectl get vm` read.
    got = kubectl_cli("get", "vm", "legacy", "-n", kubectl_namespace, "-o", "jsonpath={.apiVersion}")
    assert got.stdout == "kubevirt.io/v1"
    # Defaulted and validated by KubeVirt's admission whatever the version it came in.
    again = kubectl_cli("apply", "-n", kubectl_namespace, "-f", "-", stdin=manifest)
    assert "unchanged" in again.stdout
    bad = kubectl_cli(
        "apply", "-n", kubectl_namespace, "-f", "-", stdin=manifest.replace("memory: 64Mi", "memory: -1"), check=False
    )
    assert bad.returncode == 1, bad.stderr
    assert "spec.template.spec.domain.resources.requests.memory '-1': must be greater than or equal to 0." in bad.stderr
