"""VirtualMachineInstanceReplicaSets through kubectl and the API: admission, the scale subresource, the controller.

virt-controller and a simulated node against the session API server, as KubeVirt's replicaset functional tests
drive them: scale up and down, replace failed VMIs, adopt and release by labels, pause, delete.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from pykubevirt.api.constants import VMIRS_KIND
from pykubevirt.client.api import JSON_PATCH, Object
from pykubevirt.client.errors import Conflict
from pykubevirt.client.resources import EVENTS, VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, VIRTUAL_MACHINE_INSTANCES
from tests.integration.conftest import Kubectl, unique
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane
from tests.support.waiting import consistently, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


def replica_set(name: str, replicas: int | None = 2, **spec: Any) -> Object:
    body: Object = {
        "apiVersion": "kubevirt.io/v1",
        "kind": VMIRS_KIND,
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "domain": {
                        "memory": {"guest": "128Mi"},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}],
                },
            },
            **spec,
        },
    }
    if replicas is not None:
        body["spec"]["replicas"] = replicas
    return body


async def members(cp: ControlPlane, namespace: str, name: str, *, running: bool = True) -> list[Object]:
    """The set's VMIs that are not being deleted (Running ones only, unless `running` is False)."""
    listed = await cp.admin.list(VIRTUAL_MACHINE_INSTANCES, namespace, label_selector=f"app={name}")
    return [
        vmi
        for vmi in listed["items"]
        if not vmi["metadata"].get("deletionTimestamp")
        and (not running or (vmi.get("status") or {}).get("phase") == "Running")
    ]


async def wait_members(cp: ControlPlane, namespace: str, name: str, count: int) -> list[Object]:
    async def settled() -> list[Object] | None:
        found = await members(cp, namespace, name)
        everything = await members(cp, namespace, name, running=False)
        rs = await cp.admin.get(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, name, namespace)
        status = rs.get("status") or {}
        done = len(found) == len(everything) == count and status.get("replicas", 0) == count
        return found if done and status.get("readyReplicas", 0) == count else None

    return await eventually(settled, timeout=30)


async def event_messages(cp: ControlPlane, namespace: str, name: str) -> list[tuple[str, str]]:
    listed = await cp.admin.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in listed["items"]]


async def test_replicas_run_scale_with_kubectl_and_show_in_get(
    cp: ControlPlane, kubectl_cli: Kubectl, namespace: str
) -> None:
    kubectl_cli("create", "-n", namespace, "-f", "-", stdin=json.dumps(replica_set("web", 3)))
    vmis = await wait_members(cp, namespace, "web", 3)
    for vmi in vmis:
        # KubeVirt names them by generateName without a dash, owned by the set.
        assert vmi["metadata"]["name"].startswith("web") and len(vmi["metadata"]["name"]) == len("web") + 5
        owner = vmi["metadata"]["ownerReferences"][0]
        assert owner["kind"] == VMIRS_KIND and owner["name"] == "web" and owner["controller"] is True

    table = kubectl_cli("get", "vmirs", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert table[1].split()[:4] == ["web", "3", "3", "3"]

    kubectl_cli("scale", "vmirs", "web", "-n", namespace, "--replicas=1")
    await wait_members(cp, namespace, "web", 1)
    scale = kubectl_cli("get", "vmirs", "web", "-n", namespace, "--subresource=scale").stdout.splitlines()
    assert scale[0].split() == ["NAME", "DESIRED", "AVAILABLE"] and scale[1].split() == ["web", "1", "1"]
    scale_object = json.loads(
        kubectl_cli("get", "vmirs", "web", "-n", namespace, "--subresource=scale", "-o", "json").stdout
    )
    assert scale_object["kind"] == "Scale" and scale_object["apiVersion"] == "autoscaling/v1"
    assert scale_object["spec"] == {"replicas": 1}
    assert scale_object["status"] == {"replicas": 1, "selector": "app=web"}

    messages = await event_messages(cp, namespace, "web")
    created = [m for r, m in messages if r == "SuccessfulCreate"]
    deleted = [m for r, m in messages if r == "SuccessfulDelete"]
    assert len(created) == 3 and created[0].startswith("Started the virtual machine by creating the new virtual")
    assert len(deleted) == 2 and deleted[0].startswith("Stopped the virtual machine by deleting the virtual")

    kubectl_cli("scale", "vmirs", "web", "-n", namespace, "--replicas=2")
    await wait_members(cp, namespace, "web", 2)


async def test_a_failed_vmi_is_replaced(cp: ControlPlane, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, replica_set("crash", 2), namespace)
    first = await wait_members(cp, namespace, "crash", 2)
    victim = first[0]["metadata"]
    await cp.node.set_phase(f"{namespace}/{victim['name']}", "Failed")

    async def replaced() -> bool:
        names = {v["metadata"]["name"] for v in await members(cp, namespace, "crash")}
        return len(names) == 2 and victim["name"] not in names

    await eventually(replaced, timeout=30)
    assert ("SuccessfulDelete", f"Deleted finished virtual machine: {victim['uid']}") in await event_messages(
        cp, namespace, "crash"
    )


async def test_orphans_are_adopted_and_relabelled_vmis_released(cp: ControlPlane, namespace: str) -> None:
    orphan = replica_set("adopt")["spec"]["template"]
    await cp.admin.create(
        VIRTUAL_MACHINE_INSTANCES,
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "stray", **orphan["metadata"]},
            "spec": orphan["spec"],
        },
        namespace,
    )
    rs = await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, replica_set("adopt", 2), namespace)
    vmis = await wait_members(cp, namespace, "adopt", 2)
    stray = next(v for v in vmis if v["metadata"]["name"] == "stray")
    assert stray["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]

    await cp.admin.patch(VIRTUAL_MACHINE_INSTANCES, "stray", {"metadata": {"labels": {"app": "elsewhere"}}}, namespace)

    async def released() -> Object | None:
        vmi = await cp.vmi(namespace, "stray")
        return vmi if vmi is not None and not vmi["metadata"].get("ownerReferences") else None

    await eventually(released)
    replacements = await wait_members(cp, namespace, "adopt", 2)
    assert "stray" not in {v["metadata"]["name"] for v in replacements}


async def test_a_paused_set_leaves_its_vmis_alone(cp: ControlPlane, kubectl_cli: Kubectl, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, replica_set("hold", 1), namespace)
    await wait_members(cp, namespace, "hold", 1)
    kubectl_cli("patch", "vmirs", "hold", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":true}}')

    async def paused() -> Object | None:
        rs = await cp.admin.get(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, "hold", namespace)
        conditions = (rs.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "ReplicaPaused"), None)

    condition = await eventually(paused)
    assert condition["status"] == "True" and condition["reason"] == "Paused"
    assert condition["message"] == "Controller got paused"
    kubectl_cli("scale", "vmirs", "hold", "-n", namespace, "--replicas=3")
    # Unpaused, the simulated node has new VMIs within a fraction of this.

    async def still_one() -> bool:
        return len(await members(cp, namespace, "hold", running=False)) == 1

    await consistently(still_one, for_=1.5)

    kubectl_cli("patch", "vmirs", "hold", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":false}}')
    await wait_members(cp, namespace, "hold", 3)
    assert await paused() is None
    reasons = [r for r, _ in await event_messages(cp, namespace, "hold")]
    assert "SuccessfulPaused" in reasons and "SuccessfulResumed" in reasons


async def test_admission_and_schema_refusals_read_as_kubevirt_and_kube_write_them(
    kubectl_cli: Kubectl, namespace: str
) -> None:
    def refused(body: Object) -> str:
        result = kubectl_cli("create", "-n", namespace, "-f", "-", stdin=json.dumps(body), check=False)
        assert result.returncode == 1, result.stdout
        return result.stderr.strip()

    mismatched = replica_set("mismatch")
    mismatched["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    # As kubectl shows a KubeVirt webhook's refusal with causes.
    assert refused(mismatched) == "The request is invalid: spec.selector: selector does not match labels."

    bad_template = replica_set("nodisk")
    bad_template["spec"]["template"]["spec"]["volumes"] = []
    assert refused(bad_template) == (
        "The request is invalid: spec.template.spec.domain.devices.disks[0].name: "
        "spec.template.spec.domain.devices.disks[0].Name 'root' not found."
    )

    negative = replica_set("negative", -1)
    assert refused(negative) == (
        'The VirtualMachineInstanceReplicaSet "negative" is invalid: '
        ".spec.replicas: Invalid value: -1: should be a non-negative integer"
    )

    no_selector = replica_set("noselector")
    del no_selector["spec"]["selector"]
    assert refused(no_selector) == (
        'The VirtualMachineInstanceReplicaSet "noselector" is invalid: spec.selector: Required value'
    )


async def test_scale_subresource_over_the_api(cp: ControlPlane, namespace: str) -> None:
    name = unique("api")
    await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, replica_set(name, None), namespace)
    scale = await cp.admin.request("GET", VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS.path(namespace, name, "scale"))
    # Unset replicas read as 0 on the Scale (kube's scale of a custom resource); the controller runs 1.
    assert scale["spec"] == {} and scale["metadata"]["name"] == name
    await wait_members(cp, namespace, name, 1)

    stale = {**scale, "spec": {"replicas": 2}}
    with pytest.raises(Conflict):
        await cp.admin.request("PUT", VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS.path(namespace, name, "scale"), body=stale)

    patched = await cp.admin.patch(
        VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS,
        name,
        [{"op": "add", "path": "/spec/replicas", "value": 2}],
        namespace,
        patch_type=JSON_PATCH,
        subresource="scale",
    )
    assert patched["kind"] == "Scale" and patched["spec"] == {"replicas": 2}
    rs = await cp.admin.get(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, name, namespace)
    assert rs["spec"]["replicas"] == 2
    await wait_members(cp, namespace, name, 2)

    current = await cp.admin.request("GET", VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS.path(namespace, name, "scale"))
    current["spec"]["replicas"] = 0
    written = await cp.admin.request(
        "PUT", VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS.path(namespace, name, "scale"), body=current
    )
    assert written["spec"] == {}

    async def none_left() -> bool:
        return not await members(cp, namespace, name, running=False)

    await eventually(none_left, timeout=30)


async def test_deleting_the_set_deletes_its_vmis(cp: ControlPlane, kubectl_cli: Kubectl, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, replica_set("gone", 2), namespace)
    await wait_members(cp, namespace, "gone", 2)
    kubectl_cli("delete", "vmirs", "gone", "-n", namespace)

    async def cleared() -> bool:
        return not await members(cp, namespace, "gone", running=False)

    await eventually(cleared, timeout=30)
    dumped = yaml.safe_load(kubectl_cli("get", "vmirs", "-n", namespace, "-o", "yaml").stdout)
    assert dumped["items"] == []


async def test_virtctl_exposes_the_set_by_its_selector(
    cp: ControlPlane, apiserver: APIServerProcess, kubectl_cli: Kubectl, namespace: str, tmp_path: Path
) -> None:
    body = replica_set("front", 1)
    body["spec"]["template"]["spec"]["domain"]["devices"]["interfaces"] = [
        {"name": "default", "masquerade": {}, "ports": [{"port": 80}]}
    ]
    body["spec"]["template"]["spec"]["networks"] = [{"name": "default", "pod": {}}]
    rs = await cp.admin.create(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, body, namespace)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update({"KUBECONFIG": str(apiserver.kubeconfig), "HOME": str(tmp_path)})
    program = str(Path(sys.executable).parent / "virtctl")

    def virtctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([program, "-n", namespace, *args], env=env, capture_output=True, text=True, check=False)

    done = await asyncio.to_thread(virtctl, "expose", "vmirs", "front", "--name", "front-svc")
    assert (done.returncode, done.stdout) == (0, "Service front-svc successfully created for vmirs front\n")
    svc = json.loads(kubectl_cli("get", "svc", "front-svc", "-n", namespace, "-o", "json").stdout)
    assert svc["spec"]["selector"] == {"app": "front"}
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(80, 80)]
    assert svc["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]

    await cp.admin.create(
        VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS,
        replica_set("expr", 0, selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["expr"]}]}),
        namespace,
    )
    refused = await asyncio.to_thread(virtctl, "expose", "vmirs", "expr", "--name", "x", "--port", "80")
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        "cannot expose VirtualMachineInstanceReplicaSet without any selector labels",
    )
