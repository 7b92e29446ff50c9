"""Server-side apply through the real /usr/bin/kubectl: managedFields, conflicts between managers, --force-conflicts,
field removal, keyed lists of a CRD, and `kubectl diff` as server-side dry runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import Kubectl, vm_manifest
from tests.support.http_client import APIClient

pytestmark = pytest.mark.kubectl

APPLY_PATCH = "application/apply-patch+yaml"


@pytest.fixture
def k(kubectl_cli: Kubectl) -> Kubectl:
    return kubectl_cli


@pytest.fixture
def ns(kubectl_namespace: str) -> str:
    return kubectl_namespace


def configmap(name: str, data: dict[str, str], **labels: str) -> str:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})


def get(k: Kubectl, *args: str) -> Any:
    return json.loads(k("get", *args, "-o", "json", "--show-managed-fields").stdout)


def managers(obj: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["manager"], e["operation"]): e["fieldsV1"] for e in obj["metadata"].get("managedFields", [])}


def test_second_manager_conflicts_until_it_forces(k: Kubectl, ns: str) -> None:
    applied = k("apply", "--server-side", "--field-manager=a", "-n", ns, "-f", "-", stdin=configmap("c", {"key": "a"}))
    assert applied.stdout.strip() == "configmap/c serverside-applied"
    refused = k(
        "apply",
        "--server-side",
        "--field-manager=b",
        "-n",
        ns,
        "-f",
        "-",
        stdin=configmap("c", {"key": "b"}),
        check=False,
    )
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[0] == 'error: Apply failed with 1 conflict: conflict with "a": .data.key'
    assert "--force-conflicts" in refused.stderr
    assert get(k, "cm", "c", "-n", ns)["data"] == {"key": "a"}

    forced = k(
        "apply", "--server-side", "--field-manager=b", "--force-conflicts", "-n", ns, "-f", "-",
        stdin=configmap("c", {"key": "b"}),
    )  # fmt: skip
    assert forced.stdout.strip() == "configmap/c serverside-applied"
    stored = get(k, "cm", "c", "-n", ns)
    assert stored["data"] == {"key": "b"}
    # `a` owned nothing else, so its entry is gone; `b` owns the key now.
    assert managers(stored) == {("b", "Apply"): {"f:data": {"f:key": {}}}}


def test_client_side_applied_fields_conflict_with_another_manager(k: Kubectl, ns: str) -> None:
    k("apply", "-n", ns, "-f", "-", stdin=configmap("csa", {"key": "a"}))
    refused = k(
        "apply", "--server-side", "--field-manager=other", "-n", ns, "-f", "-",
        stdin=configmap("csa", {"key": "b"}), check=False,
    )  # fmt: skip
    assert refused.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.key'
    )
    # kubectl's own manager upgrades from client-side apply without conflicts and keeps the annotation in step.
    k("apply", "--server-side", "-n", ns, "-f", "-", stdin=configmap("csa", {"key": "b"}))
    stored = get(k, "cm", "csa", "-n", ns)
    assert stored["data"] == {"key": "b"}
    last = json.loads(stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["data"] == {"key": "b"}
    assert managers(stored)[("kubectl", "Apply")] == {"f:data": {"f:key": {}}}


def test_fields_dropped_from_the_manifest_are_removed_unless_co_owned(k: Kubectl, ns: str) -> None:
    k("apply", "--server-side", "-n", ns, "-f", "-", stdin=configmap("drop", {"a": "1", "b": "2"}, x="1", y="2"))
    k("apply", "--server-side", "--field-manager=co", "-n", ns, "-f", "-", stdin=configmap("drop", {"b": "2"}))
    k("apply", "--server-side", "-n", ns, "-f", "-", stdin=configmap("drop", {"a": "1"}, x="1"))
    stored = get(k, "cm", "drop", "-n", ns)
    assert stored["metadata"]["labels"] == {"x": "1"}
    assert stored["data"] == {"a": "1", "b": "2"}, "b stays: the manager `co` applied it too"


def test_managed_fields_are_hidden_unless_asked_for(k: Kubectl, ns: str) -> None:
    k("apply", "--server-side", "-n", ns, "-f", "-", stdin=configmap("shown", {"key": "v"}))
    plain = yaml.safe_load(k("get", "cm", "shown", "-n", ns, "-o", "yaml").stdout)
    assert "managedFields" not in plain["metadata"]
    shown = yaml.safe_load(k("get", "cm", "shown", "-n", ns, "-o", "yaml", "--show-managed-fields").stdout)
    [entry] = shown["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl"
    assert entry["operation"] == "Apply"
    assert entry["apiVersion"] == "v1"
    assert entry["fieldsType"] == "FieldsV1"
    assert entry["fieldsV1"] == {"f:data": {"f:key": {}}}
    assert entry["time"].endswith("Z")


def test_updates_are_owned_by_their_field_managers(k: Kubectl, ns: str) -> None:
    k("create", "configmap", "upd", "-n", ns, "--from-literal=key=v")
    k("label", "cm", "upd", "-n", ns, "tier=web")
    k("patch", "cm", "upd", "-n", ns, "--type=merge", "-p", '{"data":{"other":"o"}}')
    owners = managers(get(k, "cm", "upd", "-n", ns))
    assert owners == {
        ("kubectl-create", "Update"): {"f:data": {".": {}, "f:key": {}}},
        ("kubectl-label", "Update"): {"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}},
        ("kubectl-patch", "Update"): {"f:data": {"f:other": {}}},
    }


def test_kubectl_diff_and_server_dry_run_write_nothing(k: Kubectl, ns: str) -> None:
    k("apply", "--server-side", "-n", ns, "-f", "-", stdin=configmap("diffed", {"key": "a"}))
    before = get(k, "cm", "diffed", "-n", ns)
    diff = k("diff", "--server-side", "-n", ns, "-f", "-", stdin=configmap("diffed", {"key": "z"}), check=False)
    assert diff.returncode == 1, diff.stderr
    assert "-  key: a" in diff.stdout and "+  key: z" in diff.stdout
    client_side = k("diff", "-n", ns, "-f", "-", stdin=configmap("diffed", {"key": "z"}), check=False)
    assert client_side.returncode == 1, client_side.stderr
    dry = k("apply", "--server-side", "--dry-run=server", "-n", ns, "-f", "-", stdin=configmap("diffed", {"key": "z"}))
    assert dry.stdout.strip() == "configmap/diffed serverside-applied (server dry run)"
    created = k("apply", "--server-side", "--dry-run=server", "-n", ns, "-f", "-", stdin=configmap("new", {"k": "v"}))
    assert created.stdout.strip() == "configmap/new serverside-applied (server dry run)"
    after = get(k, "cm", "diffed", "-n", ns)
    assert after == before
    assert k("get", "cm", "new", "-n", ns, check=False).returncode == 1


def test_keyed_lists_of_a_crd_are_owned_item_by_item(k: Kubectl, ns: str, tmp_path: Path) -> None:
    def vm(*zones: tuple[str, int]) -> str:
        manifest = vm_manifest("spread", ns)
        manifest["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
            {"topologyKey": zone, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": skew} for zone, skew in zones
        ]
        return yaml.safe_dump(manifest)

    k("apply", "--server-side", "--field-manager=a", "-f", "-", stdin=vm(("zone", 1)))
    # Another manager may add its own item to the list, but not change a's.
    k("apply", "--server-side", "--field-manager=b", "-f", "-", stdin=vm(("rack", 2)))
    refused = k(
        "apply", "--server-side", "--field-manager=b", "-f", "-", stdin=vm(("rack", 2), ("zone", 5)), check=False
    )
    assert refused.stderr.splitlines()[0] == (
        'error: Apply failed with 1 conflict: conflict with "a": '
        '.spec.template.spec.topologySpreadConstraints[topologyKey="zone",whenUnsatisfiable="DoNotSchedule"].maxSkew'
    )
    k("apply", "--server-side", "--field-manager=a", "-f", "-", stdin=vm())
    stored = get(k, "vm", "spread", "-n", ns)
    constraints = stored["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["maxSkew"]) for c in constraints] == [("rack", 2)]


def test_status_is_applied_through_its_subresource(k: Kubectl, ns: str) -> None:
    k("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(vm_manifest("st", ns)))
    status = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "st", "namespace": ns}}
    status["status"] = {"printableStatus": "Provisioning"}
    k(
        "apply",
        "--server-side",
        "--subresource=status",
        "--field-manager=reporter",
        "-f",
        "-",
        stdin=yaml.safe_dump(status),
    )
    stored = get(k, "vm", "st", "-n", ns)
    assert stored["status"] == {"printableStatus": "Provisioning"}
    [entry] = [e for e in stored["metadata"]["managedFields"] if e["manager"] == "reporter"]
    assert (entry["operation"], entry["subresource"]) == ("Apply", "status")
    assert entry["fieldsV1"] == {"f:status": {"f:printableStatus": {}}}
    assert ("kubectl", "Apply") in managers(stored)


async def test_apply_patches_need_a_field_manager(api: APIClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps/nomanager"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nomanager"}, "data": {"k": "v"}}
    reply = await api.patch(path, body, content_type=APPLY_PATCH)
    assert reply.status == 422
    assert reply.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
        "reason": "Invalid",
        "details": {
            "group": "meta.k8s.io",
            "kind": "PatchOptions",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: is required for apply patch",
                    "field": "fieldManager",
                }
            ],
        },
        "code": 422,
    }
    forced = await api.patch(path, {"data": {"k": "v"}}, force="true")
    assert forced.status == 422
    assert forced.message.endswith("force: Forbidden: may not be specified for non-apply patch")
    created = await api.patch(path, body, content_type=APPLY_PATCH, fieldManager="tool")
    assert created.status == 201, created.body
    assert created.body["metadata"]["managedFields"][0]["manager"] == "tool"


async def test_writes_without_a_field_manager_are_owned_by_the_user_agent(api: APIClient, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "agent"}, "data": {"k": "v"}}
    reply = await api.request("POST", path, body, headers={"User-Agent": "virt-controller/v1.5.0 (linux/amd64)"})
    assert reply.status == 201, reply.body
    [entry] = reply.body["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("virt-controller", "Update")
