"""virt-controller plus a simulated node, in the test's event loop, against a real API server process."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pykubevirt.apiserver.security import write_user_kubeconfig
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.resources import EVENTS, NAMESPACES, PODS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.controller.app import ControllerOptions, VirtController
from tests.support.apiserver_process import APIServerProcess
from tests.support.simulated_node import SimulatedNode
from tests.support.waiting import eventually
from tests.support.watching import watching

T = TypeVar("T")


def client_for(server: APIServerProcess, component: str = "") -> KubeClient:
    path = server.data_dir / (f"{component}.kubeconfig" if component else "kubeconfig")
    return KubeClient(load_kubeconfig(Path(path)), qps=0)


SIMULATED_NODE_USER = "system:node:simulated"
SIMULATED_NODE_GROUP = "pykubevirt:simulated-nodes"
# The simulated node plays the scheduler and a kubelet (and writes VMIs as virt-handler): it holds those roles.
SIMULATED_NODE_ROLES = ("system:kube-scheduler", "system:volume-scheduler")


async def simulated_node_client(server: APIServerProcess, admin: KubeClient) -> KubeClient:
    """A client for the simulated node's identity (a node, bound to the scheduler's roles too)."""
    path = write_user_kubeconfig(
        server.data_dir,
        server.data_dir / "simulated-node.kubeconfig",
        SIMULATED_NODE_USER,
        ("system:nodes", SIMULATED_NODE_GROUP),
    )
    for role in SIMULATED_NODE_ROLES:
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"simulated-node:{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": SIMULATED_NODE_GROUP}],
        }
        with contextlib.suppress(AlreadyExists):
            await admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
    return KubeClient(load_kubeconfig(path), qps=0)


class VMReads:
    """Reads of and waits on VMs and VMIs through an admin client: what integration and e2e harnesses both ask."""

    admin: KubeClient
    namespace_prefix: ClassVar[str] = "t"
    wait_timeout: ClassVar[float] = 20.0
    poll_interval: ClassVar[float] = 0.05

    async def namespace(self) -> str:
        name = f"{self.namespace_prefix}-{uuid.uuid4().hex[:8]}"
        await self.admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    async def vm(self, namespace: str, name: str) -> Object | None:
        try:
            return await self.admin.get(VIRTUAL_MACHINES, name, namespace)
        except NotFound:
            return None

    async def vmi(self, namespace: str, name: str) -> Object | None:
        try:
            return await self.admin.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        except NotFound:
            return None

    async def printable(self, namespace: str, name: str) -> str:
        vm = await self.vm(namespace, name)
        return str(((vm or {}).get("status") or {}).get("printableStatus") or "")

    async def describe(self, namespace: str, name: str) -> str:
        """VM, VMI, launcher pods and events of `name`, for failure messages."""
        vm = await self.vm(namespace, name)
        vmi = await self.vmi(namespace, name)
        pods = (await self.admin.list(PODS, namespace, label_selector="kubevirt.io=virt-launcher"))["items"]
        events = (await self.admin.list(EVENTS, namespace))["items"]
        return repr(
            {
                "vm": (vm or {}).get("status"),
                "vmi": {
                    "status": (vmi or {}).get("status"),
                    "deleting": (vmi or {}).get("metadata", {}).get("deletionTimestamp"),
                },
                "pods": [(p["metadata"]["name"], p["spec"].get("nodeName"), p.get("status")) for p in pods],
                "events": [
                    (e.get("involvedObject", {}).get("name"), e.get("reason"), e.get("message")) for e in events
                ],
            }
        )

    async def wait_printable(
        self,
        namespace: str,
        name: str,
        wanted: str,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Object:
        """The VM once its printableStatus is `wanted`."""

        async def probe() -> Object | None:
            vm = await self.vm(namespace, name)
            return vm if vm and (vm.get("status") or {}).get("printableStatus") == wanted else None

        return await self._wait(probe, f"VM {namespace}/{name} not {wanted}", namespace, name, timeout)

    async def wait_vmi_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        other_than_uid: str = "",
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> Object:
        """The VMI (other than the one with `other_than_uid`) once it is in `phase`."""

        async def probe() -> Object | None:
            vmi = await self.vmi(namespace, name)
            if vmi is None or vmi["metadata"]["uid"] == other_than_uid:
                return None
            return vmi if (vmi.get("status") or {}).get("phase") == phase else None

        return await self._wait(probe, f"VMI {namespace}/{name} not {phase}", namespace, name, timeout)

    async def _wait(
        self,
        probe: Callable[[], Awaitable[Object | None]],
        failure: str,
        namespace: str,
        name: str,
        timeout: float | None,  # noqa: ASYNC109
    ) -> Object:
        timeout = self.wait_timeout if timeout is None else timeout
        try:
            return await eventually(probe, timeout=timeout, interval=self.poll_interval)
        except AssertionError:
            raise AssertionError(f"{failure} within {timeout}s: {await self.describe(namespace, name)}") from None


@dataclass
class ControlPlane(VMReads):
    server: APIServerProcess
    admin: KubeClient
    controller_client: KubeClient
    node_client: KubeClient
    handler_client: KubeClient
    controller: VirtController
    node: SimulatedNode
    task: asyncio.Task[None]

    async def wait_vmi_gone(self, namespace: str, name: str, uid: str) -> None:
        async def probe() -> bool:
            vmi = await self.vmi(namespace, name)
            return vmi is None or vmi["metadata"]["uid"] != uid

        await eventually(probe)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        await self.node.stop()
        await self.controller.recorder.flush()
        for client in (self.admin, self.controller_client, self.node_client, self.handler_client):
            await client.close()


async def start_control_plane(server: APIServerProcess, **options: Any) -> ControlPlane:
    admin = client_for(server)
    controller_client = client_for(server, "virt-controller")
    node_client = await simulated_node_client(server, admin)
    handler_client = client_for(server, "virt-handler")
    opts = ControllerOptions(workers=4, leader_election=False, node_recheck=0.5, **options)
    controller = VirtController(controller_client, opts)
    task = asyncio.create_task(controller.run())
    node = await SimulatedNode(node_client, handler=handler_client).start()
    return ControlPlane(server, admin, controller_client, node_client, handler_client, controller, node, task)


def vm_manifest(name: str, run_strategy: str | None = "Always", **spec: Any) -> Object:
    """A small valid VM (128Mi, containerDisk) with the given RunStrategy."""
    body: Object = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {"vm-label": "on-vm"}, "annotations": {"vm-annotation": "on-vm"}},
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"kubevirt.io/domain": name},
                    "annotations": {"template-annotation": "on-template"},
                },
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
    if run_strategy is not None:
        body["spec"]["runStrategy"] = run_strategy
    return body


@contextlib.asynccontextmanager
async def printable_history(client: KubeClient, namespace: str, name: str) -> AsyncIterator[list[str]]:
    """The VM's printableStatus values in the order a watch sees them (what `kubectl get vm -w` shows)."""
    async with _watched_rows(client, namespace, name, lambda status: str(status.get("printableStatus") or "")) as seen:
        yield seen


@contextlib.asynccontextmanager
async def status_ready_history(client: KubeClient, namespace: str, name: str) -> AsyncIterator[list[tuple[str, bool]]]:
    """The VM's (printableStatus, ready) rows in the order a watch sees them: `kubectl get vm -w`'s STATUS, READY."""

    def row(status: Object) -> tuple[str, bool] | None:
        printable = str(status.get("printableStatus") or "")
        return (printable, bool(status.get("ready"))) if printable else None

    async with _watched_rows(client, namespace, name, row) as seen:
        yield seen


@contextlib.asynccontextmanager
async def _watched_rows(
    client: KubeClient, namespace: str, name: str, row_of: Callable[[Object], T | None]
) -> AsyncIterator[list[T]]:
    seen: list[T] = []

    def record(vm: Object) -> None:
        row = row_of(vm.get("status") or {})
        if row and (not seen or seen[-1] != row):
            seen.append(row)

    async with watching(client, VIRTUAL_MACHINES, namespace, name, record):
        yield seen
