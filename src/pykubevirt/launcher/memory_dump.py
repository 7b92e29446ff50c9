"""The guest's memory dumped into a claim virt-handler mounted (KubeVirt's virtwrap/storage MemoryDump).

One dump at a time, in the background: `virDomainCoreDumpWithFormat` (raw, memory only) into the claim's directory,
after the dumps an earlier request left there are removed. What happened is kept as KubeVirt keeps it in the
domain's metadata (file name, start and end, completed, failed and why) and goes back to virt-handler with every
`hotplug` reply; a request for the file being (or just) dumped starts nothing.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import libvirt

from pykubevirt.api.timestamps import format_time
from pykubevirt.launcher.domain_manager import DomainManager

log = logging.getLogger("pykubevirt.launcher.memory_dump")

FAILED_DOMAIN_MEMORY_DUMP = "Domain memory dump failed"
DUMP_SUFFIX = "memory.dump"


def _now() -> str:
    return format_time(datetime.now(UTC))


class MemoryDumper:
    """The launcher's dump state; `result` is what virt-handler reads."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None

    def request(self, domain: DomainManager, path: Path) -> None:
        """Start dumping into `path` unless a dump runs or this file was already dumped."""
        if self._task is not None and not self._task.done():
            log.info("memory-dump is in progress")
            return
        if self.result.get("fileName") == path.name:
            return
        self.result = {"fileName": path.name, "startTimestamp": _now()}
        self._task = asyncio.create_task(self._dump(domain, path))

    async def _dump(self, domain: DomainManager, path: Path) -> None:
        failed, reason = False, ""
        try:
            await asyncio.to_thread(_remove_previous, path.parent)
            log.info("Starting memory dump")
            await domain.act(
                lambda d: d.coreDumpWithFormat(
                    str(path), libvirt.VIR_DOMAIN_CORE_DUMP_FORMAT_RAW, libvirt.VIR_DUMP_MEMORY_ONLY
                )
            )
            log.info("Completed memory dump successfully")
        except (libvirt.libvirtError, OSError) as exc:
            failed, reason = True, f"{FAILED_DOMAIN_MEMORY_DUMP}: {exc}"
            log.error("%s", reason)
        self.result.update(completed=True, endTimestamp=_now(), failed=failed, failureReason=reason)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _remove_previous(directory: Path) -> None:
    """Earlier dumps go first, so the claim holds one (KubeVirt keeps dumping even when this fails)."""
    try:
        for entry in directory.iterdir():
            if DUMP_SUFFIX in entry.name:
                entry.unlink(missing_ok=True)
    except OSError as exc:
        log.error("failed to remove older memory dumps: %s", exc)
