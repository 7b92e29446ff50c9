"""A whole embedded cluster as real processes for e2e tests: API server, virt-controller, scheduler, and per node
a node agent plus virt-handler. Each component is its own process, started and stopped by its PID."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pykubevirt.api import pod_layout
from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.cli.component_process import ComponentProcess
from pykubevirt.cli.kubeconfig_command import write_node_kubeconfig
from pykubevirt.cli.up_command import node_schedulable
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.resources import EVENTS, NODES, PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.node.teardown import kill_node_pods
from tests.support.apiserver_process import KUBECTL, APIServerProcess, kubectl_env
from tests.support.control_plane import VMReads, client_for
from tests.support.node_agent_process import NodeAgentProcess
from tests.support.waiting import eventually

DEMO_IMAGE = "pykubevirt.local/demo-guest:1.0"
# The demo guest's kernel and initrd as a kernel-boot container (scripts/import-kernel-image.sh).
DEMO_KERNEL_IMAGE = "pykubevirt.local/demo-guest-kernel:1.0"


# Faster than the defaults, so tests do not wait on timers.
TEST_FLAGS: dict[str, tuple[str, ...]] = {
    "virt-controller": ("--workers", "4", "--no-leader-election"),
    "scheduler": ("--retry-interval", "2"),
}


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
    layout: ClusterLayout
    server: APIServerProcess
    controller: ComponentProcess
    scheduler: ComponentProcess
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def start(
        cls, root: Path, images_dir: Path, node_count: int = 1, flags: dict[str, tuple[str, ...]] | None = None
    ) -> EmbeddedCluster:
        """`pykubevirt up`'s components under `root`, with the demo image store at `images_dir`; `flags` are added
        to a component's test flags."""
        root.mkdir(parents=True, exist_ok=True)
        extra = {name: TEST_FLAGS.get(name, ()) + (flags or {}).get(name, ()) for name in {*TEST_FLAGS, *(flags or {})}}
        # Every pod but the host-network ones gets a namespace on the cluster's CNI bridges, as `pykubevirt up` does.
        layout = ClusterLayout(root, node_count, extra_args=extra, cluster_cidr=choose_cluster_cidr(root))
        images = layout.images_dir
        if not images.exists():
            images.symlink_to(images_dir)
        server = APIServerProcess(layout.apiserver_dir, *layout.service_args).start()
        controller = ComponentProcess(layout.controller()).start()
        scheduler = ComponentProcess(layout.scheduler()).start()
        cluster = cls(root, layout, server, controller, scheduler)
        for name in layout.node_names:
            cluster.add_node(name)
        return cluster

    def add_node(self, name: str) -> Node:
        data_dir = self.layout.node_dir(name)
        kubeconfig = write_node_kubeconfig(self.layout, name)
        extra = (*self.layout.network_args, *self.layout.extra_args.get("node", ()))
        agent = NodeAgentProcess(kubeconfig, name, data_dir, self.layout.images_dir, extra).start()
        handler = ComponentProcess(self.layout.handler(name)).start()
        node = Node(name, data_dir, agent, handler)
        self.nodes.append(node)
        return node

    def restart_handler(self, node: Node, sig: int = signal.SIGTERM) -> None:
        node.handler.stop(sig)
        node.handler = ComponentProcess(self.layout.handler(node.name)).start()

    def stop(self) -> None:
        """Stop every component, then every pod process and guest the node agents left running."""
        for node in self.nodes:
            node.handler.stop()
            node.agent.stop()
        self.scheduler.stop()
        self.controller.stop()
        self.server.stop()
        for node in self.nodes:
            kill_node_pods(node.data_dir)
        release_cluster_network(self.root)


class ClusterView(VMReads):
    """A test's window on the cluster: an admin client in the test's event loop and the waits tests need."""

    namespace_prefix = "e2e"
    # Real guests boot under TCG here: waits are longer and polls less frequent than with a simulated node.
    wait_timeout = 90.0
    poll_interval = 0.1

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster
        self.admin = client_for(cluster.server)

    @property
    def node(self) -> Node:
        return self.cluster.nodes[0]

    async def close(self) -> None:
        await self.admin.close()

    async def wait_ready(self) -> None:
        """Every node Ready and schedulable (its handler's heartbeat seen)."""
        names = {node.name for node in self.cluster.nodes}

        async def ready() -> bool:
            nodes = (await self.admin.list(NODES))["items"]
            return names <= {node["metadata"]["name"] for node in nodes if node_schedulable(node)}

        await eventually(ready, timeout=60)

    async def launcher_pod(self, vmi: Object) -> Object:
        pods = await self.admin.list(PODS, vmi["metadata"]["namespace"], label_selector="kubevirt.io=virt-launcher")
        uid = vmi["metadata"]["uid"]
        for pod in pods["items"]:
            if (pod["metadata"].get("labels") or {}).get("kubevirt.io/created-by") == uid:
                return dict(pod)
        raise AssertionError(f"no launcher pod for VMI uid {uid}")

    def serial_log(self, node: Node, pod: Object, vmi: Object) -> Path:
        """The guest's serial console log the launcher keeps in its pod's private volume."""
        return Path(pod_layout.serial_log(str(node.pods_dir), pod["metadata"]["uid"], vmi["metadata"]["uid"]))

    def hold_serial(self, node: Node, pod: Object, vmi: Object) -> BinaryIO:
        """The serial log opened now: what the guest prints until it stops stays readable through this handle after
        its pod ends and the log file goes with it (a graceful stop's last lines, say), as a console client sees it."""
        return self.serial_log(node, pod, vmi).open("rb")

    async def wait_serial(
        self,
        node: Node,
        pod: Object,
        vmi: Object,
        text: str,
        timeout: float = 90.0,  # noqa: ASYNC109
        held: BinaryIO | None = None,
    ) -> str:
        path = self.serial_log(node, pod, vmi)

        def read() -> str:
            if held is not None:
                held.seek(0)
                return held.read().decode(errors="replace")
            return path.read_text(errors="replace") if path.exists() else ""

        async def probe() -> str | None:
            content = await asyncio.to_thread(read)
            return content if text in content else None

        try:
            return await eventually(probe, timeout=timeout, interval=0.2)
        except AssertionError:
            content = read() if held is not None or path.exists() else "<no serial log: the pod is gone>"
            meta = vmi["metadata"]
            # The log goes with its pod, so say what became of the VMI (a destroy after the grace period, say).
            state = await self.describe(meta["namespace"], meta["name"])
            raise AssertionError(
                f"{text!r} not on the serial console of {meta['name']}:\n{content[-3000:]}\n{state}"
            ) from None

    async def run(self, program: str, *args: str, check: bool = True) -> tuple[int, str, str]:
        """`kubectl` or `virtctl` against the cluster, as a user runs them; fails the test on a non-zero exit."""
        binary = KUBECTL if program == "kubectl" else str(Path(sys.executable).parent / program)
        env = kubectl_env(self.cluster.server, self.cluster.root / "home")
        process = await asyncio.create_subprocess_exec(
            binary, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 120)
        code = process.returncode or 0
        if check and code != 0:
            raise AssertionError(f"{program} {' '.join(args)} failed ({code}): {err.decode()}")
        return code, out.decode(), err.decode()

    async def events(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """(type, reason) of the events about objects named `name`."""
        items = (await self.admin.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}"))["items"]
        return [(str(e.get("type")), str(e.get("reason"))) for e in items]

    def watch_phases(self, namespace: str, name: str) -> PhaseLog:
        """Record every phase of every VMI named `name` from now on (a deleted VMI's last phase flashes by)."""
        return PhaseLog(self.admin, namespace, name)


class PhaseLog:
    """(uid, phase) of a VMI name as a watch reports them, in order."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.seen: list[tuple[str, str]] = []
        self._task = asyncio.get_running_loop().create_task(self._follow(client, namespace, name))

    async def _follow(self, client: KubeClient, namespace: str, name: str) -> None:
        while True:
            try:
                async for event in client.watch(
                    VIRTUAL_MACHINE_INSTANCES, namespace, field_selector=f"metadata.name={name}"
                ):
                    vmi = event.object
                    entry = (str(vmi["metadata"].get("uid")), str((vmi.get("status") or {}).get("phase") or ""))
                    if event.type in ("ADDED", "MODIFIED") and (not self.seen or self.seen[-1] != entry):
                        self.seen.append(entry)
            except ConnectionError:
                await asyncio.sleep(0.2)

    def phases(self, uid: str) -> list[str]:
        return [phase for seen_uid, phase in self.seen if seen_uid == uid]

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
