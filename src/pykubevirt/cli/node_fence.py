"""Fencing for the embedded cluster: the supervisor owns every node's processes on this host, so a node that went
silent is killed for real (STONITH by process ID) before its guests may start on another node.

A node is unresponsive when neither its node agent (Ready's lastHeartbeatTime) nor its virt-handler
(`kubevirt.io/heartbeat`) has written for `grace` seconds, while the API server and both components have been up at
least that long: a stale heartbeat after an API server outage, a restart or `up` is not the node's fault. The fence
SIGKILLs the agent, virt-handler and every pod process and QEMU recorded under the node's data dir, then taints the
node `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (Kubernetes' non-graceful node shutdown, which
virt-controller honours: VMIs failed, launcher pods force-deleted) and sets the Node condition Fenced=True. Once no
launcher pod is left on the node, its agent and virt-handler start again (the node has rebooted); when both beat, the
taint goes and Fenced turns False.

Only one of the two silent (for twice the grace, while the other beats) is a hung component, not a dead node: that
process is SIGKILLed and restarted, and the guests keep running.

A node this data dir ran that `up --nodes N` leaves out is down for good: it is fenced at once (its pods' leftover
processes killed, the taint, Fenced=True with reason NodeNotStarted). A fence outlives the supervisor in the node's
taint: a node found tainted at start is released when its new components beat.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.component_client import admin_client
from pykubevirt.client.api import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.resources import NODES, PODS
from pykubevirt.controller.node_controller import NO_EXECUTE
from pykubevirt.node.teardown import kill_node_pods

if TYPE_CHECKING:
    from pykubevirt.cli.supervisor import Supervised

log = logging.getLogger("pykubevirt.supervisor.fence")

# Heartbeats come every 10 s (agent) and 15 s (virt-handler): 30 s is two missed agent beats. With it, node death to
# a guest booted on another node takes about a minute (see the README).
DEFAULT_FENCE_GRACE_SECONDS = 30.0
CHECK_SECONDS = 2.0
FENCED_CONDITION = "Fenced"
FENCE_TAINT: dict[str, str] = {"key": c.OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": NO_EXECUTE}


def agent_heartbeat(node: Object) -> datetime | None:
    """When the node agent last renewed the Ready condition."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return parse_time(condition.get("lastHeartbeatTime"))
    return None


def handler_heartbeat(node: Object) -> datetime | None:
    """When virt-handler last wrote its heartbeat annotation."""
    return parse_time(((node.get("metadata") or {}).get("annotations") or {}).get(c.HEARTBEAT_ANNOTATION))


def fenced_by_supervisor(node: Object) -> bool:
    """Tainted out-of-service with Fenced=True: a fence (not an admin's own taint), maybe an earlier supervisor's."""
    tainted = any(t.get("key") == c.OUT_OF_SERVICE_TAINT for t in (node.get("spec") or {}).get("taints") or [])
    conditions = (node.get("status") or {}).get("conditions") or []
    return tainted and any(x.get("type") == FENCED_CONDITION and x.get("status") == "True" for x in conditions)


def silent(moment: datetime | None, now: datetime, grace: float) -> bool:
    return moment is None or (now - moment).total_seconds() > grace


@dataclass
class FencedNode:
    """A node the supervisor fenced: when, and since when its components run again (0 while held down)."""

    fenced_at: datetime
    released_at: datetime | None = None
    killed: int = 0
    pods_left: list[str] = field(default_factory=list)


class NodeFencer:
    """Watches the nodes' heartbeats every CHECK_SECONDS; fences silent nodes and restarts hung components."""

    def __init__(
        self,
        layout: ClusterLayout,
        entries: Sequence[Supervised],
        *,
        grace: float = DEFAULT_FENCE_GRACE_SECONDS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.layout = layout
        self.entries = {entry.component.name: entry for entry in entries}
        self.grace = grace
        self.clock = clock
        self.fenced: dict[str, FencedNode] = {}
        self.fences = 0
        # The taints of an earlier supervisor's fences are taken over at the first check; left-out nodes are fenced.
        self.started_at = clock()
        self._adopted = False

    async def run(self) -> None:
        client: KubeClient | None = None
        try:
            while True:
                await asyncio.sleep(CHECK_SECONDS)
                if client is None:
                    client = self._client()
                if client is None:
                    continue
                try:
                    await self.check(client)
                except (ApiError, OSError) as exc:
                    log.debug("fence check: %s", exc)
        finally:
            if client is not None:
                await client.close()

    def _client(self) -> KubeClient | None:
        return admin_client(self.layout.kubeconfig, "pykubevirt-fence")

    def _up_for(self, name: str) -> float:
        """Seconds the component has been running without a restart (0 when down)."""
        entry = self.entries[name]
        return time.monotonic() - entry.started_monotonic if entry.process.running() and not entry.held else 0.0

    async def check(self, client: KubeClient) -> None:
        nodes = {n["metadata"]["name"]: n for n in (await client.list(NODES))["items"]}
        now = self.clock()
        if not self._adopted:
            await self._adopt(client, nodes, now)
            self._adopted = True
        for name in self.layout.node_names:
            node = nodes.get(name)
            if node is None:
                continue
            if name in self.fenced:
                await self._recover(client, name, node, now)
                continue
            # Heartbeats written while the API server was down never arrived: no verdict until it has been up long.
            if self._up_for("apiserver") <= self.grace:
                continue
            agent, handler = f"node-{name}", f"virt-handler-{name}"
            beats = {agent: agent_heartbeat(node), handler: handler_heartbeat(node)}
            quiet = {x: self._up_for(x) > self.grace and silent(beats[x], now, self.grace) for x in beats}
            if all(quiet.values()):
                await self._fence(client, name, node, now)
                continue
            # When a node dies its two heartbeats stop at once but go stale up to an interval apart: a component is
            # hung, not the node dead, only when it stays silent twice the grace while the other one beats.
            for component, other in ((agent, handler), (handler, agent)):
                if quiet[component] and not quiet[other] and silent(beats[component], now, 2 * self.grace):
                    await self._restart_hung(component)

    async def _adopt(self, client: KubeClient, nodes: dict[str, Object], now: datetime) -> None:
        """Fence the left-out nodes; release the started ones an earlier supervisor left fenced once they beat."""
        for name in self.layout.node_names:
            node = nodes.get(name)
            if node is not None and name not in self.fenced and fenced_by_supervisor(node):
                log.warning("node %s is still fenced from an earlier run: released once it heartbeats", name)
                self.fenced[name] = FencedNode(now, released_at=self.started_at)
        for name in self.layout.left_out_nodes:
            node = nodes.get(name)
            if node is None:
                continue
            killed = await asyncio.to_thread(kill_node_pods, self.layout.node_dir(name))
            if fenced_by_supervisor(node) and not killed:
                continue  # left out last time too
            message = (
                f"not started (the cluster runs {self.layout.node_count} node(s)): the supervisor killed {killed} pod "
                "process(es) left on it"
            )
            self.fences += 1
            await self._mark_fenced(client, name, "NodeNotStarted", message, now, killed)

    async def _restart_hung(self, name: str) -> None:
        entry = self.entries[name]
        log.warning("%s has not heartbeated for %.0fs: killing it to restart it", name, 2 * self.grace)
        await asyncio.to_thread(entry.process.stop, signal.SIGKILL, 5.0)

    async def _fence(self, client: KubeClient, name: str, node: Object, now: datetime) -> None:
        log.warning("node %s is unresponsive (no heartbeat for %.0fs): fencing it", name, self.grace)
        for component in (f"node-{name}", f"virt-handler-{name}"):
            entry = self.entries[component]
            entry.held = True  # the supervisor does not restart it until the node's pods are gone
            # SIGKILL ends a stopped (SIGSTOP) process too; by the PID the supervisor started, never by name.
            await asyncio.to_thread(entry.process.stop, signal.SIGKILL, 5.0)
        killed = await asyncio.to_thread(kill_node_pods, self.layout.node_dir(name))
        self.fences += 1
        self.fenced[name] = FencedNode(now, killed=killed)
        message = (
            f"no heartbeat for {self.grace:.0f}s: the supervisor killed the node agent, virt-handler and "
            f"{killed} pod process(es)"
        )
        await self._mark_fenced(client, name, "NodeUnresponsive", message, now, killed)

    async def _mark_fenced(
        self, client: KubeClient, name: str, reason: str, message: str, now: datetime, killed: int
    ) -> None:
        # The reason first: whoever sees the taint (virt-controller failing the node's VMIs, a user) sees why.
        await self._set_condition(client, name, "True", reason, message, now)
        await self._set_taint(client, name, present=True)
        log.warning("fenced node %s: %s", name, message, extra={"node": name, "count": killed})

    async def _recover(self, client: KubeClient, name: str, node: Object, now: datetime) -> None:
        state = self.fenced[name]
        if state.released_at is None:
            left = await self._launcher_pods(client, name)
            if left:
                if left != state.pods_left:
                    log.info("fenced node %s waits for its pods to go: %s", name, ", ".join(left))
                state.pods_left = left
                return
            state.released_at = now
            for component in (f"node-{name}", f"virt-handler-{name}"):
                self.entries[component].held = False
            log.warning("fenced node %s has no pods left: starting its agent and virt-handler again", name)
            return
        beats = (agent_heartbeat(node), handler_heartbeat(node))
        # Stamps have whole seconds: a beat in the second of the release counts.
        if any(beat is None or beat < state.released_at.replace(microsecond=0) for beat in beats):
            return
        await self._set_taint(client, name, present=False)
        await self._set_condition(client, name, "False", "NodeRecovered", "the node heartbeats again", now)
        del self.fenced[name]
        log.warning("node %s rejoined after its fence", name, extra={"node": name})

    async def _launcher_pods(self, client: KubeClient, name: str) -> list[str]:
        pods = (await client.list(PODS, field_selector=f"spec.nodeName={name}"))["items"]
        return sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in pods
            if pod_layout.MIRROR_ANNOTATION not in (p["metadata"].get("annotations") or {})
        )

    async def _set_taint(self, client: KubeClient, name: str, *, present: bool) -> None:
        """Add or remove the out-of-service taint; conditional on resourceVersion, as others write taints too."""
        for _ in range(10):
            try:
                node = await client.get(NODES, name)
            except NotFound:
                return
            taints: list[Any] = [
                t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != c.OUT_OF_SERVICE_TAINT
            ]
            if present:
                taints.append({**FENCE_TAINT, "timeAdded": format_time(self.clock())})
            patch = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}, "spec": {"taints": taints}}
            try:
                await client.patch(NODES, name, patch, patch_type=MERGE_PATCH)
                return
            except Conflict:
                continue

    async def _set_condition(
        self, client: KubeClient, name: str, status: str, reason: str, message: str, now: datetime
    ) -> None:
        stamp = format_time(now)
        condition = {
            "type": FENCED_CONDITION,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        patch = {"status": {"conditions": [condition]}}
        try:
            await client.patch(NODES, name, patch, patch_type=STRATEGIC_MERGE_PATCH, subresource="status")
        except NotFound:
            return
