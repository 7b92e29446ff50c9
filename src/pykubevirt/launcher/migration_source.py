"""The source side of a live migration: libvirt's `migrateToURI3` and KubeVirt's migration monitor.

KubeVirt's `live-migration-source.go`: peer-to-peer, live, persistent on the destination, an incremental block copy
of the local disks for a block migration; a monitor polls the job every 400 ms and aborts a migration that makes no
progress for `progressTimeout` seconds or runs past `completionTimeoutPerGiB` × the data to move.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree

import libvirt

from pykubevirt.launcher.protocol import MigrationRequest, MigrationStatus

log = logging.getLogger("pykubevirt.launcher.migration")

MONITOR_INTERVAL_SECONDS = 0.4
ABORTED_REASON = "Live migration has been aborted"
# The monitor's verdict when an overdue migration may switch to post-copy instead of being aborted.
START_POST_COPY = "start post-copy"
# Defaults of KubeVirt's MigrationConfiguration (pkg/virt-config).
DEFAULT_PROGRESS_TIMEOUT = 150
DEFAULT_COMPLETION_TIMEOUT_PER_GIB = 150
ABORT_JOB_WAIT_SECONDS = 10.0
ABORT_RETRY_SECONDS = 0.05
# The job statistics the `domainstats` reply carries while the job runs, for virt-handler's migration metrics
# (KubeVirt's stats.DomainJobInfo: data total, processed and remaining, memory bandwidth, dirty rate in pages/s and
# the page size that makes it bytes/s).
JOB_STATS_KEYS = (
    "data_total",
    "data_processed",
    "data_remaining",
    "memory_bps",
    "memory_dirty_rate",
    "memory_page_size",
)


def now() -> str:
    """A metav1.Time as KubeVirt writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def flags(request: MigrationRequest, *, paused: bool) -> int:
    """KubeVirt's generateMigrationFlags, plus undefining the source: the launcher pod is gone after a migration."""
    value: int = (
        libvirt.VIR_MIGRATE_LIVE
        | libvirt.VIR_MIGRATE_PEER2PEER
        | libvirt.VIR_MIGRATE_PERSIST_DEST
        | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
    )
    if request.get("blockMigration"):
        value |= libvirt.VIR_MIGRATE_NON_SHARED_INC
    # Shared volumes stay where they are: the embedded cluster's ReadWriteMany storage is one host directory every
    # node mounts, which libvirt, seeing a local filesystem, would call "Migration without shared storage".
    if request.get("unsafe") or request.get("sharedVolumes"):
        value |= libvirt.VIR_MIGRATE_UNSAFE
    if request.get("allowAutoConverge"):
        value |= libvirt.VIR_MIGRATE_AUTO_CONVERGE
    if request.get("allowPostCopy"):
        value |= libvirt.VIR_MIGRATE_POSTCOPY
    if paused:
        value |= libvirt.VIR_MIGRATE_PAUSED
    return value


def local_disks(xml: str, shared: frozenset[str] = frozenset()) -> list[str]:
    """Target devs of the writable file and block disks a block migration copies (not CD-ROMs, not shared ones)."""
    devices = []
    for disk in ElementTree.fromstring(xml).findall("devices/disk"):
        target = disk.find("target")
        source = disk.find("source")
        if target is None or source is None or disk.get("device") in ("cdrom", "floppy"):
            continue
        if disk.find("readonly") is not None or disk.find("shareable") is not None:
            continue
        if not (source.get("file") or source.get("dev")):
            continue
        alias = disk.find("alias")
        name = (alias.get("name") or "").removeprefix("ua-") if alias is not None else ""
        if name in shared:
            continue
        devices.append(str(target.get("dev")))
    return devices


def params(request: MigrationRequest, name: str, disks: list[str]) -> dict[str, Any]:
    """migrateToURI3's typed parameters (KubeVirt's migrateHelper)."""
    values: dict[str, Any] = {libvirt.VIR_MIGRATE_PARAM_DEST_NAME: name}
    if request.get("migrationUri"):
        values[libvirt.VIR_MIGRATE_PARAM_URI] = request["migrationUri"]
    bandwidth = int(request.get("bandwidthMiB") or 0)
    if bandwidth > 0:
        values[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = bandwidth
    if request.get("blockMigration") and disks:
        values[libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] = disks
        if request.get("disksUri"):
            values[libvirt.VIR_MIGRATE_PARAM_DISKS_URI] = request["disksUri"]
    return values


@dataclass
class MonitorState:
    """What the monitor remembers between polls (KubeVirt's migrationMonitor)."""

    started: float
    acceptable_seconds: float
    progress_timeout: float
    last_remaining: int = -1
    last_progress: float = 0.0
    post_copy: bool = False
    stats: dict[str, Any] = field(default_factory=dict)

    def verdict(self, stats: dict[str, Any], at: float, *, post_copy_allowed: bool = False) -> str:
        """An abort reason, START_POST_COPY, or "" while the migration may go on (KubeVirt's order of checks)."""
        self.stats = stats
        remaining = int(stats.get("data_remaining", -1))
        if self.last_remaining < 0 or 0 <= remaining < self.last_remaining:
            self.last_remaining = remaining
            self.last_progress = at
        if self.post_copy:
            # The guest already runs on the target: aborting now would lose its state.
            return ""
        overdue = at - self.started > self.acceptable_seconds
        if overdue and post_copy_allowed:
            return START_POST_COPY
        if at - self.last_progress > self.progress_timeout:
            return f"Live migration stuck for {int(at - self.last_progress)} seconds and has been aborted"
        if overdue:
            return f"Live migration is not completed after {int(at - self.started)} seconds and has been aborted"
        return ""


class MigrationSource:
    """One outgoing migration of the launcher's domain; `status` is what the launcher reports."""

    def __init__(self, domain: Any, request: MigrationRequest, data_gib: float, publish: Callable[[], None]) -> None:
        self.domain = domain
        self.request = request
        self.data_gib = max(data_gib, 1.0 / 1024)
        self.publish = publish
        self.status: MigrationStatus = {
            "role": "source",
            "migrationUid": request.get("migrationUid", ""),
            "state": "Running",
            "startTimestamp": now(),
        }
        self.task: asyncio.Task[None] | None = None
        self._abort_reason = ""
        # Set before libvirt's job exists: the migration thread checks it instead of starting the copy.
        self._abort_requested = threading.Event()
        # The monitor's last poll of the running job (JOB_STATS_KEYS), empty once it ended: KubeVirt's
        # domainInfoStats, which its launcher adds to the domain stats it hands virt-handler.
        self.job: dict[str, int] = {}

    @property
    def done(self) -> bool:
        return self.status["state"] in ("Succeeded", "Failed")

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        monitor = asyncio.get_running_loop().create_task(self._monitor())
        try:
            await asyncio.to_thread(self._migrate)
        except libvirt.libvirtError as exc:
            reason = self._abort_reason or (ABORTED_REASON if "abortStatus" in self.status else str(exc))
            log.warning("migration failed: %s", exc)
            self.status.update({"state": "Failed", "failed": True, "failureReason": reason, "endTimestamp": now()})
            if self.status.get("abortStatus") == "Aborting":
                self.status["abortStatus"] = "Succeeded"
        else:
            log.info("migration completed")
            self.status.update({"state": "Succeeded", "completed": True, "endTimestamp": now()})
        finally:
            monitor.cancel()
            self.job = {}
        self.publish()

    def _migrate(self) -> None:
        xml = self.domain.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
        state, _ = self.domain.state()
        shared = frozenset(self.request.get("sharedVolumes") or [])
        disks = local_disks(xml, shared) if self.request.get("blockMigration") else []
        self.status["migrateDisks"] = disks
        if self._abort_requested.is_set():
            raise libvirt.libvirtError("migration aborted before it started")
        self.domain.migrateToURI3(
            self.request["targetUri"],
            params(self.request, self.domain.name(), disks),
            flags(self.request, paused=state == libvirt.VIR_DOMAIN_PAUSED),
        )

    async def _monitor(self) -> None:
        per_gib = float(self.request.get("completionTimeoutPerGiB") or DEFAULT_COMPLETION_TIMEOUT_PER_GIB)
        state = MonitorState(
            started=time.monotonic(),
            acceptable_seconds=per_gib * self.data_gib,
            progress_timeout=float(self.request.get("progressTimeout") or DEFAULT_PROGRESS_TIMEOUT),
        )
        while True:
            await asyncio.sleep(MONITOR_INTERVAL_SECONDS)
            try:
                stats = await asyncio.to_thread(self.domain.jobStats, 0)
            except libvirt.libvirtError:
                continue
            if not stats or stats.get("type") == libvirt.VIR_DOMAIN_JOB_NONE:
                continue
            self.status["progress"] = progress(stats)
            if stats.get("type") == libvirt.VIR_DOMAIN_JOB_UNBOUNDED:
                self.job = job_stats(stats)
            reason = state.verdict(stats, time.monotonic(), post_copy_allowed=bool(self.request.get("allowPostCopy")))
            if reason == START_POST_COPY:
                log.info("Starting post copy mode for migration")
                try:
                    await asyncio.to_thread(self.domain.migrateStartPostCopy, 0)
                except libvirt.libvirtError as exc:
                    log.error("failed to start post migration: %s", exc)
                    continue
                state.post_copy = True
                self.status["mode"] = "PostCopy"
                self.publish()
            elif reason:
                log.warning("%s", reason)
                self._abort_reason = reason
                await self.abort()
                return

    async def abort(self) -> bool:
        """Abort the running job (KubeVirt's cancelMigration); False when nothing was under way."""
        if self.done:
            return False
        self.status["abortStatus"] = "Aborting"
        self.status["abortRequested"] = True
        self._abort_requested.set()
        self.publish()
        deadline = time.monotonic() + ABORT_JOB_WAIT_SECONDS
        while True:
            try:
                await asyncio.to_thread(self.domain.abortJob)
                return True
            except libvirt.libvirtError as exc:
                # The thread may not have entered migrateToURI3 yet: libvirt has no job to abort until it does.
                no_job = exc.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID
                if self.done:
                    return self.status["state"] == "Failed"
                if not no_job or time.monotonic() > deadline:
                    log.warning("could not abort the migration: %s", exc)
                    self.status["abortStatus"] = "Failed"
                    self.publish()
                    return False
            await asyncio.sleep(ABORT_RETRY_SECONDS)


def progress(stats: dict[str, Any]) -> dict[str, int]:
    """The job statistics KubeVirt's monitor reads, by libvirt's names."""
    keys = (
        "time_elapsed",
        "data_total",
        "data_processed",
        "data_remaining",
        "memory_total",
        "memory_remaining",
        "memory_iteration",
        "disk_total",
        "disk_remaining",
        "downtime",
    )
    return {key: int(stats[key]) for key in keys if key in stats}


def job_stats(stats: dict[str, Any]) -> dict[str, int]:
    """The statistics of a running job that virt-handler's migration metrics read, by libvirt's names."""
    return {key: int(stats[key]) for key in JOB_STATS_KEYS if key in stats}
