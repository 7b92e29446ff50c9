"""The real /usr/bin/kubectl (v1.32.4) against the embedded API server: what users type must work unchanged."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import unique, vm_manifest, vmi_manifest
from tests.paths import SCENARIOS, SEEDS
from tests.support.apiserver_process import KUBECTL, APIServerProcess, kubectl, kubectl_env
from tests.support.waiting import consistently_sync, eventually_sync

pytestmark = pytest.mark.kubectl

STRATEGIC_415 = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def kubectl_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One HOME for the module: kubectl's discovery cache is filled once, as for a user."""
    return tmp_path_factory.mktemp("kubectl-home")


@pytest.fixture
def k(apiserver: APIServerProcess, kubectl_home: Path) -> Kubectl:
    def run(*args: str, stdin: str | None = None, check: bool = True, timeout: float = 60) -> Any:
        return kubectl(apiserver, kubectl_home, *args, stdin=stdin, check=check, timeout=timeout)

    return run


@pytest.fixture
def ns(k: Kubectl) -> str:
    name = unique("kc")
    assert k("create", "namespace", name).stdout.strip() == f"namespace/{name} created"
    return name


def rows(output: str) -> list[list[str]]:
    """A kubectl table as lists of cells (columns are separated by at least 2 spaces)."""
    import re

    return [re.split(r"\s{2,}", line.strip()) for line in output.splitlines() if line.strip()]


def header(output: str) -> list[str]:
    return output.splitlines()[0].split()


def to_yaml(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


def write(path: Path, obj: dict[str, Any]) -> str:
    path.write_text(to_yaml(obj))
    return str(path)


def get_json(k: Kubectl, *args: str) -> Any:
    return json.loads(k("get", *args, "-o", "json").stdout)


class Background:
    """A kubectl process whose output lines are read on a thread; stopped by its PID."""

    def __init__(self, server: APIServerProcess, home: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [KUBECTL, *args],
            env=kubectl_env(server, home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = 15) -> str:
        return self.lines.get(timeout=timeout)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=10)


# --------------------------------------------------------------------------------------------------------- apply


def test_apply_client_side_creates_then_patches(k: Kubectl, ns: str, tmp_path: Path) -> None:
    vm = vm_manifest("applied", ns, app="demo", tier="one")
    path = write(tmp_path / "vm.yaml", vm)
    assert k("apply", "-f", path).stdout.strip() == "virtualmachine.kubevirt.io/applied created"
    stored = get_json(k, "vm", "applied", "-n", ns)
    last = json.loads(stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last["spec"]["runStrategy"] == "Halted"
    # KubeVirt's defaults were applied on create.
    assert stored["spec"]["template"]["spec"]["domain"]["machine"]["type"]

    vm["spec"]["runStrategy"] = "Manual"
    vm["spec"]["template"]["spec"]["domain"]["cpu"] = {"cores": 2}
    del vm["metadata"]["labels"]["tier"]
    write(tmp_path / "vm.yaml", vm)
    assert k("apply", "-f", path).stdout.strip() == "virtualmachine.kubevirt.io/applied configured"
    changed = get_json(k, "vm", "applied", "-n", ns)
    assert changed["spec"]["runStrategy"] == "Manual"
    assert changed["spec"]["template"]["spec"]["domain"]["cpu"]["cores"] == 2
    # A label dropped from the file is removed (the merge patch sets it to null).
    assert changed["metadata"]["labels"] == {"app": "demo"}
    assert changed["metadata"]["generation"] == 2
    assert k("apply", "-f", path).stdout.strip() == "virtualmachine.kubevirt.io/applied unchanged"


def test_apply_server_side(k: Kubectl, ns: str, tmp_path: Path) -> None:
    vm = vm_manifest("ssa", ns)
    path = write(tmp_path / "vm.yaml", vm)
    assert k("apply", "--server-side", "-f", path).stdout.strip() == "virtualmachine.kubevirt.io/ssa serverside-applied"
    vm["spec"]["runStrategy"] = "Always"
    write(tmp_path / "vm.yaml", vm)
    assert k("apply", "--server-side", "-f", path).stdout.strip() == "virtualmachine.kubevirt.io/ssa serverside-applied"
    assert k("get", "vm", "ssa", "-n", ns, "-o", "jsonpath={.spec.runStrategy}").stdout == "Always"


# --------------------------------------------------------------------------------------------------------- get


@pytest.fixture
def three_vms(k: Kubectl, ns: str, tmp_path: Path) -> str:
    docs = []
    for name, rank, app in (("vm-b", "2", "web"), ("vm-c", "1", "db"), ("vm-a", "3", "web")):
        docs.append(to_yaml(vm_manifest(name, ns, app=app, rank=rank)))
    path = tmp_path / "vms.yaml"
    path.write_text("---\n".join(docs))
    k("apply", "-f", str(path))
    return ns


def test_get_table_and_wide(k: Kubectl, three_vms: str) -> None:
    out = k("get", "vm", "-n", three_vms).stdout
    assert header(out) == ["NAME", "AGE", "STATUS", "READY"]
    assert [r[0] for r in rows(out)[1:]] == ["vm-a", "vm-b", "vm-c"]
    wide = k("get", "vm", "-n", three_vms, "-o", "wide").stdout
    assert header(wide) == ["NAME", "AGE", "STATUS", "READY"]
    age = rows(out)[1][1]
    assert age[-1] in "smhd" and age[:-1].isdigit(), age


def test_get_yaml_json_jsonpath(k: Kubectl, three_vms: str) -> None:
    as_yaml = yaml.safe_load(k("get", "vm", "vm-a", "-n", three_vms, "-o", "yaml").stdout)
    assert (as_yaml["kind"], as_yaml["metadata"]["name"]) == ("VirtualMachine", "vm-a")
    as_json = get_json(k, "vm", "-n", three_vms)
    assert as_json["kind"] == "List"
    assert [i["metadata"]["name"] for i in as_json["items"]] == ["vm-a", "vm-b", "vm-c"]
    names = k("get", "vm", "-n", three_vms, "-o", "jsonpath={.items[*].metadata.name}").stdout
    assert names == "vm-a vm-b vm-c"
    ranks = k(
        "get",
        "vm",
        "-n",
        three_vms,
        "-o",
        'jsonpath={range .items[*]}{.metadata.name}={.metadata.labels.rank}{"\\n"}{end}',
    ).stdout
    assert ranks.splitlines() == ["vm-a=3", "vm-b=2", "vm-c=1"]


def test_get_all_namespaces_labels_and_sorting(k: Kubectl, three_vms: str) -> None:
    everywhere = k("get", "vm", "-A").stdout
    assert header(everywhere) == ["NAMESPACE", "NAME", "AGE", "STATUS", "READY"]
    mine = [r[1] for r in rows(everywhere)[1:] if r[0] == three_vms]
    assert mine == ["vm-a", "vm-b", "vm-c"]

    selected = k("get", "vm", "-n", three_vms, "-l", "app=web").stdout
    assert [r[0] for r in rows(selected)[1:]] == ["vm-a", "vm-b"]
    assert "vm-c" in k("get", "vm", "-n", three_vms, "-l", "app notin (web)").stdout

    labelled = k("get", "vm", "-n", three_vms, "--show-labels").stdout
    assert header(labelled)[-1] == "LABELS"
    assert {r[0]: r[-1] for r in rows(labelled)[1:]}["vm-c"] == "app=db,rank=1"

    by_rank = k("get", "vm", "-n", three_vms, "--sort-by=.metadata.labels.rank").stdout
    assert [r[0] for r in rows(by_rank)[1:]] == ["vm-c", "vm-b", "vm-a"]
    empty = k("get", "vm", "-n", three_vms, "-l", "app=none")
    assert empty.stdout == ""
    assert f"No resources found in {three_vms} namespace." in empty.stderr


def test_get_watch_sees_a_change(apiserver: APIServerProcess, kubectl_home: Path, k: Kubectl, ns: str) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("watched", ns)))
    watcher = Background(apiserver, kubectl_home, "get", "vm", "-n", ns, "-w", "--output-watch-events")
    try:
        assert watcher.next_line().split() == ["EVENT", "NAME", "AGE", "STATUS", "READY"]
        assert watcher.next_line().split()[:2] == ["ADDED", "watched"]
        k("patch", "vm", "watched", "-n", ns, "--type", "merge", "-p", '{"spec":{"runStrategy":"Manual"}}')
        assert watcher.next_line().split()[:2] == ["MODIFIED", "watched"]
        k("delete", "vm", "watched", "-n", ns)
        assert watcher.next_line().split()[:2] == ["DELETED", "watched"]
        assert watcher.process.poll() is None
    finally:
        watcher.stop()


# --------------------------------------------------------------------------------------------------------- describe


def test_describe_shows_events(k: Kubectl, ns: str) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("described", ns)))
    uid = k("get", "vm", "described", "-n", ns, "-o", "jsonpath={.metadata.uid}").stdout
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "described.1", "namespace": ns},
        "involvedObject": {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "name": "described",
            "namespace": ns,
            "uid": uid,
        },
        "reason": "SuccessfulCreate",
        "message": "Started the virtual machine by creating the new virtual machine instance described",
        "type": "Normal",
        "source": {"component": "virtualmachine-controller"},
        "count": 1,
        "firstTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    k("create", "-f", "-", stdin=to_yaml(event))
    described = k("describe", "vm", "described", "-n", ns).stdout
    assert "Name:         described" in described
    assert "Run Strategy:  Halted" in described
    events = described.split("Events:", 1)[1].strip().splitlines()
    assert events[0].split() == ["Type", "Reason", "Age", "From", "Message"]
    assert events[2].split()[:2] == ["Normal", "SuccessfulCreate"]
    assert "virtualmachine-controller" in events[2]
    assert events[2].endswith("Started the virtual machine by creating the new virtual machine instance described")


# --------------------------------------------------------------------------------------------------------- patch / edit


def test_patch_merge_json_and_strategic(k: Kubectl, ns: str) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("patched", ns)))
    out = k("patch", "vm", "patched", "-n", ns, "--type", "merge", "-p", '{"metadata":{"labels":{"p":"merge"}}}')
    assert out.stdout.strip() == "virtualmachine.kubevirt.io/patched patched"
    ops = json.dumps(
        [
            {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
            {"op": "replace", "path": "/spec/runStrategy", "value": "Manual"},
        ]
    )
    k("patch", "vm", "patched", "-n", ns, "--type", "json", "-p", ops)
    got = get_json(k, "vm", "patched", "-n", ns)
    assert got["spec"]["runStrategy"] == "Manual"
    assert got["metadata"]["labels"] == {"p": "merge"}
    rv = got["metadata"]["resourceVersion"]

    failing = k("patch", "vm", "patched", "-n", ns, "--type", "json", "-p", ops, check=False)
    assert failing.returncode == 1
    assert "testing value /spec/runStrategy failed" in failing.stderr
    strategic = k("patch", "vm", "patched", "-n", ns, "-p", '{"metadata":{"labels":{"p":"strategic"}}}', check=False)
    assert strategic.returncode == 1
    assert STRATEGIC_415 in strategic.stderr
    assert get_json(k, "vm", "patched", "-n", ns)["metadata"]["resourceVersion"] == rv


def test_edit_with_a_non_interactive_editor(
    apiserver: APIServerProcess, kubectl_home: Path, ns: str, k: Kubectl, tmp_path: Path
) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("edited", ns)))
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/runStrategy: Halted/runStrategy: Always/" "$1"\n')
    editor.chmod(0o755)
    env = dict(kubectl_env(apiserver, kubectl_home), EDITOR=str(editor), KUBE_EDITOR=str(editor))
    result = subprocess.run(
        [KUBECTL, "edit", "vm", "edited", "-n", ns], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "virtualmachine.kubevirt.io/edited edited"
    assert k("get", "vm", "edited", "-n", ns, "-o", "jsonpath={.spec.runStrategy}").stdout == "Always"


# ------------------------------------------------------------------------------------------------------ delete / wait


def _with_finalizer(k: Kubectl, ns: str, name: str) -> None:
    vm = vm_manifest(name, ns)
    vm["metadata"]["finalizers"] = ["example.com/hold"]
    k("create", "-f", "-", stdin=to_yaml(vm))


def test_delete_with_a_finalizer(k: Kubectl, ns: str) -> None:
    _with_finalizer(k, ns, "held")
    out = k("delete", "vm", "held", "-n", ns, "--wait=false")
    assert out.stdout.strip() == 'virtualmachine.kubevirt.io "held" deleted'
    held = get_json(k, "vm", "held", "-n", ns)
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["finalizers"] == ["example.com/hold"]
    k("patch", "vm", "held", "-n", ns, "--type", "json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
    missing = k("get", "vm", "held", "-n", ns, check=False)
    assert missing.returncode == 1
    assert 'virtualmachines.kubevirt.io "held" not found' in missing.stderr


def test_wait_for_delete_while_another_process_removes_the_finalizer(
    apiserver: APIServerProcess, kubectl_home: Path, k: Kubectl, ns: str
) -> None:
    _with_finalizer(k, ns, "awaited")
    k("delete", "vm", "awaited", "-n", ns, "--wait=false")
    waiter = Background(apiserver, kubectl_home, "wait", "--for=delete", "vm/awaited", "-n", ns, "--timeout=30s")
    try:
        # Time for kubectl to start and find the object still there (a busy machine starts it slowly).
        consistently_sync(lambda: waiter.process.poll() is None, for_=2.0)
        k("patch", "vm", "awaited", "-n", ns, "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
        assert waiter.next_line() == "virtualmachine.kubevirt.io/awaited condition met"
        assert waiter.process.wait(timeout=10) == 0
    finally:
        waiter.stop()


def test_wait_for_jsonpath(apiserver: APIServerProcess, kubectl_home: Path, k: Kubectl, ns: str) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("awaited", ns)))
    waiter = Background(
        apiserver,
        kubectl_home,
        "wait",
        "--for=jsonpath={.spec.runStrategy}=Always",
        "vm/awaited",
        "-n",
        ns,
        "--timeout=30s",
    )
    try:
        consistently_sync(lambda: waiter.process.poll() is None, for_=0.5)
        k("patch", "vm", "awaited", "-n", ns, "--type", "merge", "-p", '{"spec":{"runStrategy":"Always"}}')
        assert waiter.next_line() == "virtualmachine.kubevirt.io/awaited condition met"
        assert waiter.process.wait(timeout=10) == 0
    finally:
        waiter.stop()


# --------------------------------------------------------------------------------------------------------- discovery


def test_version(k: Kubectl) -> None:
    result = k("version", "-o", "json")
    assert json.loads(result.stdout)["serverVersion"]["minor"] == "32"
    assert "WARNING" not in result.stderr


def test_explain(k: Kubectl) -> None:
    out = k("explain", "vm.spec.runStrategy").stdout
    assert "KIND:       VirtualMachine" in out
    assert "VERSION:    v1" in out
    assert "FIELD: runStrategy <string>" in out
    assert "Halted" in out
    assert "Mutually exclusive with running" in out
    # Fields of the shared meta/v1 types resolve too.
    assert "uid" in k("explain", "vm.metadata.ownerReferences").stdout


def test_explain_built_in_kinds_from_kubes_schemas(k: Kubectl) -> None:
    image = k("explain", "pods.spec.containers.image").stdout
    assert "KIND:       Pod" in image
    assert "FIELD: image <string>" in image
    assert "Container image name." in image
    ports = k("explain", "pods.spec.containers.ports.containerPort").stdout
    assert "FIELD: containerPort <integer>" in ports
    assert "FIELD: data <map[string]string>" in k("explain", "configmaps.data").stdout


def test_api_resources_and_short_names(k: Kubectl, ns: str) -> None:
    out = k("api-resources", "--api-group=kubevirt.io").stdout
    table = {r[0]: r for r in rows(out)[1:]}
    assert table["virtualmachines"] == ["virtualmachines", "vm,vms", "kubevirt.io/v1", "true", "VirtualMachine"]
    assert table["virtualmachineinstances"][1] == "vmi,vmis"
    assert "virtualmachines/status" not in out
    listed = k("api-resources")
    assert listed.stderr == "", "no 'short name could also match' warnings"
    assert {"pods", "namespaces", "events", "customresourcedefinitions"} <= {r[0] for r in rows(listed.stdout)[1:]}
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("short", ns)))
    k("create", "-f", "-", stdin=to_yaml(vmi_manifest("short", ns)))
    for kind in ("vm", "vms", "virtualmachine", "vmi", "vmis", "virtualmachineinstances"):
        out = k("get", kind, "-n", ns).stdout
        assert [r[0] for r in rows(out)[1:]] == ["short"], kind
    assert k("get", "vm", "-n", ns, check=False).stderr == ""


def test_vmi_printer_columns(k: Kubectl, ns: str) -> None:
    k("create", "-f", "-", stdin=to_yaml(vmi_manifest("printed", ns)))
    out = k("get", "vmi", "-n", ns).stdout
    assert header(out) == ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"]
    assert rows(out)[1][0] == "printed"
    assert rows(out)[1][2] == "Pending"
    wide = k("get", "vmi", "-n", ns, "-o", "wide").stdout
    assert header(wide) == ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"]


def test_get_all_lists_vms(k: Kubectl, ns: str) -> None:
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("in-all", ns)))
    out = k("get", "all", "-n", ns).stdout
    assert "virtualmachine.kubevirt.io/in-all" in out


# --------------------------------------------------------------------------------------------------------- rejections


def _expected_rejection(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    return first.split("expect: reject: ", 1)[1].strip()


def test_create_of_an_invalid_vm_shows_kubevirt_admission_message(k: Kubectl, ns: str) -> None:
    scenario = SCENARIOS / "018-cpu-dedicated-realtime.yaml"
    result = k("create", "-n", ns, "-f", str(scenario), check=False)
    assert result.returncode == 1
    message = _expected_rejection(scenario)
    assert result.stderr.strip() == (
        f"The request is invalid: spec.template.spec.domain.cpu.numa.guestMappingPassthrough: {message}"
    )
    assert k("get", "vm", "-n", ns).stdout == ""


def test_unknown_field_rejected_by_strict_validation(k: Kubectl, ns: str) -> None:
    scenario = SCENARIOS / "087-masq-ports-http-https.yaml"
    result = k("create", "-n", ns, "-f", str(scenario), check=False)
    assert result.returncode == 1
    assert _expected_rejection(scenario) in result.stderr
    assert "strict decoding error" in result.stderr
    applied = k("apply", "-n", ns, "-f", str(scenario), check=False)
    assert applied.returncode == 1
    assert _expected_rejection(scenario) in applied.stderr
    assert k("get", "vm", "-n", ns).stdout == ""
    # --validate=warn: kubectl shows the server's warning, the field is pruned and the VM stored.
    warned = k("create", "-n", ns, "-f", str(scenario), "--validate=warn")
    assert f"Warning: {_expected_rejection(scenario)}" in warned.stderr
    stored = get_json(k, "vm", "masq-ports-http-https", "-n", ns)
    assert stored["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"][0]["masquerade"] == {}
    k("delete", "vm", "masq-ports-http-https", "-n", ns)
    # --validate=false: pruned silently.
    quiet = k("create", "-n", ns, "-f", str(scenario), "--validate=false")
    assert quiet.stderr == ""
    assert get_json(k, "vm", "masq-ports-http-https", "-n", ns)["metadata"]["name"] == "masq-ports-http-https"


def test_admission_warnings_are_shown(k: Kubectl, ns: str) -> None:
    vm = vm_manifest("legacy", ns)
    del vm["spec"]["runStrategy"]
    vm["spec"]["running"] = False
    result = k("apply", "-f", "-", stdin=to_yaml(vm))
    assert result.stdout.strip() == "virtualmachine.kubevirt.io/legacy created"
    assert "Warning: spec.running is deprecated, please use spec.runStrategy instead." in result.stderr


def test_seed_vm_applies(k: Kubectl, ns: str) -> None:
    result = k("apply", "-n", ns, "-f", str(SEEDS / "000-vm-my-vm.yaml"), check=False)
    # The seed names namespace default; kubectl refuses the mismatch before sending anything.
    assert result.returncode == 1
    assert "does not match the namespace" in result.stderr
    k("apply", "-f", str(SEEDS / "000-vm-my-vm.yaml"))
    assert k("get", "vm", "my-vm", "-o", "jsonpath={.spec.runStrategy}").stdout == "Always"
    k("delete", "vm", "my-vm")


def test_create_generators_and_drain(k: Kubectl, ns: str) -> None:
    """`kubectl create secret|serviceaccount|configmap` and `drain` use typed clients that send protobuf."""
    k("create", "secret", "generic", "creds", "-n", ns, "--from-literal=password=s3cret")
    secret = get_json(k, "secret", "creds", "-n", ns)
    assert secret["type"] == "Opaque"
    assert secret["data"] == {"password": "czNjcmV0"}
    k("create", "serviceaccount", "robot", "-n", ns)
    # Next to the namespace's own account, which kube's serviceaccounts-controller made with it.
    assert [r[0] for r in rows(k("get", "sa", "-n", ns).stdout)[1:]] == ["default", "robot"]
    k("create", "configmap", "cfg", "-n", ns, "--from-literal=a=1", "--from-literal=b=2")
    assert get_json(k, "cm", "cfg", "-n", ns)["data"] == {"a": "1", "b": "2"}

    node = unique("node")
    k("apply", "-f", "-", stdin=to_yaml({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-node", "namespace": ns},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.example/c"}]},
    }
    k("apply", "-f", "-", stdin=to_yaml(pod))
    assert k("cordon", node).stdout.strip() == f"node/{node} cordoned"
    assert get_json(k, "node", node)["spec"]["unschedulable"] is True
    drained = k("drain", node, "--force", "--grace-period=0", "--timeout=20s")
    assert "pod/on-node evicted" in drained.stdout
    assert drained.stdout.strip().endswith(f"node/{node} drained")
    assert k("get", "pods", "-n", ns, "-o", "name").stdout == ""
    k("delete", "node", node)


def test_create_generators_for_services_budgets_and_priority_classes(k: Kubectl, ns: str) -> None:
    """`kubectl create service|pdb|priorityclass` send protobuf too, with int-or-string fields."""
    k("create", "service", "clusterip", "web", "-n", ns, "--tcp=80:8080")
    assert get_json(k, "svc", "web", "-n", ns)["spec"]["ports"] == [
        {"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}
    ]
    k("create", "service", "nodeport", "tls", "-n", ns, "--tcp=8443:https")
    (port,) = get_json(k, "svc", "tls", "-n", ns)["spec"]["ports"]
    assert (port["targetPort"], 30000 <= port["nodePort"] <= 32767) == ("https", True)
    k("create", "pdb", "none-down", "-n", ns, "--selector=app=web", "--min-available=0")
    k("create", "pdb", "half", "-n", ns, "--selector=app=web", "--max-unavailable=50%")
    assert get_json(k, "pdb", "none-down", "-n", ns)["spec"] == {
        "minAvailable": 0,
        "selector": {"matchLabels": {"app": "web"}},
    }
    assert get_json(k, "pdb", "half", "-n", ns)["spec"]["maxUnavailable"] == "50%"
    name = f"{ns}-gold"
    k("create", "priorityclass", name, "--value=5000", "--description=gold", "--preemption-policy=Never")
    try:
        pc = get_json(k, "pc", name)
        assert (pc["value"], pc["description"], pc["preemptionPolicy"]) == (5000, "gold", "Never")
    finally:
        k("delete", "pc", name)


def test_kubectl_debug_says_ephemeral_containers_are_not_served(k: Kubectl, ns: str) -> None:
    # kubectl tells a missing subresource from a missing pod by the 404's empty details; without them it crashed.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }
    k("create", "-n", ns, "-f", "-", stdin=json.dumps(pod))
    result = k("debug", "p", "-n", ns, "--image=busybox:1.36", "--profile=general", "--", "true", check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        'error: ephemeral containers are disabled for this cluster (error from server: "the server could not find '
        'the requested resource")'
    ), result.stderr


# --------------------------------------------------------------------------------------------------------- namespaces


def test_namespace_create_and_delete_empties_it(k: Kubectl, tmp_path: Path) -> None:
    name = unique("gone")
    assert k("create", "ns", name).stdout.strip() == f"namespace/{name} created"
    assert k("get", "ns", name, "-o", "jsonpath={.status.phase}").stdout == "Active"
    k("create", "configmap", "settings", "-n", name, "--from-literal=a=b")
    assert k("get", "configmap", "settings", "-n", name, "-o", "jsonpath={.data.a}").stdout == "b"
    k("apply", "-f", "-", stdin=to_yaml(vm_manifest("doomed", name)))
    vm_with_finalizer = vm_manifest("lingering", name)
    vm_with_finalizer["metadata"]["finalizers"] = ["example.com/hold"]
    k("create", "-f", "-", stdin=to_yaml(vm_with_finalizer))

    deleting = k("delete", "ns", name, "--wait=false")
    assert deleting.stdout.strip() == f'namespace "{name}" deleted'
    # Terminating: no new content, the VM with a finalizer holds the namespace.
    assert k("get", "ns", name, "-o", "jsonpath={.status.phase}").stdout == "Terminating"
    refused = k("create", "configmap", "late", "-n", name, "--from-literal=a=b", check=False)
    assert refused.returncode == 1
    assert "because it is being terminated" in refused.stderr
    eventually_sync(
        lambda: k("get", "cm,vm", "-n", name, "-o", "name").stdout.strip() == "virtualmachine.kubevirt.io/lingering",
        timeout=10,
        interval=0.1,
    )
    k("patch", "vm", "lingering", "-n", name, "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
    assert k("wait", "--for=delete", f"ns/{name}", "--timeout=30s").returncode == 0
    missing = k("get", "ns", name, check=False)
    assert missing.returncode == 1
    assert f'namespaces "{name}" not found' in missing.stderr
    assert k("get", "cm,vm", "-n", name, "-o", "name").stdout == ""
