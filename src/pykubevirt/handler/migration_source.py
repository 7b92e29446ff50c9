"""virt-handler on a migration's source node: start the launcher's migration, abort it, report how it ended.

Upstream: pkg/virt-handler/migration-source.go and vm.go (handleMigrationState). Once the target handler published
where it listens, the source handler has its launcher send the domain there; it records the start, a failure, and
an abort the migration controller asked for. The target handler records success and takes the VMI over.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.api.quantity import Quantity
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCES
from pykubevirt.handler.certificates import MigrationTLSUnavailable, TLSSource, migration_context
from pykubevirt.handler.launcher_client import CommandFailed, LauncherClient, LauncherUnavailable
from pykubevirt.handler.live_migratable import shared_volumes
from pykubevirt.handler.migration_proxy import MigrationProxy, ProxySet, dial_tcp
from pykubevirt.handler.migration_target import BLOCK_MIGRATION_PORT_ROLE, DIRECT_PORT_ROLE, migration_state
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.handler.migration")


def leaving_by_migration(migration: Mapping[str, object] | None) -> bool:
    """A launcher's migration status says its domain is a migration's source that runs or has handed the guest over:
    libvirt shuts it off itself (Shutoff, Migrated) once the target confirms, so virt-handler waits for that instead of
    destroying it."""
    migration = migration or {}
    return migration.get("role") == "source" and migration.get("state") in ("Running", "Succeeded")


def migrate_request(vmi: Object, state: dict[str, Any]) -> dict[str, Any]:
    """KubeVirt's migration URIs: everything through the source handler's unix sockets, with the cluster's settings."""
    uid = vmi["metadata"]["uid"]
    config = state.get("migrationConfiguration") or {}
    request: dict[str, Any] = {
        "migrationUid": str(state.get("migrationUid", "")),
        "targetUri": f"qemu+unix:///system?socket={pod_layout.migration_socket(uid)}",
        "migrationUri": f"unix://{pod_layout.migration_socket(uid, DIRECT_PORT_ROLE)}",
        "blockMigration": (vmi.get("status") or {}).get("migrationMethod") == "BlockMigration",
    }
    if request["blockMigration"]:
        request["disksUri"] = f"unix://{pod_layout.migration_socket(uid, BLOCK_MIGRATION_PORT_ROLE)}"
    shared = shared_volumes(vmi)
    if shared:
        request["sharedVolumes"] = shared
    for field in ("completionTimeoutPerGiB", "progressTimeout", "allowAutoConverge", "allowPostCopy"):
        if field in config:
            request[field] = config[field]
    if config.get("unsafeMigrationOverride"):
        request["unsafe"] = True
    bandwidth = config.get("bandwidthPerMigration")
    if bandwidth:
        # libvirt takes MiB/s; KubeVirt converts the quantity the same way.
        request["bandwidthMiB"] = int(Quantity.parse(str(bandwidth)).value // (1024 * 1024))
    return request


def this_migration(reported: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The launcher's outgoing migration when it is the VMI's current one, else {}.

    A launcher that received the domain by migration reports that finished incoming one (role target, Succeeded); read
    as this migration's, a move back from that pod was taken for done before it started, and hung at TargetReady.
    KubeVirt's handler matches the migration's UID the same way."""
    if reported.get("role") != "source":
        return {}
    if reported.get("migrationUid") and reported["migrationUid"] != state.get("migrationUid"):
        return {}
    return reported


class OutgoingMigrations:
    """The source handler's migrations and their proxies."""

    def __init__(self, client: KubeClient, recorder: EventRecorder, tls: TLSSource = None) -> None:
        self.client = client
        self.recorder = recorder
        # The handler's certificates for the TCP leg to the target (None: it has none; only disableTLS works).
        self.tls = tls
        self._proxies: dict[str, ProxySet] = {}
        # VMI uid → the migration whose proxies are open.
        self._by_vmi: dict[str, str] = {}

    async def _open_proxies(self, vmi: Object, state: dict[str, Any], directory: str) -> None:
        """Listen where the source launcher's libvirt finds the migration sockets (`directory` on the host)."""
        uid, migration_uid = vmi["metadata"]["uid"], str(state["migrationUid"])
        if migration_uid in self._proxies:
            return
        context = migration_context(self.tls, state, server=False)
        proxies = self._proxies[migration_uid] = ProxySet()
        self._by_vmi[uid] = migration_uid
        address = str(state["targetNodeAddress"])
        for port, role in (state.get("targetDirectMigrationNodePorts") or {}).items():
            name = pod_layout.migration_socket(uid, int(role)).removeprefix(pod_layout.MIGRATION_PROXY_DIR)
            path = directory.rstrip("/") + name
            await proxies.add(
                MigrationProxy(
                    dial_tcp(address, int(port), context), path=path, shown=f"{address}:{port}", role=int(role)
                )
            )
        secured = "with TLS" if context is not None else "in plain TCP (disableTLS)"
        log.info("migration proxies dial %s %s", address, secured, extra=object_fields(vmi))

    async def _close_proxies(self, state: dict[str, Any]) -> None:
        proxies = self._proxies.pop(str(state.get("migrationUid")), None)
        if proxies is not None:
            await proxies.stop()

    async def forget(self, vmi_uid: str) -> None:
        """The VMI left this node (taken over by the target, or deleted): its sockets here are done with."""
        migration_uid = self._by_vmi.pop(vmi_uid, None)
        if migration_uid is not None:
            await self._close_proxies({"migrationUid": migration_uid})

    async def step(self, vmi: Object, launcher: LauncherClient) -> Result | None:
        """One step of an outgoing migration; None hands the VMI back to the ordinary sync (none under way)."""
        state = migration_state(vmi)
        if state.get("failed") or state.get("completed") or not state.get("targetNodeAddress"):
            await self._close_proxies(state)
            return None
        client, recorder = self.client, self.recorder
        try:
            status = await launcher.request("migrationstatus")
        except (LauncherUnavailable, CommandFailed):
            # A launcher that left after its domain migrated; the target handler finishes the job.
            return Result(requeue_after=1.0) if state.get("startTimestamp") else None
        outgoing = this_migration(status.get("migration") or {}, state)
        if not state.get("startTimestamp") and outgoing.get("state") not in ("Running", "Succeeded"):
            # Not started yet: a finished migration the launcher reports is an earlier one's. (One that runs is
            # this one, started by a sync that worked from a VMI without the start recorded yet.)
            try:
                directory = str(status.get("migrationProxyDir") or pod_layout.MIGRATION_PROXY_DIR)
                await self._open_proxies(vmi, state, directory)
                await launcher.request("migrate", migration=migrate_request(vmi, state))
            except (CommandFailed, MigrationTLSUnavailable) as exc:
                await self._close_proxies(state)
                await _patch(client, vmi, {"failed": True, "failureReason": str(exc), "endTimestamp": now_rfc3339()})
                recorder.event(
                    vmi,
                    WARNING,
                    "Migrated",
                    f"VirtualMachineInstance migration uid {state['migrationUid']} failed. reason:{exc}",
                )
                return None
            await _patch(client, vmi, {"startTimestamp": now_rfc3339(), "mode": "PreCopy"})
            recorder.event(vmi, NORMAL, "Migrating", "VirtualMachineInstance is migrating.")
            log.info("migration to %s started", state.get("targetNode"), extra=object_fields(vmi))
            return Result(requeue_after=0.5)
        if outgoing.get("state") == "Succeeded":
            # The domain left; the target handler takes the VMI over, and this node's sockets are done with.
            await self._close_proxies(state)
            return Result(requeue_after=1.0)
        if outgoing.get("state") == "Failed":
            changes = {
                "failed": True,
                "endTimestamp": outgoing.get("endTimestamp") or now_rfc3339(),
                "failureReason": outgoing.get("failureReason", ""),
            }
            if outgoing.get("abortStatus"):
                changes["abortStatus"] = outgoing["abortStatus"]
            await _patch(client, vmi, changes)
            await self._close_proxies(state)
            reason = outgoing.get("failureReason", "")
            recorder.event(
                vmi,
                WARNING,
                "Migrated",
                f"VirtualMachineInstance migration uid {state['migrationUid']} failed. reason:{reason}",
            )
            return None
        if outgoing.get("mode") == "PostCopy" and state.get("mode") != "PostCopy":
            await _patch(client, vmi, {"mode": "PostCopy"})
        if state.get("abortRequested") and outgoing.get("state") == "Running" and not outgoing.get("abortStatus"):
            try:
                await launcher.request("cancelmigration")
            except CommandFailed as exc:
                log.warning("could not abort the migration: %s", exc, extra=object_fields(vmi))
            await _patch(client, vmi, {"abortStatus": "Aborting"})
            recorder.event(vmi, NORMAL, "Migrating", "VirtualMachineInstance is aborting migration.")
        return Result(requeue_after=0.5)


async def _patch(client: KubeClient, vmi: Object, changes: dict[str, Any]) -> None:
    meta = vmi["metadata"]
    await client.patch(
        VIRTUAL_MACHINE_INSTANCES,
        meta["name"],
        {"status": {"migrationState": changes}},
        meta["namespace"],
    )
