"""A whole embedded cluster as real processes for e2e tests: API server, virt-controller, scheduler, and per node
a node agent plus virt-handler. Each component is its own process, started and stopped by its PID."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.client.api import Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for, eventually
from tests.support.node_agent_process import NodeAgentProcess, kill_leftover_pods

DEMO_IMAGE = "pykubevirt.local/demo-guest:1.0"


class ComponentProcess:
    """`pykubevirt <argv>` as a child process, its output in `log_path`."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ComponentProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pykubevirt.cli.main", *self.argv], stdout=log, stderr=subprocess.STDOUT
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Node:
    name: str
    data_dir: Path
    agent: NodeAgentProcess
    handler: ComponentProcess

    @property
    def pods_dir(self) -> Path:
        return self.data_dir / "pods"


@dataclass
class EmbeddedCluster:
    root: Path
    images_dir: Path
    server: APIServerProcess
    controller: ComponentProcess
    scheduler: ComponentProcess
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def start(cls, root: Path, images_dir: Path, node_names: tuple[str, ...] = ("node01",)) -> EmbeddedCluster:
        root.mkdir(parents=True, exist_ok=True)
        server = APIServerProcess(root / "apiserver").start()
        data = server.data_dir
        controller = ComponentProcess(
            "virt-controller",
            [
                *("virt-controller", "--kubeconfig", str(data / "virt-controller.kubeconfig")),
                *("--workers", "4", "--no-leader-election"),
            ],
            root / "virt-controller.log",
        ).start()
        scheduler = ComponentProcess(
            "scheduler",
            ["scheduler", "--kubeconfig", str(data / "scheduler.kubeconfig"), "--retry-interval", "2"],
            root / "scheduler.log",
        ).start()
        cluster = cls(root, images_dir, server, controller, scheduler)
        for name in node_names:
            cluster.add_node(name)
        return cluster

    def add_node(self, name: str) -> Node:
        data_dir = self.root / name
        agent = NodeAgentProcess(self.server.kubeconfig, name, data_dir, self.images_dir).start()
        handler = self._handler(name, data_dir).start()
        node = Node(name, data_dir, agent, handler)
        self.nodes.append(node)
        return node

    def _handler(self, name: str, data_dir: Path) -> ComponentProcess:
        argv = [
            *("virt-handler", "--node-name", name, "--data-dir", str(data_dir)),
            *("--kubeconfig", str(self.server.data_dir / "virt-handler.kubeconfig")),
        ]
        return ComponentProcess(f"virt-handler-{name}", argv, self.root / f"virt-handler-{name}.log")

    def restart_handler(self, node: Node, sig: int = signal.SIGTERM) -> None:
        node.handler.stop(sig)
        node.handler = self._handler(node.name, node.data_dir).start()

    def stop(self) -> None:
        """Stop every component, then every pod process and guest the node agents left running."""
        for node in self.nodes:
            node.handler.stop()
            node.agent.stop()
        self.scheduler.stop()
        self.controller.stop()
        self.server.stop()
        for node in self.nodes:
            kill_leftover_pods(node.data_dir)

    def logs(self) -> dict[str, Any]:
        return {
            "controller": self.controller.log()[-4000:],
            **{n.handler.name: n.handler.log()[-4000:] for n in self.nodes},
        }


class ClusterView:
    """A test's window on the cluster: an admin client in the test's event loop and the waits tests need."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.client = client_for(cluster.server)

    @property
    def node(self) -> Node:
        return self.cluster.nodes[0]

    async def close(self) -> None:
        await self.client.close()

    async def wait_ready(self) -> None:
        """Every node Ready and schedulable (its handler's heartbeat seen)."""
        names = {node.name for node in self.cluster.nodes}

        async def ready() -> bool:
            items = (await self.client.list(NODES))["items"]
            good = set()
            for node in items:
                labels = node["metadata"].get("labels") or {}
                conditions = {x["type"]: x["status"] for x in (node.get("status") or {}).get("conditions") or []}
                if conditions.get("Ready") == "True" and labels.get("kubevirt.io/schedulable") == "true":
                    good.add(node["metadata"]["name"])
            return names <= good

        await eventually(ready, timeout=60)

    async def namespace(self) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        await self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name

    async def vm(self, namespace: str, name: str) -> Object | None:
        try:
            return await self.client.get(VIRTUAL_MACHINES, name, namespace)
        except NotFound:
            return None

    async def vmi(self, namespace: str, name: str) -> Object | None:
        try:
            return await self.client.get(VIRTUAL_MACHINE_INSTANCES, name, namespace)
        except NotFound:
            return None

    async def describe(self, namespace: str, name: str) -> str:
        """VM, VMI, launcher pods and events of `name`, for failure messages."""
        client = self.client
        vm = await self.vm(namespace, name)
        vmi = await self.vmi(namespace, name)
        pods = (await client.list(PODS, namespace))["items"]
        events = (await client.list(EVENTS, namespace))["items"]
        return repr(
            {
                "vm": (vm or {}).get("status"),
                "vmi": (vmi or {}).get("status"),
                "pods": [(p["metadata"]["name"], p.get("status")) for p in pods],
                "events": [
                    (e.get("involvedObject", {}).get("name"), e.get("reason"), e.get("message")) for e in events
                ],
            }
        )

    async def wait_vm(self, namespace: str, name: str, printable: str, timeout: float = 90.0) -> Object:  # noqa: ASYNC109
        async def probe() -> Object | None:
            vm = await self.vm(namespace, name)
            return vm if vm and (vm.get("status") or {}).get("printableStatus") == printable else None

        try:
            return await eventually(probe, timeout=timeout, interval=0.1)
        except AssertionError:
            raise AssertionError(
                f"VM {namespace}/{name} not {printable} within {timeout}s: {await self.describe(namespace, name)}"
            ) from None

    async def wait_vmi(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        other_than_uid: str = "",
        timeout: float = 90.0,  # noqa: ASYNC109
    ) -> Object:
        async def probe() -> Object | None:
            vmi = await self.vmi(namespace, name)
            if vmi is None or vmi["metadata"]["uid"] == other_than_uid:
                return None
            return vmi if (vmi.get("status") or {}).get("phase") == phase else None

        try:
            return await eventually(probe, timeout=timeout, interval=0.1)
        except AssertionError:
            raise AssertionError(
                f"VMI {namespace}/{name} not {phase} within {timeout}s: {await self.describe(namespace, name)}"
            ) from None

    async def launcher_pod(self, vmi: Object) -> Object:
        pods = await self.client.list(PODS, vmi["metadata"]["namespace"], label_selector="kubevirt.io=virt-launcher")
        uid = vmi["metadata"]["uid"]
        for pod in pods["items"]:
            if (pod["metadata"].get("labels") or {}).get("kubevirt.io/created-by") == uid:
                return dict(pod)
        raise AssertionError(f"no launcher pod for VMI uid {uid}")

    def serial_log(self, node: Node, pod: Object, vmi: Object) -> Path:
        """The guest's serial console log the launcher keeps in its pod's private volume."""
        pod_uid, vmi_uid = str(pod["metadata"]["uid"]), str(vmi["metadata"]["uid"])
        return node.pods_dir / pod_uid / "volumes" / "private" / vmi_uid / "virt-serial0-log"

    async def wait_serial(self, node: Node, pod: Object, vmi: Object, text: str, timeout: float = 90.0) -> str:  # noqa: ASYNC109
        path = self.serial_log(node, pod, vmi)

        async def probe() -> str | None:
            content = await asyncio.to_thread(lambda: path.read_text(errors="replace") if path.exists() else "")
            return content if text in content else None

        try:
            return await eventually(probe, timeout=timeout, interval=0.2)
        except AssertionError:
            content = path.read_text(errors="replace") if path.exists() else "<no serial log>"
            raise AssertionError(
                f"{text!r} not on the serial console of {vmi['metadata']['name']}:\n{content[-3000:]}"
            ) from None
