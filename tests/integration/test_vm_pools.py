"""VirtualMachinePools through kubectl and the API: admission, scale, a VM deleted by hand, template updates, deletion.

virt-controller and a simulated node against the session API server, as KubeVirt's pool functional tests drive them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.api.constants import VM_POOL_FINALIZER, VM_POOL_KIND, VM_POOL_REVISION_LABEL
from pykubevirt.client.api import Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import (
    CONTROLLER_REVISIONS,
    DATA_VOLUMES,
    EVENTS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINE_POOLS,
    VIRTUAL_MACHINES,
)
from tests.integration.conftest import Kubectl
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


def pool_manifest(name: str, replicas: int = 2, **spec: Any) -> Object:
    labels = {"kubevirt.io/vmpool": name}
    return {
        "apiVersion": "pool.kubevirt.io/v1beta1",
        "kind": VM_POOL_KIND,
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "virtualMachineTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    "runStrategy": "Always",
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "domain": {
                                "memory": {"guest": "128Mi"},
                                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                            },
                            "volumes": [
                                {"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}
                            ],
                        },
                    },
                },
            },
            **spec,
        },
    }


async def pool_vms(cp: ControlPlane, namespace: str, name: str) -> dict[str, Object]:
    listed = await cp.admin.list(VIRTUAL_MACHINES, namespace, label_selector=f"kubevirt.io/vmpool={name}")
    return {vm["metadata"]["name"]: vm for vm in listed["items"] if not vm["metadata"].get("deletionTimestamp")}


async def settled(cp: ControlPlane, namespace: str, name: str, names: set[str]) -> dict[str, Object]:
    """The pool's VMs once exactly `names` exist, each with a Running VMI, and the pool's status says so."""

    async def probe() -> dict[str, Object] | None:
        vms = await pool_vms(cp, namespace, name)
        every = await cp.admin.list(VIRTUAL_MACHINES, namespace, label_selector=f"kubevirt.io/vmpool={name}")
        if set(vms) != names or len(every["items"]) != len(names):
            return None
        for vm_name in names:
            vmi = await cp.vmi(namespace, vm_name)
            if vmi is None or (vmi.get("status") or {}).get("phase") != "Running":
                return None
        pool = await cp.admin.get(VIRTUAL_MACHINE_POOLS, name, namespace)
        status = pool.get("status") or {}
        ready = status.get("replicas", 0) == status.get("readyReplicas", 0) == len(names)
        return vms if ready else None

    return await eventually(probe, timeout=40)


async def reasons(cp: ControlPlane, namespace: str, name: str) -> list[tuple[str, str]]:
    listed = await cp.admin.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in listed["items"]]


async def test_a_pool_makes_numbered_vms_and_scales_with_kubectl(
    cp: ControlPlane, kubectl_cli: Kubectl, namespace: str
) -> None:
    body = pool_manifest(
        "web", 3, scaleInStrategy={"proactive": {"selectionPolicy": {"sortPolicy": "DescendingOrder"}}}
    )
    kubectl_cli("create", "-n", namespace, "-f", "-", stdin=json.dumps(body))
    vms = await settled(cp, namespace, "web", {"web-0", "web-1", "web-2"})
    pool = await cp.admin.get(VIRTUAL_MACHINE_POOLS, "web", namespace)
    assert VM_POOL_FINALIZER in pool["metadata"]["finalizers"]
    assert pool["status"]["labelSelector"] == "kubevirt.io/vmpool=web"
    for vm in vms.values():
        owner = vm["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (VM_POOL_KIND, pool["metadata"]["uid"], True)
        assert vm["metadata"]["finalizers"][0] == VM_POOL_FINALIZER
        assert vm["metadata"]["labels"][VM_POOL_REVISION_LABEL] == "web-1"
        assert vm["spec"]["template"]["metadata"]["labels"][VM_POOL_REVISION_LABEL] == "web-1"
    revision = await cp.admin.get(CONTROLLER_REVISIONS, "web-1", namespace)
    assert revision["data"]["replicas"] == 3 and revision["revision"] == 1

    table = kubectl_cli("get", "vmpool", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert table[1].split()[:4] == ["web", "3", "3", "3"]

    kubectl_cli("scale", "vmpool", "web", "-n", namespace, "--replicas=1")
    await settled(cp, namespace, "web", {"web-0"})
    kubectl_cli("scale", "vmpool", "web", "-n", namespace, "--replicas=2")
    await settled(cp, namespace, "web", {"web-0", "web-1"})
    messages = await reasons(cp, namespace, "web")
    assert ("SuccessfulCreate", f"Created VM {namespace}/web-2") in messages
    assert any(r == "SuccessfulDelete" and m.startswith(f"Deleted VM {namespace}/web-2 with uid") for r, m in messages)


async def test_a_vm_deleted_by_hand_is_made_again(cp: ControlPlane, kubectl_cli: Kubectl, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_POOLS, pool_manifest("heal", 2), namespace)
    before = await settled(cp, namespace, "heal", {"heal-0", "heal-1"})
    kubectl_cli("delete", "vm", "heal-1", "-n", namespace, "--wait=false")

    async def remade() -> bool:
        vms = await pool_vms(cp, namespace, "heal")
        return "heal-1" in vms and vms["heal-1"]["metadata"]["uid"] != before["heal-1"]["metadata"]["uid"]

    await eventually(remade, timeout=40)
    await settled(cp, namespace, "heal", {"heal-0", "heal-1"})


async def test_a_changed_template_updates_vms_and_restarts_their_vmis(cp: ControlPlane, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_POOLS, pool_manifest("roll", 2), namespace)
    await settled(cp, namespace, "roll", {"roll-0", "roll-1"})
    old_vmis = {name: (await cp.vmi(namespace, name) or {})["metadata"]["uid"] for name in ("roll-0", "roll-1")}
    patch = {"spec": {"virtualMachineTemplate": {"spec": {"template": {"metadata": {"labels": {"tier": "2"}}}}}}}
    await cp.admin.patch(VIRTUAL_MACHINE_POOLS, "roll", patch, namespace)

    async def rolled() -> bool:
        for name in ("roll-0", "roll-1"):
            vmi = await cp.vmi(namespace, name)
            if vmi is None or vmi["metadata"]["uid"] == old_vmis[name]:
                return False
            if (vmi.get("status") or {}).get("phase") != "Running":
                return False
            if (
                vmi["metadata"]["labels"].get("tier") != "2"
                or vmi["metadata"]["labels"][VM_POOL_REVISION_LABEL] != "roll-2"
            ):
                return False
        return True

    await eventually(rolled, timeout=40)
    vms = await pool_vms(cp, namespace, "roll")
    assert {vm["metadata"]["labels"][VM_POOL_REVISION_LABEL] for vm in vms.values()} == {"roll-2"}

    async def pruned() -> bool:
        listed = await cp.admin.list(CONTROLLER_REVISIONS, namespace)
        return {r["metadata"]["name"] for r in listed["items"] if r["metadata"]["name"].startswith("roll-")} == {
            "roll-2"
        }

    await eventually(pruned)
    assert ("SuccessfulUpdate", f"Updated VM {namespace}/roll-0") in await reasons(cp, namespace, "roll")


async def test_pausing_and_deleting_a_pool(cp: ControlPlane, kubectl_cli: Kubectl, namespace: str) -> None:
    await cp.admin.create(VIRTUAL_MACHINE_POOLS, pool_manifest("hold", 1), namespace)
    await settled(cp, namespace, "hold", {"hold-0"})
    kubectl_cli("patch", "vmpool", "hold", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":true}}')

    async def paused() -> Object | None:
        pool = await cp.admin.get(VIRTUAL_MACHINE_POOLS, "hold", namespace)
        return next((c for c in pool["status"].get("conditions") or [] if c["type"] == "ReplicaPaused"), None)

    condition = await eventually(paused)
    assert (condition["reason"], condition["message"]) == ("SuccessfulPaused", "Pool controller is paused")
    kubectl_cli("patch", "vmpool", "hold", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":false}}')
    await eventually(lambda: _not(paused))
    assert ("SuccessfulResume", "Pool is unpaused") in await reasons(cp, namespace, "hold")

    # In a thread: kubectl waits for the pool to go, which takes the controller running in this test's loop.
    await asyncio.to_thread(kubectl_cli, "delete", "vmpool", "hold", "-n", namespace)

    async def gone() -> bool:
        listed = await cp.admin.list(VIRTUAL_MACHINES, namespace, label_selector="kubevirt.io/vmpool=hold")
        vmis = await cp.admin.list(VIRTUAL_MACHINE_INSTANCES, namespace, label_selector="kubevirt.io/vmpool=hold")
        return not listed["items"] and not vmis["items"]

    await eventually(gone, timeout=40)


async def _not(probe: Any) -> bool:
    return await probe() is None


async def test_admission_refusals(kubectl_cli: Kubectl, namespace: str) -> None:
    def refused(body: Object, *verb: str) -> str:
        result = kubectl_cli(*(verb or ("create",)), "-n", namespace, "-f", "-", stdin=json.dumps(body), check=False)
        assert result.returncode == 1, result.stdout
        return result.stderr.strip()

    mismatch = pool_manifest("mismatch")
    mismatch["spec"]["selector"] = {"matchLabels": {"kubevirt.io/vmpool": "other"}}
    assert refused(mismatch) == "The request is invalid: spec.selector: selector does not match labels."

    percent = pool_manifest("percent", maxUnavailable="50")
    assert refused(percent) == "The request is invalid: spec.maxUnavailable: maxUnavailable percentage must end with %"

    both = pool_manifest("both", updateStrategy={"opportunistic": {}, "proactive": {}})
    assert refused(both) == (
        "The request is invalid: spec.updateStrategy: only one strategy can be configured at a time: "
        "but found opportunistic, proactive strategies"
    )

    no_strategy = pool_manifest("nostrategy")
    del no_strategy["spec"]["virtualMachineTemplate"]["spec"]["runStrategy"]
    assert refused(no_strategy) == (
        "The request is invalid: spec.virtualMachineTemplate.spec.running: RunStrategy must be specified"
    )

    kubectl_cli("create", "-n", namespace, "-f", "-", stdin=json.dumps(pool_manifest("fixed", 0)))
    moved = pool_manifest("fixed", 0)
    labels = {"kubevirt.io/vmpool": "fixed", "extra": "x"}
    moved["spec"]["selector"] = {"matchLabels": labels}
    moved["spec"]["virtualMachineTemplate"]["metadata"]["labels"] = labels
    assert refused(moved, "replace") == ("The request is invalid: spec.selector: selector is immutable after creation.")


async def test_autohealing_replaces_a_vm_that_keeps_failing_to_start(cp: ControlPlane, namespace: str) -> None:
    # The node leaves the first VMI Scheduled, and it fails there: a start failure (it never ran).
    cp.node.auto_run = False
    try:
        body = pool_manifest("mend", 1, autohealing={"startUpFailureThreshold": 1})
        await cp.admin.create(VIRTUAL_MACHINE_POOLS, body, namespace)
        await cp.wait_vmi_phase(namespace, "mend-0", "Scheduled")
        first = (await pool_vms(cp, namespace, "mend"))["mend-0"]
        await cp.node.set_phase(f"{namespace}/mend-0", "Failed")

        async def counted() -> bool:
            vm = await cp.vm(namespace, "mend-0") or {}
            return ((vm.get("status") or {}).get("startFailure") or {}).get("consecutiveFailCount") == 1

        await eventually(counted)
    finally:
        # The failed VMI's pod may finish now, so the VM the pool deletes can go.
        cp.node.auto_run = True
        cp.node.resync()

    async def replaced() -> bool:
        vm = (await pool_vms(cp, namespace, "mend")).get("mend-0")
        return vm is not None and vm["metadata"]["uid"] != first["metadata"]["uid"]

    await eventually(replaced, timeout=40)
    await settled(cp, namespace, "mend", {"mend-0"})
    deleted = [m for r, m in await reasons(cp, namespace, "mend") if r == "SuccessfulDelete"]
    assert deleted == [f"Deleted VM {namespace}/mend-0 with uid {first['metadata']['uid']} from pool"]


def pool_with_disk(name: str, preservation: str) -> Object:
    body = pool_manifest(
        name,
        2,
        scaleInStrategy={
            "proactive": {"statePreservation": preservation, "selectionPolicy": {"sortPolicy": "DescendingOrder"}}
        },
    )
    vm_spec = body["spec"]["virtualMachineTemplate"]["spec"]
    vm_spec["runStrategy"] = "Halted"
    vm_spec["dataVolumeTemplates"] = [
        {
            "metadata": {"name": f"{name}-disk"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "64Mi"}}}},
        }
    ]
    vm_spec["template"]["spec"]["volumes"] = [{"name": "root", "dataVolume": {"name": f"{name}-disk"}}]
    return body


async def test_state_preservation_keeps_a_removed_vms_disk_for_the_vm_made_again(
    cp: ControlPlane, namespace: str
) -> None:
    for name, preservation in (("keep", "Offline"), ("drop", "Disabled")):
        await cp.admin.create(VIRTUAL_MACHINE_POOLS, pool_with_disk(name, preservation), namespace)

    async def disks(name: str) -> dict[str, Object] | None:
        listed = await cp.admin.list(DATA_VOLUMES, namespace)
        found = {dv["metadata"]["name"]: dv for dv in listed["items"] if dv["metadata"]["name"].startswith(name)}
        vms = await pool_vms(cp, namespace, name)
        for index in (0, 1):
            dv = found.get(f"{name}-disk-{index}")
            vm = vms.get(f"{name}-{index}")
            owner = (dv or {}).get("metadata", {}).get("ownerReferences") or [{}]
            if vm is None or owner[0].get("uid") != vm["metadata"]["uid"]:
                return None
        return found

    kept = await eventually(lambda: disks("keep"), timeout=40)
    await eventually(lambda: disks("drop"), timeout=40)
    for name in ("keep", "drop"):
        await cp.admin.patch(VIRTUAL_MACHINE_POOLS, name, {"spec": {"replicas": 1}}, namespace)

    async def gone(name: str) -> bool:
        every = await cp.admin.list(VIRTUAL_MACHINES, namespace, label_selector=f"kubevirt.io/vmpool={name}")
        return [vm["metadata"]["name"] for vm in every["items"]] == [f"{name}-0"]

    async def dv_gone(name: str) -> bool:
        try:
            await cp.admin.get(DATA_VOLUMES, name, namespace)
        except NotFound:
            return True
        return False

    await eventually(lambda: gone("keep"), timeout=40)
    await eventually(lambda: gone("drop"), timeout=40)
    # Without preservation the garbage collector takes the removed VM's DataVolume with it...
    await eventually(lambda: dv_gone("drop-disk-1"), timeout=30)
    # ...with it, the DataVolume outlives the VM, owned by nobody.
    left = await cp.admin.get(DATA_VOLUMES, "keep-disk-1", namespace)
    assert left["metadata"]["uid"] == kept["keep-disk-1"]["metadata"]["uid"]
    assert not left["metadata"].get("ownerReferences")

    # Scaled out again, the VM of that index takes the same DataVolume back.
    await cp.admin.patch(VIRTUAL_MACHINE_POOLS, "keep", {"spec": {"replicas": 2}}, namespace)
    back = await eventually(lambda: disks("keep"), timeout=40)
    assert back["keep-disk-1"]["metadata"]["uid"] == kept["keep-disk-1"]["metadata"]["uid"]
    assert back["keep-disk-1"]["metadata"]["ownerReferences"][0]["controller"] is True
