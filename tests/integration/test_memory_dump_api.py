"""A VM's memorydump and removememorydump through virt-api on the embedded API server: the request lands in the VM's
status.memoryDumpRequest, checked against the VMI and the claim as KubeVirt's virt-api checks them.

No controller runs here: the VM and its VMI are written directly, the VMI's Running phase in its status."""

from __future__ import annotations

from typing import Any

from pykubevirt.virtapi.identities import CONTROLLER_USER
from tests.integration.conftest import VM_API, vm_manifest, vmi_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient, Reply
from tests.support.waiting import eventually

SUB = "/apis/subresources.kubevirt.io/v1"
JSON_PATCH = "application/json-patch+json"


def conflict(resource: str, name: str, why: str) -> str:
    return f'Operation cannot be fulfilled on {resource}.kubevirt.io "{name}": {why}'


def assert_status(reply: Reply, code: int, message: str) -> None:
    assert reply.status == code, reply.body
    assert reply.body["kind"] == "Status" and reply.message == message


def claim(name: str, storage: str, **spec: Any) -> dict[str, Any]:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}, **spec}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


async def vm_with_vmi(apiserver: APIServerProcess, api: APIClient, ns: str, name: str, phase: str = "Running") -> None:
    """A VM and its VMI of 128Mi, in `phase`."""
    reply = await api.post(f"{VM_API}/namespaces/{ns}/virtualmachines", vm_manifest(name))
    assert reply.status == 201, reply.body
    # virt-controller gives every VM a status; upstream's patch tests a member of it, so it must be there.
    reply = await api.patch(f"{VM_API}/namespaces/{ns}/virtualmachines/{name}/status", {"status": {"ready": False}})
    assert reply.status == 200, reply.body
    vmi = vmi_manifest(name)
    vmi["spec"]["domain"]["resources"] = {"requests": {"memory": "128Mi"}}
    reply = await api.post(f"{VM_API}/namespaces/{ns}/virtualmachineinstances", vmi)
    assert reply.status == 201, reply.body
    # The VMI has no status subresource, and KubeVirt's mutator reverts status edits by others than its components:
    # virt-controller's identity writes the phase.
    async with APIClient(apiserver, apiserver.token_of(CONTROLLER_USER)) as controller:
        body = {"status": {"phase": phase}}
        reply = await controller.patch(f"{VM_API}/namespaces/{ns}/virtualmachineinstances/{name}", body)
    assert reply.status == 200, reply.body
    assert reply.body["status"]["phase"] == phase


async def dump_request(api: APIClient, ns: str, name: str) -> Any:
    reply = await api.get(f"{VM_API}/namespaces/{ns}/virtualmachines/{name}")
    assert reply.status == 200, reply.body
    return (reply.body.get("status") or {}).get("memoryDumpRequest")


def path(ns: str, name: str, action: str) -> str:
    return f"{SUB}/namespaces/{ns}/virtualmachines/{name}/{action}"


async def test_memory_dump_request_and_its_removal(apiserver: APIServerProcess, api: APIClient, namespace: str) -> None:
    ns = namespace
    for each in (claim("dump", "1Gi"), claim("small", "100Mi"), claim("block", "1Gi", volumeMode="Block")):
        assert (await api.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", each)).status == 201
    await vm_with_vmi(apiserver, api, ns, "dumped")

    # Removing before anything was requested.
    why = "can't remove memory dump association for vm dumped, no association found"
    assert_status(
        await api.put(path(ns, "dumped", "removememorydump"), None), 409, conflict("virtualmachine", "dumped", why)
    )

    # The claim is checked: it must exist, be a filesystem, and hold 128Mi + 100Mi with CDI's 5.5% overhead.
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "missing"})
    assert_status(reply, 404, 'persistentvolumeclaim.kubevirt.io "missing" not found')
    why = "pvc size [104858k] should be bigger then [241Mi]"
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "small"})
    assert_status(reply, 409, conflict("persistentvolumeclaim", "small", why))
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "block"})
    assert_status(reply, 409, conflict("persistentvolumeclaim", "block", "pvc should be filesystem pvc"))
    assert await dump_request(api, ns, "dumped") is None

    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "dump"})
    assert reply.status == 202, reply.body
    assert await dump_request(api, ns, "dumped") == {"claimName": "dump", "phase": "Associating"}

    # While it is being associated, neither the same claim nor another may be asked for.
    why = "memory dump request for pvc [dump] already in progress"
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "dump"})
    assert_status(reply, 409, conflict("virtualmachine", "dumped", why))
    why = "can't request memory dump for pvc [small] while pvc [dump] is still associated as the memory dump pvc"
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "small"})
    assert_status(reply, 409, conflict("virtualmachine", "dumped", why))

    # Once done (virt-controller's part), a request without a claim name dumps into the same claim again.
    done = [{"op": "replace", "path": "/status/memoryDumpRequest/phase", "value": "Completed"}]
    status_path = f"{VM_API}/namespaces/{ns}/virtualmachines/dumped/status"
    assert (await api.patch(status_path, done, JSON_PATCH)).status == 200
    reply = await api.put(path(ns, "dumped", "memorydump"), {})
    assert reply.status == 202, reply.body
    assert await dump_request(api, ns, "dumped") == {"claimName": "dump", "phase": "Associating"}

    reply = await api.put(path(ns, "dumped", "removememorydump"), None)
    assert reply.status == 202, reply.body
    assert await dump_request(api, ns, "dumped") == {"claimName": "dump", "phase": "Dissociating", "remove": True}
    why = "memory dump remove request for pvc [dump] already exists"
    reply = await api.put(path(ns, "dumped", "removememorydump"), None)
    assert_status(reply, 409, conflict("virtualmachine", "dumped", why))
    why = "can't dump memory for pvc [dump] a remove memory dump request is in progress"
    reply = await api.put(path(ns, "dumped", "memorydump"), {"claimName": "dump"})
    assert_status(reply, 409, conflict("virtualmachine", "dumped", why))


async def test_memory_dump_refusals_before_the_claim(
    apiserver: APIServerProcess, api: APIClient, namespace: str
) -> None:
    ns = namespace
    assert (await api.post(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim("dump", "1Gi"))).status == 201
    await vm_with_vmi(apiserver, api, ns, "pending", phase="Scheduled")

    assert_status(await api.put(path(ns, "pending", "memorydump"), None), 400, "Request with no body")
    reply = await api.request("PUT", path(ns, "pending", "memorydump"), raw=b"[1]")
    message = (
        "Can not unmarshal Request body to struct, error: "
        "json: cannot unmarshal array into Go value of type v1.VirtualMachineMemoryDumpRequest"
    )
    assert_status(reply, 400, message)
    reply = await api.put(path(ns, "pending", "memorydump"), {})
    assert_status(reply, 400, "Memory dump requires claim name to be set")
    reply = await api.put(path(ns, "nope", "memorydump"), {"claimName": "dump"})
    assert_status(reply, 404, 'virtualmachine.kubevirt.io "nope" not found')
    reply = await api.put(path(ns, "nope", "removememorydump"), None)
    assert_status(reply, 404, 'virtualmachine.kubevirt.io "nope" not found')

    reply = await api.put(path(ns, "pending", "memorydump"), {"claimName": "dump"})
    assert_status(reply, 409, conflict("virtualmachineinstance", "pending", "VMI is not running"))
    # A VM without a VMI.
    assert (await api.post(f"{VM_API}/namespaces/{ns}/virtualmachines", vm_manifest("halted"))).status == 201
    reply = await api.put(path(ns, "halted", "memorydump"), {"claimName": "dump"})
    assert_status(reply, 404, 'virtualmachineinstance.kubevirt.io "halted" not found')
    assert await dump_request(api, ns, "pending") is None
    # The subresources are advertised with the others.
    listing = await api.get(SUB)
    names = {r["name"]: r["verbs"] for r in listing.body["resources"]}
    assert names["virtualmachines/memorydump"] == names["virtualmachines/removememorydump"] == ["update"]


async def test_memory_dump_needs_a_hotplug_gate(fresh_apiserver: APIServerProcess) -> None:
    """Without DeclarativeHotplugVolumes (Beta, so on unless disabled) and HotplugVolumes, memorydump is refused;
    removememorydump checks no gate."""
    async with APIClient(fresh_apiserver) as api:
        gates = {"developerConfiguration": {"disabledFeatureGates": ["DeclarativeHotplugVolumes"]}}
        kubevirt = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"}}
        reply = await api.post(
            f"{VM_API}/namespaces/kubevirt/kubevirts", {**kubevirt, "spec": {"configuration": gates}}
        )
        assert reply.status == 201, reply.body
        reply = await api.post(f"{VM_API}/namespaces/default/virtualmachines", vm_manifest("gated"))
        assert reply.status == 201, reply.body

        async def refused() -> Reply | None:
            reply = await api.put(path("default", "gated", "memorydump"), {"claimName": "dump"})
            return reply if reply.status == 400 else None

        message = "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API."
        assert_status(await eventually(refused), 400, message)
        why = "can't remove memory dump association for vm gated, no association found"
        reply = await api.put(path("default", "gated", "removememorydump"), None)
        assert_status(reply, 409, conflict("virtualmachine", "gated", why))
