"""snapshot.kubevirt.io through the real kubectl and the embedded API server: KubeVirt's CRDs, columns, versions and
admission (VMSnapshotAdmitter, VMRestoreAdmitter)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.integration.conftest import Kubectl

pytestmark = pytest.mark.kubectl

# kubectl's text for a webhook's 422 whose Status names no object, as for KubeVirt's webhooks on a real cluster.
INVALID = "The request is invalid: "


def snapshot_yaml(name: str, api_group: str = "kubevirt.io", version: str = "v1beta1") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": f"snapshot.kubevirt.io/{version}",
            "kind": "VirtualMachineSnapshot",
            "metadata": {"name": name},
            "spec": {"source": {"apiGroup": api_group, "kind": "VirtualMachine", "name": "vm"}},
        }
    )


def restore_yaml(name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "snapshot.kubevirt.io/v1beta1",
            "kind": "VirtualMachineRestore",
            "metadata": {"name": name},
            "spec": {
                "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"},
                "virtualMachineSnapshotName": "snap",
            },
        }
    )


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_a_snapshot_is_applied_listed_with_kubevirts_columns_and_read_as_v1alpha1(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    ns = ("-n", kubectl_namespace)
    applied = kubectl_cli("apply", *ns, "-f", "-", stdin=snapshot_yaml("snap"))
    assert applied.stdout.strip() == "virtualmachinesnapshot.snapshot.kubevirt.io/snap created"

    header, row = kubectl_cli("get", "vmsnapshot", *ns).stdout.splitlines()
    # KubeVirt's CRD lists no Age column.
    assert cells(header) == ["NAME", "SOURCEKIND", "SOURCENAME", "PHASE", "READYTOUSE", "CREATIONTIME", "ERROR"]
    assert cells(row)[:3] == ["snap", "VirtualMachine", "vm"]

    alpha = json.loads(
        kubectl_cli("get", "virtualmachinesnapshots.v1alpha1.snapshot.kubevirt.io", "snap", *ns, "-o", "json").stdout
    )
    assert alpha["apiVersion"] == "snapshot.kubevirt.io/v1alpha1"
    assert alpha["spec"]["source"] == {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}
    # Written through v1alpha1 too, and listed with the other kinds of the `all` category.
    made = kubectl_cli("apply", *ns, "-f", "-", stdin=snapshot_yaml("snap-alpha", version="v1alpha1"))
    assert made.stdout.strip() == "virtualmachinesnapshot.snapshot.kubevirt.io/snap-alpha created"
    everything = kubectl_cli("get", "all", *ns, "-o", "name").stdout.split()
    assert "virtualmachinesnapshot.snapshot.kubevirt.io/snap" in everything

    for version in ("v1beta1", "v1alpha1"):
        bad = snapshot_yaml("bad", api_group="apps", version=version)
        refused = kubectl_cli("apply", *ns, "-f", "-", stdin=bad, check=False)
        assert refused.returncode != 0
        assert refused.stderr == INVALID + "spec.source.apiGroup: invalid apiGroup\n"

    patched = kubectl_cli(
        "patch", "vmsnapshot", "snap", *ns, "--type", "merge", "-p", '{"spec":{"deletionPolicy":"Retain"}}', check=False
    )
    assert patched.returncode != 0
    assert patched.stderr == INVALID + "spec: spec in immutable after creation\n"
    labelled = kubectl_cli("label", "vmsnapshot", "snap", *ns, "team=a")
    assert labelled.stdout.strip() == "virtualmachinesnapshot.snapshot.kubevirt.io/snap labeled"


def test_a_second_restore_of_a_vm_is_refused_while_the_first_is_in_progress(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    ns = ("-n", kubectl_namespace)
    first = kubectl_cli("create", *ns, "-f", "-", stdin=restore_yaml("first"))
    assert first.stdout.strip() == "virtualmachinerestore.snapshot.kubevirt.io/first created"
    second = kubectl_cli("create", *ns, "-f", "-", stdin=restore_yaml("second"), check=False)
    assert second.returncode != 0
    assert second.stderr == INVALID + 'spec.target: VirtualMachineRestore "first" in progress\n'

    header, row = kubectl_cli("get", "vmrestores", *ns).stdout.splitlines()
    assert cells(header) == ["NAME", "TARGETKIND", "TARGETNAME", "COMPLETE", "RESTORETIME"]
    assert cells(row) == ["first", "VirtualMachine", "vm"]
    got = json.loads(kubectl_cli("get", "vmrestore", "first", *ns, "-o", "json").stdout)
    # The CRD's default, as KubeVirt's kubebuilder marker sets it.
    assert got["spec"]["targetReadinessPolicy"] == "WaitGracePeriod"
