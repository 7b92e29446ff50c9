"""The objectgraph subresource of VMs and VMIs through virt-api and `virtctl objectgraph`, behind KubeVirt's
ObjectGraph feature gate, with virt-controller and a simulated node running the VM."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from pykubevirt.client.resources import KUBEVIRTS, VIRTUAL_MACHINES
from tests.integration.test_subresources import virtctl
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import start_control_plane, vm_manifest
from tests.support.http_client import APIClient
from tests.support.waiting import eventually

SUB = "/apis/subresources.kubevirt.io/v1"


def references(node: dict) -> list[tuple[str, str]]:
    """(kind, name) of the node and everything under it, depth first."""
    found = [(node["objectReference"]["kind"], node["objectReference"]["name"])]
    for child in node.get("children") or []:
        found += references(child)
    return found


async def test_a_vms_object_graph_behind_its_feature_gate(fresh_apiserver: APIServerProcess, tmp_path: Path) -> None:
    cp = await start_control_plane(fresh_apiserver)
    try:
        ns = await cp.namespace()
        vm = vm_manifest("graphed")
        spec = vm["spec"]["template"]["spec"]
        spec["domain"]["devices"]["disks"].append({"name": "config", "disk": {"bus": "virtio"}})
        spec["volumes"].append({"name": "config", "configMap": {"name": "settings"}})
        spec["networks"] = [{"name": "default", "pod": {}}, {"name": "blue", "multus": {"networkName": "infra/blue"}}]
        spec["domain"]["devices"]["interfaces"] = [
            {"name": "default", "masquerade": {}},
            {"name": "blue", "bridge": {}},
        ]
        await cp.admin.create(VIRTUAL_MACHINES, vm, ns)
        await cp.wait_printable(ns, "graphed", "Running")
        path = f"{SUB}/namespaces/{ns}/virtualmachines/graphed/objectgraph"
        async with APIClient(fresh_apiserver) as http:
            refused = await http.get(path)
            assert refused.status == 400
            assert refused.message == "ObjectGraph feature gate not enabled: Unable to return object graph."
            gate = {"configuration": {"developerConfiguration": {"featureGates": ["ObjectGraph"]}}}
            kubevirt = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"}}
            await cp.admin.create(KUBEVIRTS, {**kubevirt, "spec": gate}, "kubevirt")

            async def graph() -> dict | None:
                reply = await http.get(path)
                return reply.body if reply.status == 200 else None

            root = await eventually(graph, timeout=20)
        assert root["objectReference"] == {
            "apiGroup": "kubevirt.io",
            "kind": "VirtualMachine",
            "name": "graphed",
            "namespace": ns,
        }
        kinds = references(root)
        assert kinds[:2] == [("VirtualMachine", "graphed"), ("VirtualMachineInstance", "graphed")]
        assert kinds[2][0] == "Pod" and kinds[2][1].startswith("virt-launcher-graphed-")
        assert kinds[3:] == [("ConfigMap", "settings"), ("NetworkAttachmentDefinition", "blue")]
        vmi_node = root["children"][0]
        assert vmi_node["labels"] == {"kubevirt.io/dependency-type": "compute"}
        network = root["children"][-1]
        assert network["optional"] is True and network["objectReference"]["namespace"] == "infra"

        # virtctl: the same graph; without optional nodes; only what a label selector matches; YAML.
        run = lambda *args: virtctl(fresh_apiserver, tmp_path, "-n", ns, "objectgraph", *args)  # noqa: E731
        code, out, err = await run("graphed")
        assert (code, err) == (0, "") and json.loads(out) == root
        code, out, _ = await run("graphed", "--exclude-optional")
        assert ("NetworkAttachmentDefinition", "blue") not in references(json.loads(out))
        code, out, _ = await run("graphed", "--selector", "kubevirt.io/dependency-type=config", "-o", "yaml")
        assert references(yaml.safe_load(out)) == [("VirtualMachine", "graphed"), ("ConfigMap", "settings")]
        code, out, _ = await run("graphed", "--vmi")
        assert references(json.loads(out))[0] == ("VirtualMachineInstance", "graphed")
        code, _, err = await run("missing")
        assert code == 1
        missing = 'virtualmachine.kubevirt.io "missing" not found'
        assert err == f"error listing object graph of VirtualMachine missing: {missing}\n"
    finally:
        await cp.stop()
