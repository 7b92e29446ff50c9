"""The cluster's KubeVirt object configures KubeVirt, as in KubeVirt: admission and virt-controller follow it."""

from __future__ import annotations

import copy
from pathlib import Path

from pykubevirt.client.resources import KUBEVIRTS as KUBEVIRTS_REF
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINES
from tests.integration.conftest import VM_API, vm_manifest
from tests.integration.test_admission_webhooks import admission_review
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.control_plane import start_control_plane
from tests.support.control_plane import vm_manifest as control_plane_vm
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

KUBEVIRTS = f"{VM_API}/namespaces/kubevirt/kubevirts"
GATE_MESSAGE = "Reserved overhead memlock feature gate is not enabled in kubevirt-config"


def memlock_vm(name: str) -> dict:
    """A VM that only the Alpha gate ReservedOverheadMemlock admits."""
    vm = copy.deepcopy(vm_manifest(name))
    vm["spec"]["template"]["spec"]["domain"]["memory"]["reservedOverhead"] = {"memLock": "Required"}
    return vm


async def test_feature_gates_follow_the_kubevirt_object(fresh_apiserver: APIServerProcess, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert "No resources found" in kubectl(fresh_apiserver, home, "get", "kubevirt", "-n", "kubevirt").stderr
    async with APIClient(fresh_apiserver) as api:
        vms = f"{VM_API}/namespaces/default/virtualmachines"
        refused = await api.post(vms, memlock_vm("before"))
        assert refused.status == 422 and GATE_MESSAGE in refused.body["message"]

        kubevirt = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt"},
            "spec": {"configuration": {"developerConfiguration": {"featureGates": ["ReservedOverheadMemlock"]}}},
        }
        assert (await api.post(KUBEVIRTS, kubevirt)).status == 201
        assert (await api.post(vms, memlock_vm("after"))).status == 201
        # The webhook endpoints a real kube-apiserver calls read the same object.
        review = await api.post("/virtualmachines-validate", admission_review(memlock_vm("hook")))
        assert review.body["response"]["allowed"] is True

        # Taking the gate out of the object takes it away again; the command line enabled none.
        assert (await api.patch(f"{KUBEVIRTS}/kubevirt", {"spec": {"configuration": None}})).status == 200
        again = await api.post(vms, memlock_vm("again"))
        assert again.status == 422 and GATE_MESSAGE in again.body["message"]

    listed = kubectl(fresh_apiserver, home, "get", "kv", "-n", "kubevirt", "-o", "name").stdout
    assert listed.strip() == "kubevirt.kubevirt.io/kubevirt"


async def test_virt_controller_follows_the_kubevirt_object(fresh_apiserver: APIServerProcess) -> None:
    """disableSerialConsoleLog in the object drops the guest-console-log container from launcher pods made after."""
    plane = await start_control_plane(fresh_apiserver)
    try:
        ns = await plane.namespace()

        async def launcher_containers(name: str) -> list[str]:
            vmi = await plane.wait_vmi_phase(ns, name, "Running")
            selector = f"kubevirt.io/created-by={vmi['metadata']['uid']}"
            (pod,) = (await plane.admin.list(PODS, ns, label_selector=selector))["items"]
            return [c["name"] for c in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]]

        await plane.admin.create(VIRTUAL_MACHINES, control_plane_vm("logged"), ns)
        assert "guest-console-log" in await launcher_containers("logged")

        kubevirt = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "KubeVirt",
            "metadata": {"name": "kubevirt"},
            "spec": {"configuration": {"virtualMachineOptions": {"disableSerialConsoleLog": {}}}},
        }
        await plane.admin.create(KUBEVIRTS_REF, kubevirt, "kubevirt")

        async def applied() -> bool:
            return plane.controller.config.disable_serial_console_log

        await eventually(applied)
        await plane.admin.create(VIRTUAL_MACHINES, control_plane_vm("quiet"), ns)
        containers = await launcher_containers("quiet")
        assert "compute" in containers and "guest-console-log" not in containers
    finally:
        await plane.stop()
