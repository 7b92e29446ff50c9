"""virt-handler on a migration's target node: prepare the target launcher, listen, and take the VMI over at the end.

Upstream: pkg/virt-handler/migration-target.go. The VMI arrives here labelled `kubevirt.io/migrationTargetNodeName`
with `status.migrationState` naming this node. The handler has the target pod's launcher start its libvirt and
prepare the disks, opens the migration proxy on the node's address and publishes it (`targetNodeAddress`,
`targetDirectMigrationNodePorts`); once the domain runs here it moves the VMI to this node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import NODES, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.handler.certificates import MigrationTLSUnavailable, TLSSource, migration_context
from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient, LauncherUnavailable, ProtocolMismatch
from pykubevirt.handler.migration_proxy import MigrationProxy, ProxySet, dial_unix
from pykubevirt.handler.resource_hotplug import finalize_hotplug
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.handler.migration")

# KubeVirt's port roles in targetDirectMigrationNodePorts: 0 for libvirt, 49152 memory, 49153 block copy.
LIBVIRT_PORT_ROLE = 0
DIRECT_PORT_ROLE = pod_layout.DIRECT_MIGRATION_PORT
BLOCK_MIGRATION_PORT_ROLE = pod_layout.BLOCK_MIGRATION_PORT
# The target pod counts as scheduled once its compute container runs (KubeVirt's handover check), before its launcher
# serves: looking again this soon costs a stat or a refused connect, and waiting longer delays the whole migration.
LAUNCHER_WAIT_SECONDS = 0.1


def migration_state(vmi: Object) -> dict[str, Any]:
    return dict((vmi.get("status") or {}).get("migrationState") or {})


def target_pod_uid(vmi: Object, node: str, pods_dir: Path) -> str:
    """The migration's target pod: the VMI's pod on this node (status.activePods) whose launcher is there.

    A pod left from an earlier migration away from this node has no launcher socket any more.
    """
    candidates = [
        str(pod_uid)
        for pod_uid, pod_node in ((vmi.get("status") or {}).get("activePods") or {}).items()
        if pod_node == node
    ]
    live = [uid for uid in candidates if os.path.exists(pod_layout.launcher_socket(str(pods_dir), uid))]
    return live[-1] if live else ""


async def node_address(client: KubeClient, node: str) -> str:
    """The node's InternalIP, where migration traffic for this node is received."""
    obj = await client.get(NODES, node)
    for address in (obj.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address["address"])
    return "127.0.0.1"


class MigrationTargetReconciler:
    """Reconciles VMIs migrating to this node."""

    def __init__(
        self,
        client: KubeClient,
        *,
        node: str,
        pods_dir: Path,
        vmis: Informer,
        recorder: EventRecorder,
        clock: Callable[[], str] = now_rfc3339,
        address: str = "",
        enqueue: Callable[[str], None] | None = None,
        tls: TLSSource = None,
    ) -> None:
        self.client = client
        self.node = node
        self.pods_dir = pods_dir
        self.vmis = vmis
        self.recorder = recorder
        self.clock = clock
        # Where the proxies listen: the handler's --node-ip, or (when not given) the Node's InternalIP.
        self._address = address
        # The handler's certificates: its proxies listen with TLS unless the migration disables it.
        self.tls = tls
        # Migration uid → the proxy listening for it.
        self._proxies: dict[str, ProxySet] = {}
        # Reconcile a key again now (the controller's queue); None: the 0.5 s requeues alone notice the domain.
        self.enqueue = enqueue
        # Migration uid → the task following the target launcher's status stream.
        self._watches: dict[str, asyncio.Task[None]] = {}

    async def address(self) -> str:
        if not self._address:
            self._address = await node_address(self.client, self.node)
        return self._address

    async def reconcile(self, key: str) -> Result | None:
        vmi = self.vmis.get(key)
        if vmi is None:
            # Taken over (the label moved on) or deleted; a proxy of a finished migration was stopped already.
            return None
        state = migration_state(vmi)
        uid = str(state.get("migrationUid") or "")
        if state.get("targetNode") != self.node or not uid:
            return None
        if state.get("failed") or state.get("completed"):
            await self._stop(uid)
            return None
        pod_uid = target_pod_uid(vmi, self.node, self.pods_dir)
        if not pod_uid:
            return Result(requeue_after=LAUNCHER_WAIT_SECONDS)
        launcher = LauncherClient.of_pod(self.pods_dir, pod_uid)
        if not state.get("targetNodeAddress"):
            return await self._prepare(vmi, uid, launcher)
        self._watch(key, uid, launcher)
        try:
            status = await launcher.request("status")
        except (LauncherUnavailable, CommandFailed):
            return Result(requeue_after=1.0)
        incoming = status.get("migration") or {}
        if incoming.get("state") == "Succeeded":
            await self._take_over(vmi, incoming, launcher)
            await self._stop(uid)
            return None
        return Result(requeue_after=0.5)

    def _watch(self, key: str, uid: str, launcher: LauncherClient) -> None:
        """Reconcile as soon as the target launcher reports the domain running, not on the next 0.5 s requeue."""
        enqueue = self.enqueue
        task = self._watches.get(uid)
        if enqueue is None or (task is not None and not task.done()):
            return

        async def follow() -> None:
            with contextlib.suppress(LauncherUnavailable, ProtocolMismatch, OSError, ValueError):
                async for update in launcher.watch():
                    if (update.get("migration") or {}).get("state") == "Succeeded":
                        enqueue(key)

        self._watches[uid] = asyncio.get_running_loop().create_task(follow())

    async def _prepare(self, vmi: Object, uid: str, launcher: LauncherClient) -> Result | None:
        try:
            context = migration_context(self.tls, migration_state(vmi), server=True)
        except MigrationTLSUnavailable as exc:
            # Nothing could connect: the migration fails here rather than at the source's handshake.
            meta = vmi["metadata"]
            failed = {"failed": True, "failureReason": str(exc), "endTimestamp": self.clock()}
            patch = {"status": {"migrationState": failed}}
            await self.client.patch(VIRTUAL_MACHINE_INSTANCES, meta["name"], patch, meta["namespace"])
            self.recorder.event(
                vmi, WARNING, "Migrated", f"VirtualMachineInstance migration uid {uid} failed. reason:{exc}"
            )
            return None
        address = await self.address()
        try:
            reply = await launcher.request("preparemigrationtarget", vmi=vmi, migration={"listenAddress": address})
        except LauncherUnavailable:
            return Result(requeue_after=LAUNCHER_WAIT_SECONDS)
        except CommandFailed as exc:
            log.warning("preparing the migration target failed: %s", exc, extra=object_fields(vmi))
            return Result(requeue_after=5.0)
        incoming = reply.get("migration") or {}
        proxies = self._proxies.get(uid)
        if proxies is None:
            proxies = self._proxies[uid] = ProxySet()
            vmi_uid = vmi["metadata"]["uid"]
            proxy_dir = str(incoming["proxyDir"])
            targets = {
                LIBVIRT_PORT_ROLE: str(incoming["libvirtSocket"]),
                DIRECT_PORT_ROLE: f"{proxy_dir}/{vmi_uid}-{DIRECT_PORT_ROLE}-source.sock",
                BLOCK_MIGRATION_PORT_ROLE: f"{proxy_dir}/{vmi_uid}-{BLOCK_MIGRATION_PORT_ROLE}-source.sock",
            }
            for role, path in targets.items():
                await proxies.add(MigrationProxy(dial_unix(path), address=address, shown=path, role=role, tls=context))
        ports = {str(p.port): p.role for p in proxies.proxies}
        patch = {"status": {"migrationState": {"targetNodeAddress": address, "targetDirectMigrationNodePorts": ports}}}
        meta = vmi["metadata"]
        # A VMI has no status subresource: its status is patched through the object.
        await self.client.patch(VIRTUAL_MACHINE_INSTANCES, meta["name"], patch, meta["namespace"])
        shown = ",".join(sorted(ports))
        secured = "with TLS" if context is not None else "in plain TCP (disableTLS)"
        log.info("migration proxies listen at %s:%s %s", address, shown, secured, extra=object_fields(vmi))
        self.recorder.event(
            vmi, NORMAL, "PreparingTarget", f"Migration Target is listening at {address}, on ports: {shown}"
        )
        self.recorder.event(vmi, NORMAL, "PreparingTarget", "VirtualMachineInstance Migration Target Prepared.")
        return Result(requeue_after=0.5)

    async def _take_over(self, vmi: Object, incoming: dict[str, Any], launcher: LauncherClient) -> None:
        """The domain runs here: the VMI is this node's now (KubeVirt's migration-target finalization).

        A CPU or memory hotplug the migration was for is plugged first (finalizeMigration's hotplugCPU/Memory)."""
        hotplug = await finalize_hotplug(vmi, launcher)
        for reason, message in hotplug.warnings:
            self.recorder.event(vmi, WARNING, reason, message)
        meta = vmi["metadata"]
        now = self.clock()
        labels = {c.NODE_NAME_LABEL: self.node, c.MIGRATION_TARGET_NODE_NAME_LABEL: None}
        state = {
            "completed": True,
            "endTimestamp": now,
            "targetNodeDomainDetected": True,
            "targetNodeDomainReadyTimestamp": incoming.get("targetNodeDomainReadyTimestamp") or now,
        }
        # The evacuation that asked for this migration is done (KubeVirt clears the mark here too); a drain's
        # retried eviction of the source's completed launcher pod then goes through.
        status = {
            "nodeName": self.node,
            "migrationState": state,
            "migrationTransport": "Unix",
            "evacuationNodeName": None,
            **hotplug.status,
        }
        try:
            # One patch: the VMI joins this node's informer with its node name already moved.
            body = {"metadata": {"labels": labels}, "status": status}
            await self.client.patch(VIRTUAL_MACHINE_INSTANCES, meta["name"], body, meta["namespace"])
        except NotFound:
            return
        log.info("VMI migrated to this node", extra=object_fields(vmi))
        self.recorder.event(vmi, NORMAL, "Migrated", f"The VirtualMachineInstance migrated to node {self.node}.")

    async def _stop(self, uid: str) -> None:
        task = self._watches.pop(uid, None)
        if task is not None:
            task.cancel()
        proxies = self._proxies.pop(uid, None)
        if proxies is not None:
            await proxies.stop()
