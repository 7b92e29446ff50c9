"""PriorityClasses and pods' priorities as kube-apiserver serves them, through the real kubectl: the system classes,
a class's value given to the pods that name it, the one default class, and kube's refusals."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Kubectl
from tests.support.apiserver_process import APIServerProcess, kubectl

pytestmark = pytest.mark.kubectl


def priority_class(name: str, value: int, **fields: Any) -> str:
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
    return json.dumps({**body, **fields})


def pod(name: str, **spec: Any) -> str:
    body = {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})


def refused(k: Kubectl, *args: str, stdin: str | None = None) -> str:
    result = k(*args, stdin=stdin, check=False)
    assert result.returncode == 1, result.stdout
    return result.stderr


def priority_of(k: Kubectl, ns: str, name: str) -> tuple[Any, ...]:
    spec = json.loads(k("get", "pod", name, "-n", ns, "-o", "json").stdout)["spec"]
    return spec.get("priorityClassName"), spec.get("priority"), spec.get("preemptionPolicy")


def test_the_system_classes_are_there_and_stay(kubectl_cli: Kubectl) -> None:
    k = kubectl_cli
    lines = k("get", "priorityclasses", "--no-headers").stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines}
    assert rows["system-node-critical"][1:3] == ["2000001000", "false"]
    assert rows["system-cluster-critical"][1:3] == ["2000000000", "false"]
    assert rows["system-cluster-critical"][-1] == "PreemptLowerPriority"
    assert refused(k, "delete", "pc", "system-node-critical").strip() == (
        'Error from server (Forbidden): priorityclasses.scheduling.k8s.io "system-node-critical" is forbidden: '
        "this is a system priority class and cannot be deleted"
    )
    stderr = refused(k, "create", "-f", "-", stdin=priority_class("system-mine", 5))
    assert "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only" in (
        stderr
    )


def test_a_pod_gets_the_value_of_the_class_it_names(kubectl_cli: Kubectl, kubectl_namespace: str) -> None:
    k, ns = kubectl_cli, kubectl_namespace
    name = f"{ns}-high"
    k("create", "-f", "-", stdin=priority_class(name, 1000, preemptionPolicy="Never", description="for tests"))
    try:
        # No token volume: kube's ServiceAccount admission would add one the manifest then lacks on replace.
        manifest = pod("p", priorityClassName=name, automountServiceAccountToken=False)
        k("create", "-n", ns, "-f", "-", stdin=manifest)
        assert priority_of(k, ns, "p") == (name, 1000, "Never")
        # kubectl replace with the manifest as written: the priority the admission gave stays.
        k("replace", "-n", ns, "-f", "-", stdin=manifest)
        assert priority_of(k, ns, "p") == (name, 1000, "Never")
        k("create", "-n", ns, "-f", "-", stdin=pod("plain"))
        assert priority_of(k, ns, "plain") == (None, 0, "PreemptLowerPriority")

        assert refused(k, "create", "-n", ns, "-f", "-", stdin=pod("gold", priorityClassName="gold")).strip() == (
            'Error from server (Forbidden): error when creating "STDIN": pods "gold" is forbidden: '
            "no PriorityClass with name gold was found"
        )
        stderr = refused(k, "create", "-n", ns, "-f", "-", stdin=pod("said", priorityClassName=name, priority=7))
        assert (
            "the integer value of priority (7) must not be provided in pod spec; priority admission controller "
            "computed 1000 from the given PriorityClass name"
        ) in stderr
        stderr = refused(k, "patch", "pc", name, "--type=merge", "-p", '{"value": 2000}')
        assert (
            stderr.strip()
            == f'The PriorityClass "{name}" is invalid: value: Forbidden: may not be changed in an update.'
        )

        stderr = refused(k, "create", "-f", "-", stdin=priority_class(f"{ns}-huge", 1_000_000_001))
        assert "value: Forbidden: maximum allowed value of a user defined priority is 1000000000" in stderr
    finally:
        k("delete", "pc", name)


def test_pods_naming_no_class_get_the_one_default_class(fresh_apiserver: APIServerProcess, tmp_path: Path) -> None:
    # A server of its own: a default class would change every other test's pods.
    def k(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(fresh_apiserver, tmp_path / "home", *args, stdin=stdin, check=check)

    k("create", "-f", "-", stdin=priority_class("batch", -10, globalDefault=True))
    assert refused(k, "create", "-f", "-", stdin=priority_class("other", 5, globalDefault=True)).strip() == (
        'Error from server (Forbidden): error when creating "STDIN": priorityclasses.scheduling.k8s.io "other" is '
        "forbidden: PriorityClass batch is already marked as default. Only one default can exist"
    )
    k("create", "-f", "-", stdin=priority_class("other", 5))
    stderr = refused(k, "patch", "pc", "other", "--type=merge", "-p", '{"globalDefault": true}')
    assert "PriorityClass batch is already marked as default" in stderr
    k("create", "-f", "-", stdin=pod("p"))
    assert priority_of(k, "default", "p") == ("batch", -10, "PreemptLowerPriority")
    k("label", "pod", "p", "tier=batch")
    assert priority_of(k, "default", "p") == ("batch", -10, "PreemptLowerPriority")
