"""virt-launcher: one VMI's domain, driven by virt-handler through the command socket.

It starts its own embedded libvirt, waits for `sync` with the VMI, prepares the disks, converts the VMI to domain
XML, defines and starts the domain, and reports every state change to watchers. SIGTERM marks a graceful shutdown
(virt-handler then asks the guest to power off); if the domain is still up `--grace-period-seconds` later, the
launcher destroys it itself, as KubeVirt's virt-launcher-monitor does. It exits once the domain is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from pykubevirt.api import pod_layout
from pykubevirt.launcher import (
    capabilities_cache,
    disks,
    domain_stats,
    interface_status,
    masquerade,
    migration_paths,
    migration_target,
    persistent_state,
    primary_network,
    secondary_bridge,
)
from pykubevirt.launcher.access_credentials import AccessCredentialManager
from pykubevirt.launcher.claim_volumes import prepare_claim_volumes
from pykubevirt.launcher.command_server import CommandServer
from pykubevirt.launcher.config_disks import ConfigDiskError, prepare_config_disks
from pykubevirt.launcher.converter import ConverterContext, convert
from pykubevirt.launcher.converter.disks import cloud_init_iso, cloud_init_source, empty_disk_path, ephemeral_overlay
from pykubevirt.launcher.disk_expansion import expand_disks
from pykubevirt.launcher.domain_commands import DomainCommands
from pykubevirt.launcher.domain_manager import DomainManager, embed_uri
from pykubevirt.launcher.domain_state import DomainState
from pykubevirt.launcher.embedded_libvirt_log import EmbeddedLibvirtLog, configure_embedded_log
from pykubevirt.launcher.guest_agent_commands import GuestAgentCommands
from pykubevirt.launcher.guest_agent_poller import GuestAgentPoller
from pykubevirt.launcher.guest_panic import GuestPanics
from pykubevirt.launcher.host_firmware import HostFirmware, detect
from pykubevirt.launcher.hotplug import sync_hotplug
from pykubevirt.launcher.kernel_boot import KernelBootError, link_kernel_artifacts
from pykubevirt.launcher.kvm_probe import cached_probe
from pykubevirt.launcher.libvirt_daemon import PrivateLibvirtd
from pykubevirt.launcher.libvirt_log import VERBOSITY_ENV, debug_log_filters
from pykubevirt.launcher.memory_dump import MemoryDumper
from pykubevirt.launcher.migration_commands import MigrationCommands
from pykubevirt.launcher.migration_source import MigrationSource, now
from pykubevirt.launcher.protocol import (
    NO_STATE,
    PROTOCOL_VERSION,
    UNKNOWN_REASON,
    Command,
    HotplugReply,
    MigrationStatus,
    PingReply,
    Request,
    Status,
    domain_name,
)
from pykubevirt.launcher.pvc_disks import PVCDiskError
from pykubevirt.launcher.qemu_log import QemuLogRelay, qemu_log_path

log = logging.getLogger("pykubevirt.launcher")

# How long a launcher whose domain stopped waits for virt-handler to collect the final state before exiting anyway.
ORPHAN_EXIT_SECONDS = 600.0
# How often the launcher looks at a pending deadline (grace period, orphan exit, qemu-timeout). With none pending it
# sleeps until an event: 1,000 idle launchers polling twice a second took a fifth of a core (a wakeup costs 0.1-0.2 ms
# of CPU on these VMs).
DEADLINE_POLL_SECONDS = 0.5
# Where KubeVirt's launcher pod mounts its HugePages emptyDir.
HUGEPAGES_DIR = "/dev/hugepages"


def _seconds(value: str) -> float:
    return float(value[:-1]) if value.endswith("s") else float(value)


class Launcher(DomainCommands, MigrationCommands, GuestAgentCommands):
    """The launcher's state: its VMI, its domain and who is watching."""

    def __init__(self, args: argparse.Namespace, mounts: dict[str, str]) -> None:
        self.args = args
        self.namespace = args.namespace
        self.name = args.name
        self.vmi_uid = args.uid
        self.mounts = mounts
        self.pod_uid = os.environ.get("POD_UID", "") or args.uid
        self.runtime = Path(pod_layout.short_runtime_dir(self.pod_uid))
        self.uri = args.libvirt_uri or ""
        # What libvirt logs beyond warnings and errors (KubeVirt's debug-log options): the embedded driver's and a
        # migration target's daemon's.
        self.libvirt_log_filters = debug_log_filters(
            args.libvirt_log_filters,
            os.environ.get(VERBOSITY_ENV),
            "LIBVIRT_DEBUG_LOGS" in os.environ,
        )
        self.domain: DomainManager | None = None
        self.vmi: dict[str, Any] | None = None
        self.marked_for_graceful_shutdown = False
        self.graceful_deadline: float | None = None
        self.use_emulation = True
        self.firmware = HostFirmware()
        self.last_state = DomainState(NO_STATE, UNKNOWN_REASON)
        self.defined = False
        self.deleted = asyncio.Event()
        # Set on what can start a deadline (a state event, SIGTERM): wakes the supervising loop.
        self._wake = asyncio.Event()
        self.stopped_at: float | None = None
        # KubeVirt's qemu-timeout: a launcher whose guest never started gives up, so its pod (and VMI) fail.
        self.started_at = time.monotonic()
        self.ever_alive = False
        self.exit_code = 0
        self._warm_up: asyncio.Task[None] | None = None
        self.memory_dumper = MemoryDumper()
        # The pod network's plumbing (its DHCP server, the pod IPs status reports) and the domain's NICs.
        self.network = primary_network.PrimaryNetwork()
        self.secondary = secondary_bridge.SecondaryNetworks()
        self.network_fallback = ""
        self.domain_interfaces: list[interface_status.DomainInterface] | None = None
        # Live migration: the outgoing job (source), or this pod's private daemon and what it prepared (target).
        self.outgoing: MigrationSource | None = None
        self.daemon: PrivateLibvirtd | None = None
        # A migration target's daemon, started with the launcher (see `_start_early_daemon`).
        self.early_daemon: PrivateLibvirtd | None = None
        self.early_daemon_task: asyncio.Task[None] | None = None
        # QEMU's own log, relayed into this one (the embedded libvirt's, or a migration target's daemon's).
        self.qemu_log: QemuLogRelay | None = None
        self.panics = GuestPanics()
        self.incoming: MigrationStatus | None = None
        # The guest agent poller and the qemuGuestAgent credential propagation, once the domain runs.
        self.agent: GuestAgentPoller | None = None
        self.credentials: AccessCredentialManager | None = None
        self.safety_thaw: asyncio.Task[None] | None = None
        self.server = CommandServer(
            self.runtime / pod_layout.LAUNCHER_SOCKET_NAME,
            {
                Command.PING: self._ping,
                Command.STATUS: self._status_command,
                Command.SYNC: self._sync,
                Command.SHUTDOWN: self._shutdown,
                Command.KILL: self._kill,
                Command.PAUSE: self._pause,
                Command.UNPAUSE: self._unpause,
                Command.SOFT_REBOOT: self._softreboot,
                Command.RESET: self._reset,
                Command.FREEZE: self._freeze,
                Command.UNFREEZE: self._unfreeze,
                Command.SCREENSHOT: self._screenshot,
                Command.DELETE: self._delete,
                Command.HOTPLUG: self._hotplug,
                Command.PREPARE_MIGRATION_TARGET: self._prepare_migration_target,
                Command.MIGRATE: self._migrate,
                Command.CANCEL_MIGRATION: self._cancel_migration,
                Command.MIGRATION_STATUS: self._migration_status,
                Command.SYNC_VCPUS: self._sync_resources,
                Command.SYNC_MEMORY: self._sync_resources,
                Command.GUEST_INFO: self._guest_info,
                Command.USER_LIST: self._user_list,
                Command.FILESYSTEM_LIST: self._filesystem_list,
                Command.DOMAIN_STATS: lambda request: domain_stats.answer(self.domain, request, self._outgoing_job()),
            },
            self.status,
        )

    # ------------------------------------------------------------------------------------------------ paths

    def host(self, path: str) -> Path:
        return Path(pod_layout.host_path(path, self.mounts))

    def _link(self, target: Path, link: Path) -> None:
        """Expose a short-path file or dir at its pod-volume location (how virt-handler finds it)."""
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_symlink() and os.readlink(link) == str(target):
                return
            if link.is_dir() and not link.is_symlink():
                shutil.rmtree(link)
            else:
                link.unlink()
        link.symlink_to(target)

    def converter_context(self, container_disks: dict[str, tuple[str, str]], direct_io: bool) -> ConverterContext:
        return ConverterContext(
            use_emulation=self.use_emulation,
            private_dir=str(self.runtime / "private"),
            ephemeral_disk_dir=str(self.host(pod_layout.EPHEMERAL_DISK_DIR)),
            container_disk_dir=str(self.host(pod_layout.CONTAINER_DISK_DIR)),
            libvirt_runtime_dir=str(self.host(pod_layout.LIBVIRT_RUNTIME_DIR)),
            container_disks=container_disks,
            direct_io=direct_io,
            network_mode="user",
            efi_code=self.firmware.efi_code,
            efi_vars=self.firmware.efi_vars,
            efi_secure_code=self.firmware.efi_secure_code,
            efi_secure_vars=self.firmware.efi_secure_vars,
            tpm_emulator=self.firmware.tpm_emulator,
            pinned_cpus=self._pinned_cpus(),
            # Persistent EFI: the vars file on the backend-storage claim, reused by the next launcher.
            nvram_dir=persistent_state.nvram_dir(self.mounts),
        )

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.runtime.mkdir(parents=True, exist_ok=True)
        (self.runtime / "private" / self.vmi_uid).mkdir(parents=True, exist_ok=True)
        self._link(self.runtime / "private" / self.vmi_uid, self.host(f"{pod_layout.PRIVATE_DIR}/{self.vmi_uid}"))
        reason = "KVM required"
        if self.args.allow_emulation:
            result = await asyncio.to_thread(cached_probe)
            self.use_emulation = not result.usable
            reason = result.reason or reason
        else:
            self.use_emulation = False
        kind = "TCG" if self.use_emulation else "KVM"
        self.firmware = await asyncio.to_thread(detect, Path(self.args.ovmf_path))
        log.info("launcher for %s/%s uses %s (%s)", self.namespace, self.name, kind, reason)
        # A migration target's domain arrives in the private daemon `preparemigrationtarget` starts.
        libvirt_logs: Path | None = None
        if not self.args.migration_target:
            root = Path(pod_layout.embed_root(self.pod_uid))
            if not self.uri:
                capabilities_cache.seed(root)
                persistent_state.link_swtpm_storage(root, self.mounts)
                libvirt_logs = root / "log"
            await self._connect(self.uri or embed_uri(root, self._hugetlbfs()))
            if not self.uri:
                self._warm_up = asyncio.get_running_loop().create_task(self._warm_capabilities(root))
        else:
            libvirt_logs = self._start_early_daemon()
        if libvirt_logs is not None:
            self.qemu_log = QemuLogRelay(qemu_log_path(libvirt_logs, domain_name(self.namespace, self.name)))
            self.qemu_log.start()
        # Only now does virt-handler see the socket: every command it sends can be served.
        await self.server.start()
        self._link(
            self.runtime / pod_layout.LAUNCHER_SOCKET_NAME,
            self.host(f"{pod_layout.SOCKETS_DIR}/{pod_layout.LAUNCHER_SOCKET_NAME}"),
        )
        log.info("launcher serving on %s", self.runtime / pod_layout.LAUNCHER_SOCKET_NAME)

    async def _connect(self, uri: str) -> None:
        self.domain = DomainManager(uri, domain_name(self.namespace, self.name))
        await self.domain.connect()
        self.domain.add_listener(self._on_state)
        self.domain.add_crash_listener(self._on_crash)
        self.last_state = await self.domain.state()
        self.defined = await self.domain.exists()

    async def _warm_capabilities(self, root: Path) -> None:
        assert self.domain is not None
        started = time.monotonic()
        try:
            await self.domain.warm_up()
        except Exception as exc:  # the domain's own start reports any real problem
            log.warning("could not load QEMU's capabilities ahead of the VMI: %s", exc)
            return
        published = await asyncio.to_thread(capabilities_cache.publish, root)
        log.info("QEMU capabilities ready in %.2fs%s", time.monotonic() - started, " (shared)" if published else "")

    def _on_crash(self, detail: int) -> None:
        if self.panics.record(detail, self.qemu_log.catch_up() if self.qemu_log is not None else None):
            log.info("Guest panic detected: %s", self.panics.status()["message"])

    def _on_state(self, state: DomainState, event: str) -> None:
        self.last_state = state
        if self.incoming is not None and self.incoming.get("state") == "TargetReady" and state.state == "Running":
            # The migrated domain runs here now: from here on this is the VMI's launcher.
            self.defined = True
            self.incoming.update({"state": "Succeeded", "completed": True, "targetNodeDomainReadyTimestamp": now()})
            if self.daemon is not None:
                self.daemon.publish_capabilities()
        if state.alive:
            self.ever_alive = True
            self.stopped_at = None
        elif self.stopped_at is None and self.defined:
            self.stopped_at = time.monotonic()
        self._wake.set()
        self.server.publish(self.status(event=event))

    def status(self, event: str = "") -> Status:
        status: Status = {
            "protocolVersion": PROTOCOL_VERSION,
            "domain": self.last_state.to_status(defined=self.defined, name=self.domain.name if self.domain else ""),
            "vmiUid": self.vmi_uid,
            "markedForGracefulShutdown": self.marked_for_graceful_shutdown,
            "emulation": self.use_emulation,
            "pid": os.getpid(),
        }
        if event:
            status["event"] = event
        if self.network_fallback:
            status["networkFallback"] = self.network_fallback
        if self.panics.count:
            status["guestPanic"] = self.panics.status()
        if self.vmi is not None and self.defined:
            status["interfaces"] = self._interfaces()
        status["migrationProxyDir"] = (
            str(migration_target.proxy_dir(self.runtime)) if self.daemon is not None else pod_layout.MIGRATION_PROXY_DIR
        )
        migration = self.outgoing.status if self.outgoing is not None else self.incoming
        if migration is not None:
            status["migration"] = dict(migration)  # type: ignore[typeddict-item]
        if self.agent is not None and self.defined:
            agent = self.agent.status_fields()
            # A guest that is not up has no agent, whatever the last channel event said.
            agent["connected"] = agent["connected"] and self.last_state.alive
            status["guestAgent"] = agent
        if self.credentials is not None and self.credentials.result is not None:
            status["accessCredential"] = self.credentials.result.to_status()
        if self.domain is not None and self.domain.current_memory is not None and self.defined:
            status["currentMemory"] = self.domain.current_memory
        return status

    def _interfaces(self) -> list[dict[str, Any]]:
        """KubeVirt's join of the pod-interface cache, the domain's NICs and the guest agent's (netstat.go)."""
        guest = self.agent.guest_interfaces() if self.agent is not None and self.last_state.alive else []
        return interface_status.interface_statuses(
            self.vmi or {}, self.domain_interfaces or [], self.network.pod_ips, guest
        )

    async def _plumb_secondary(self, vmi: dict[str, Any]) -> None:
        """The bridge-bound Multus interfaces (their DHCP servers again when a previous launcher plumbed them)."""
        self.secondary.close()
        self.secondary = await secondary_bridge.plumb(vmi, primary_network.hostname(vmi, self.name), self.runtime)
        self.network.pod_ips.update(self.secondary.pod_ips)

    async def _read_network(self, vmi: dict[str, Any]) -> None:
        """The domain's NICs; for a domain a previous launcher of this pod started, its network's DHCP server again
        (the plumbing stays, as KubeVirt's launcher starts DHCP on every start) and the pod IPs it recorded."""
        assert self.domain is not None
        with contextlib.suppress(Exception):  # a domain that is gone has no NICs to report
            self.domain_interfaces = interface_status.domain_interfaces(await self.domain.xml())
        if self.network.pod_ips:
            return
        try:
            self.network = await primary_network.plumb(vmi, self.name, self.runtime)
            self.network_fallback = self.network.fallback
            await self._plumb_secondary(vmi)
        except (masquerade.PlumbingError, OSError) as exc:
            log.warning("the guest's network plumbing could not be resumed: %s", exc)
            self.network.pod_ips = primary_network.recorded_pod_ips(vmi, self.runtime)
            self.network.pod_ips.update(secondary_bridge.recorded_pod_ips(vmi, self.runtime))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self._on_sigterm)
        await self.start()
        try:
            while not self.deleted.is_set():
                self._wake.clear()
                if self._deadline_pending():
                    # Polled, not woken by the event that ends the guest: the launcher lingers up to a poll after it,
                    # so the final state reaches its watchers and virt-handler can still ask before the socket goes.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.deleted.wait(), DEADLINE_POLL_SECONDS)
                else:
                    await self._wait_for_change()
                if self.deleted.is_set():
                    break
                if self.marked_for_graceful_shutdown and self.graceful_deadline is not None:
                    if time.monotonic() >= self.graceful_deadline and self.last_state.alive:
                        log.warning("grace period over; destroying the domain")
                        assert self.domain is not None
                        await self.domain.destroy()
                    if not self.last_state.alive:
                        # The pod is going away and the guest is down: nothing is left to do here.
                        break
                if self.stopped_at is not None and time.monotonic() - self.stopped_at > ORPHAN_EXIT_SECONDS:
                    log.warning("domain stopped and nobody collected it; exiting")
                    break
                if self._qemu_timed_out():
                    log.error("timed out waiting for the domain to start (qemu-timeout %s)", self.args.qemu_timeout)
                    self.exit_code = 1
                    break
        finally:
            if self.agent is not None:
                await self.agent.stop()
            if self.credentials is not None:
                await self.credentials.stop()
            await self.server.stop()
            if self.domain is not None:
                await self.domain.close()
            if self.daemon is not None:
                await self.daemon.stop()
            await self._stop_early_daemon()
            if self.qemu_log is not None:
                self.qemu_log.stop()
            if not self.last_state.alive:
                # The short runtime dir holds only sockets and libvirt state of a guest that is gone.
                shutil.rmtree(self.runtime, ignore_errors=True)

    def _pinned_cpus(self) -> tuple[int, ...]:
        """The CPUs this process may run on when they are fewer than the host's: the CPU manager's exclusive set."""
        mine = os.sched_getaffinity(0)
        return tuple(sorted(mine)) if len(mine) < (os.cpu_count() or 1) else ()

    def _hugetlbfs(self) -> str:
        """The host path of the pod's /dev/hugepages volume (a hugetlbfs mount), or "" when the pod has none."""
        return str(self.host(HUGEPAGES_DIR)) if HUGEPAGES_DIR in self.mounts else ""

    def _deadline_pending(self) -> bool:
        """A grace period, a stopped domain's orphan exit or the qemu-timeout runs: `run` must look again."""
        return (
            self.marked_for_graceful_shutdown
            or self.stopped_at is not None
            or not (self.ever_alive or self.last_state.alive)
        )

    async def _wait_for_change(self) -> None:
        """Until the launcher is deleted or something that can start a deadline wakes it."""
        waits = [asyncio.ensure_future(self.deleted.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    def _qemu_timed_out(self) -> bool:
        """No guest ever ran within --qemu-timeout of the launcher's start (virt-launcher's process monitor)."""
        if self.ever_alive or self.last_state.alive or self.marked_for_graceful_shutdown:
            self.ever_alive = self.ever_alive or self.last_state.alive
            return False
        return time.monotonic() - self.started_at > _seconds(self.args.qemu_timeout)

    def _on_sigterm(self) -> None:
        if self.marked_for_graceful_shutdown:
            return
        self.marked_for_graceful_shutdown = True
        self.graceful_deadline = time.monotonic() + float(self.args.grace_period_seconds)
        log.info("SIGTERM: graceful shutdown requested (grace %ss)", self.args.grace_period_seconds)
        if not self.defined:
            self.deleted.set()
        self._wake.set()
        self.server.publish(self.status(event="GracefulShutdownRequested"))

    # ------------------------------------------------------------------------------------------------ commands

    async def _ping(self, request: Request) -> PingReply:
        return {"protocolVersion": PROTOCOL_VERSION, "pid": os.getpid()}

    async def _status_command(self, request: Request) -> Status:
        return await self._refreshed_status()

    async def _refreshed_status(self) -> Status:
        """The status after reading the domain's state again (commands that change it answer with this)."""
        if self.domain is None:
            return self.status()
        self.last_state = await self.domain.state()
        return self.status()

    async def _sync(self, request: Request) -> Status:
        """Define and start the domain for the VMI, once; later syncs refresh the VMI and grow grown claims."""
        if self.domain is None:
            raise RuntimeError("this launcher is a migration target; it receives its domain, it starts none")
        vmi = request.get("vmi")
        if not isinstance(vmi, dict) or (vmi.get("metadata") or {}).get("uid") != self.vmi_uid:
            raise ValueError("sync needs this launcher's VMI")
        self.vmi = vmi
        if self.marked_for_graceful_shutdown:
            raise RuntimeError("the launcher is shutting down; it starts no domain")
        if not await self.domain.exists():
            xml = await self._prepare(vmi)
            paused = (vmi.get("spec") or {}).get("startStrategy") == "Paused"
            await self.domain.define_and_start(xml, paused=paused)
            self.defined = True
            self.ever_alive = True
            log.info("domain defined and started%s", " paused" if paused else "")
        elif self.defined:
            # A later sync of the running guest: claims that grew are resized under it (KubeVirt's SyncVMI).
            for error in await expand_disks(self.domain, vmi):
                log.warning("%s", error)
        if self.domain_interfaces is None:
            await self._read_network(vmi)
        self._start_guest_agent(vmi)
        return await self._refreshed_status()

    async def _prepare(self, vmi: dict[str, Any]) -> str:
        spec = vmi.get("spec") or {}
        ephemeral = self.host(pod_layout.EPHEMERAL_DISK_DIR)
        container_dir = self.host(pod_layout.CONTAINER_DISK_DIR)
        direct_io = disks.direct_io_supported(ephemeral)
        ctx = self.converter_context({}, direct_io)
        # libvirt copies an EFI guest's vars template here but does not create the directory (KubeVirt's launcher does).
        Path(ctx.nvram_path).mkdir(parents=True, exist_ok=True)
        container_disks: dict[str, tuple[str, str]] = {}
        for index, volume in enumerate(spec.get("volumes") or []):
            name = volume["name"]
            cloud_init = cloud_init_source(volume)
            if volume.get("containerDisk") is not None:
                source = disks.container_disk_source(container_dir, index)
                overlay = Path(ephemeral_overlay(name, ctx))
                shown = f"{pod_layout.CONTAINER_DISK_DIR}/{source.name}"
                container_disks[name] = await disks.prepare_container_disk(source, overlay, shown)
            elif volume.get("emptyDisk") is not None:
                target = Path(empty_disk_path(name, ctx))
                await disks.prepare_empty_disk(target, str(volume["emptyDisk"].get("capacity", "0")))
            elif cloud_init is not None:
                target = Path(cloud_init_iso(vmi, cloud_init, ctx))
                await disks.prepare_cloud_init(vmi, cloud_init, target, self._secrets(volume))
        try:
            await prepare_config_disks(vmi, self.host, Path(ctx.private_dir))
            link_kernel_artifacts(vmi, container_dir)
            claims = await prepare_claim_volumes(vmi, self.host, self.runtime)
        except (PVCDiskError, KernelBootError, ConfigDiskError) as exc:
            raise disks.DiskError(str(exc)) from exc
        ctx = replace(
            ctx,
            container_disks=container_disks,
            pvc_disk_dir=claims.pvc_disk_dir,
            block_device_dir=claims.block_device_dir,
            block_volumes=frozenset(claims.block_volumes),
        )
        for name in sorted(claims.ephemeral):
            base = Path(claims.pvc_disk_dir) / name / "disk.img"
            await disks.prepare_container_disk(base, Path(ephemeral_overlay(name, ctx)), str(base))
        self.network = await primary_network.plumb(vmi, self.name, self.runtime)
        self.network_fallback = self.network.fallback
        await self._plumb_secondary(vmi)
        ctx = replace(
            ctx,
            network_mode=self.network.mode,
            interface_macs={**self.network.macs, **self.secondary.macs},
            interface_mtus={**self.network.mtus, **self.secondary.mtus},
        )
        xml = migration_paths.annotate(convert(vmi, ctx), migration_paths.of_context(ctx))
        (self.runtime / "domain.xml").write_text(xml)
        return xml

    async def _hotplug(self, request: Request) -> HotplugReply:
        """Bring the running domain's hotplugged disks in line with the VMI and the claims virt-handler mounted."""
        assert self.domain is not None
        vmi = request.get("vmi")
        if not isinstance(vmi, dict) or (vmi.get("metadata") or {}).get("uid") != self.vmi_uid:
            raise ValueError("hotplug needs this launcher's VMI")
        if not self.defined:
            raise RuntimeError("the domain is not running; nothing can be hotplugged")
        self.vmi = vmi
        ctx = self.converter_context({}, True)
        mounts = request.get("hotplug") or {}
        result = await sync_hotplug(self.domain, vmi, mounts, self.runtime, ctx, self.memory_dumper)
        status = await self._refreshed_status()
        reply = cast(
            HotplugReply, {**status, "mounted": result.mounted, "attached": result.attached, "errors": result.errors}
        )
        if self.memory_dumper.result:
            reply["memoryDump"] = dict(self.memory_dumper.result)
        return reply

    def _secrets(self, volume: dict[str, Any]) -> dict[str, dict[str, bytes]]:
        """Secrets referenced by cloud-init, from the files the runtime mounted for them (if any)."""
        found: dict[str, dict[str, bytes]] = {}
        source = volume.get("cloudInitNoCloud") or volume.get("cloudInitConfigDrive") or {}
        for ref_field in ("secretRef", "networkDataSecretRef"):
            name = (source.get(ref_field) or {}).get("name")
            if not name:
                continue
            directory = self.host(f"{pod_layout.PRIVATE_DIR}/secret/{volume['name']}/{ref_field.lower()}")
            if directory.is_dir():
                found[name] = {f.name: f.read_bytes() for f in directory.iterdir() if f.is_file()}
        return found


def run(args: argparse.Namespace) -> int:
    from pykubevirt import log as logs

    logs.configure("virt-launcher")
    if args.simulate_crash:
        log.error("simulating a crash, as requested")
        return 1
    libvirt_log = EmbeddedLibvirtLog()
    libvirt_log.start()
    try:
        launcher = Launcher(args, pod_layout.mounts_from_env(os.environ))
        configure_embedded_log(launcher.libvirt_log_filters)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(launcher.run())
    finally:
        libvirt_log.stop()
    return launcher.exit_code
