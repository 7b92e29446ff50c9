"""clone.kubevirt.io through virtctl, the real kubectl and the embedded API server: `virtctl create clone` applied,
KubeVirt's columns, the create mutator's target name and the admitter's refusal."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Kubectl

pytestmark = pytest.mark.kubectl

VIRTCTL = str(Path(sys.executable).parent / "virtctl")
# kubectl's text for a webhook's 422 whose Status names no object, as for KubeVirt's webhooks on a real cluster.
INVALID = "The request is invalid: "


def virtctl_create_clone(*args: str) -> str:
    done = subprocess.run([VIRTCTL, "create", "clone", *args], capture_output=True, text=True, check=True, timeout=60)
    assert done.stderr == ""
    return done.stdout


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_virtctl_create_clone_is_applied_listed_and_its_target_named(
    kubectl_cli: Kubectl, kubectl_namespace: str
) -> None:
    ns = ("-n", kubectl_namespace)
    manifest = virtctl_create_clone("--name", "c1", "--source-name", "vm1", "--target-name", "vm2", *ns)
    applied = kubectl_cli("apply", "-f", "-", stdin=manifest)
    assert applied.stdout.strip() == "virtualmachineclone.clone.kubevirt.io/c1 created"

    # No target name: the create mutator names it clone-<source>-<5 random characters>.
    unnamed = virtctl_create_clone("--name", "c2", "--source-name", "snap", "--source-type", "snapshot")
    kubectl_cli("apply", *ns, "-f", "-", stdin=unnamed)
    got = json.loads(kubectl_cli("get", "vmclone", "c2", *ns, "-o", "json").stdout)
    target = got["spec"]["target"]
    assert (target["apiGroup"], target["kind"]) == ("kubevirt.io", "VirtualMachine")
    assert re.fullmatch("clone-snap-[bcdfghjklmnpqrstvwxz2456789]{5}", target["name"])
    assert got["spec"]["source"] == {
        "apiGroup": "snapshot.kubevirt.io",
        "kind": "VirtualMachineSnapshot",
        "name": "snap",
    }

    lines = kubectl_cli("get", "vmclones", *ns).stdout.splitlines()
    # KubeVirt's CRD lists no Age column.
    assert cells(lines[0]) == ["NAME", "PHASE", "SOURCEVIRTUALMACHINE", "TARGETVIRTUALMACHINE"]
    rows = {cells(line)[0]: cells(line)[1:] for line in lines[1:]}
    assert rows["c1"][-2:] == ["vm1", "vm2"]
    assert rows["c2"][-2:] == ["snap", target["name"]]
    alpha = json.loads(
        kubectl_cli("get", "virtualmachineclones.v1alpha1.clone.kubevirt.io", "c1", *ns, "-o", "json").stdout
    )
    assert alpha["apiVersion"] == "clone.kubevirt.io/v1alpha1"
    assert "virtualmachineclone.clone.kubevirt.io/c1" in kubectl_cli("get", "all", *ns, "-o", "name").stdout.split()


def test_an_invalid_clone_is_refused_with_kubevirts_messages(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    ns = ("-n", kubectl_namespace)
    same = virtctl_create_clone("--name", "same", "--source-name", "vm1", "--target-name", "vm1")
    refused = kubectl_cli("apply", *ns, "-f", "-", stdin=same, check=False)
    assert refused.returncode != 0
    assert refused.stderr == (
        INVALID + "spec.target.name: Target name cannot be equal to source name when both are VirtualMachines\n"
    )

    filtered = virtctl_create_clone("--name", "f", "--source-name", "vm1", "--label-filter", "*key")
    refused = kubectl_cli("apply", *ns, "-f", "-", stdin=filtered, check=False)
    assert refused.returncode != 0
    assert refused.stderr == (
        INVALID + "spec.labels: spec.labels filter *key is invalid: cannot contain a wildcard character (*); "
        "FilterRules: WildcardChar can be only at the end of the filter\n"
    )

    # The CRD's enum is checked before any webhook.
    bad_policy = virtctl_create_clone("--name", "p", "--source-name", "vm1").replace(
        "spec:\n", "spec:\n  volumeNamePolicy: Sometimes\n"
    )
    refused = kubectl_cli("apply", *ns, "-f", "-", stdin=bad_policy, check=False)
    assert refused.returncode != 0
    assert 'spec.volumeNamePolicy: Unsupported value: "Sometimes"' in refused.stderr
