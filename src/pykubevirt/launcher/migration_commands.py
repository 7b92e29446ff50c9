"""The launcher's live-migration commands: prepare a target, migrate, cancel, and report the job.

KubeVirt's SyncMigrationTarget, MigrateVMI and CancelVirtualMachineMigration, as a part of the launcher.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import libvirt

from pykubevirt.api.quantity import Quantity
from pykubevirt.launcher import migration_paths, migration_target
from pykubevirt.launcher.command_server import CommandServer
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.domain_state import DomainState
from pykubevirt.launcher.libvirt_daemon import LibvirtdError, PrivateLibvirtd
from pykubevirt.launcher.migration_source import MigrationSource, progress
from pykubevirt.launcher.protocol import MigrationStatus, Request, Status

log = logging.getLogger("pykubevirt.launcher")

# How long a source launcher stays after its domain migrated away, so virt-handler reads the outcome.
MIGRATED_EXIT_SECONDS = 3.0


class MigrationCommands:
    """The migration half of the launcher; `Launcher` supplies the state and the methods declared here."""

    args: argparse.Namespace
    vmi_uid: str
    runtime: Path
    vmi: dict[str, Any] | None
    domain: DomainManager | None
    defined: bool
    last_state: DomainState
    deleted: asyncio.Event
    server: CommandServer
    outgoing: MigrationSource | None
    daemon: PrivateLibvirtd | None
    early_daemon: PrivateLibvirtd | None
    early_daemon_task: asyncio.Task[None] | None
    incoming: MigrationStatus | None
    libvirt_log_filters: str | None

    def status(self, event: str = "") -> Status:
        raise NotImplementedError

    async def _connect(self, uri: str) -> None:
        raise NotImplementedError

    async def _prepare(self, vmi: dict[str, Any]) -> str:
        raise NotImplementedError

    async def _refreshed_status(self) -> Status:
        raise NotImplementedError

    async def _prepare_migration_target(self, request: Request) -> Status:
        """Start this pod's private libvirtd and prepare the VMI's disks for the incoming domain.

        KubeVirt's SyncMigrationTarget."""
        vmi = request.get("vmi")
        if not isinstance(vmi, dict) or (vmi.get("metadata") or {}).get("uid") != self.vmi_uid:
            raise ValueError("preparemigrationtarget needs this launcher's VMI")
        if not self.args.migration_target:
            raise RuntimeError("this launcher runs its VMI's domain; only a migration target's launcher receives one")
        if self.incoming is not None:
            return self.status()
        self.vmi = vmi
        address = (request.get("migration") or {}).get("listenAddress", "")
        self.daemon = await self._target_daemon(
            migration_target.daemon(self.runtime, address, self.libvirt_log_filters)
        )
        await self._connect(self.daemon.uri)
        xml = await self._prepare(vmi)
        await asyncio.to_thread(migration_target.record_paths, self.runtime, migration_paths.recorded(xml))
        self.incoming = {
            "role": "target",
            "state": "TargetReady",
            "libvirtSocket": str(self.daemon.socket),
            "migrationAddress": address or "127.0.0.1",
            "disksPort": migration_target.free_port(address),
            "proxyDir": str(migration_target.proxy_dir(self.runtime)),
        }
        log.info("migration target ready: libvirt at %s, streams on %s", self.daemon.socket, address or "any address")
        return self.status()

    def _start_early_daemon(self) -> Path:
        """A migration target's launcher starts its daemon at once, in the background: by the time virt-handler asks
        it to prepare (after the pod is seen running and the VMI handed over), the daemon is up. Returns the daemon's
        libvirt log directory, which a daemon that replaces it uses too.

        It binds no particular address; `preparemigrationtarget` replaces it when the node's address needs one."""
        self.early_daemon = migration_target.daemon(self.runtime, "", self.libvirt_log_filters)
        self.early_daemon_task = asyncio.get_running_loop().create_task(self.early_daemon.start())
        return self.early_daemon.log_dir

    async def _target_daemon(self, wanted: PrivateLibvirtd) -> PrivateLibvirtd:
        """The early daemon when it came up as `wanted` would be configured, else `wanted`, started now."""
        early, task = self.early_daemon, self.early_daemon_task
        self.early_daemon = self.early_daemon_task = None
        if early is not None and task is not None:
            try:
                await task
            except LibvirtdError as exc:
                log.warning("the migration target's early libvirtd failed: %s", exc)
            else:
                if early.migration_address == wanted.migration_address:
                    return early
            await early.stop()
        await wanted.start()
        return wanted

    async def _stop_early_daemon(self) -> None:
        """A daemon started early that no migration used goes with the launcher."""
        early, task = self.early_daemon, self.early_daemon_task
        self.early_daemon = self.early_daemon_task = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, LibvirtdError):
                await task
        if early is not None:
            await early.stop()

    async def _migrate(self, request: Request) -> Status:
        """Send the running domain to a prepared target (MigrateVMI); the job runs on, `status` tells how it goes."""
        assert self.domain is not None
        migration = request.get("migration") or {}
        if not migration.get("targetUri"):
            raise ValueError("migrate needs the target's libvirt URI")
        if not self.defined or not self.last_state.alive:
            raise RuntimeError("the domain is not running; there is nothing to migrate")
        if self.outgoing is not None and not self.outgoing.done:
            raise RuntimeError("a migration of this domain is already under way")
        handle = await asyncio.to_thread(self.domain.lookup)
        self.outgoing = MigrationSource(handle, migration, self._migration_data_gib(), self._on_migration_update)
        self.outgoing.start()
        self.server.publish(self.status(event="MigrationStarted"))
        return self.status()

    def _migration_data_gib(self) -> float:
        """KubeVirt's getVMIMigrationDataSize, memory part: the guest memory (else its request) in GiB."""
        domain = ((self.vmi or {}).get("spec") or {}).get("domain") or {}
        memory = (domain.get("memory") or {}).get("guest") or ((domain.get("resources") or {}).get("requests") or {})
        text = memory if isinstance(memory, str) else memory.get("memory", "0") if isinstance(memory, dict) else "0"
        return float(Quantity.parse(str(text)).value) / 1024**3

    def _on_migration_update(self) -> None:
        if self.outgoing is not None and self.outgoing.status.get("completed"):
            # libvirt undefined the domain here (UNDEFINE_SOURCE); the pod's work is done.
            self.defined = False
            self.last_state = DomainState("Shutoff", "Migrated")
            asyncio.get_running_loop().call_later(MIGRATED_EXIT_SECONDS, self.deleted.set)
        self.server.publish(self.status(event="Migration"))

    def _outgoing_job(self) -> dict[str, int]:
        """The running outgoing migration's job statistics (the monitor's last poll), empty when none runs."""
        if self.outgoing is None or self.outgoing.done:
            return {}
        return dict(self.outgoing.job)

    async def _cancel_migration(self, request: Request) -> Status:
        """Abort the outgoing migration (CancelVirtualMachineMigration); the guest stays here."""
        if self.outgoing is None or self.outgoing.done:
            raise RuntimeError("no migration of this domain is under way")
        await self.outgoing.abort()
        return self.status()

    async def _migration_status(self, request: Request) -> Status:
        """The status with the migration job's statistics read now (libvirt's jobInfo)."""
        if self.outgoing is not None and not self.outgoing.done:
            try:
                stats = await asyncio.to_thread(self.outgoing.domain.jobStats, 0)
            except libvirt.libvirtError:
                stats = {}  # the job ended (the domain may have left) between the check and the read
            if stats:
                self.outgoing.status["progress"] = progress(stats)
        return await self._refreshed_status()
