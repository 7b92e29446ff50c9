"""The `domainstats` command: one libvirt bulk stats read of the launcher's domain, for virt-handler's /metrics.

As KubeVirt's launcher does (virtwrap/cli GetDomainStats), the reply joins libvirt's bulk stats
(`virConnectGetAllDomainStats` for the one domain), the balloon driver's memory stats (which carry the QEMU
process's RSS also on drivers whose bulk stats leave the balloon group empty), the domain's info, and the
user aliases of its NICs and disks, so the handler can label each device by the VMI's interface or volume name.
While the domain migrates away, the reply also carries the migration job's statistics (KubeVirt's
MigrateDomainJobInfo), for virt-handler's `kubevirt_vmi_migration_*` gauges.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import libvirt

from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.protocol import PROTOCOL_VERSION, Request

# The stats groups KubeVirt's launcher asks for (its statsTypes), minus the ones no metric here reads.
STATS_TYPES = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_CPU_TOTAL
    | libvirt.VIR_DOMAIN_STATS_BALLOON
    | libvirt.VIR_DOMAIN_STATS_VCPU
    | libvirt.VIR_DOMAIN_STATS_INTERFACE
    | libvirt.VIR_DOMAIN_STATS_BLOCK
)
# KubeVirt marks the devices it made from the VMI's spec with this alias prefix (api.UserAliasPrefix).
USER_ALIAS_PREFIX = "ua-"


class DomainInfo(TypedDict):
    """virDomainGetInfo: memory in KiB, cpuTime in nanoseconds."""

    maxMemory: int
    memory: int
    vcpus: int
    cpuTime: int


class DomainStatsReply(TypedDict):
    """`domainstats`: empty `stats` when the launcher has no domain."""

    protocolVersion: int
    stats: dict[str, Any]
    memory: dict[str, int]
    info: DomainInfo | None
    # libvirt device name (NIC target dev, disk target) → the VMI's interface or volume name.
    aliases: dict[str, str]
    # Only while an outgoing migration's job runs: its libvirt job statistics by jobStats names
    # (`migration_source.JOB_STATS_KEYS`). Added in protocol version 1: a reply without it means no job runs, or a
    # launcher from before the field, and the handler renders no migration gauges for it.
    migrationJob: NotRequired[dict[str, int]]


def device_aliases(xml: str) -> dict[str, str]:
    """The user alias of each NIC and disk of a domain XML, by the name libvirt's stats give that device."""
    aliases: dict[str, str] = {}
    root = ET.fromstring(xml)
    for device in [*root.iterfind("devices/interface"), *root.iterfind("devices/disk")]:
        alias = device.find("alias")
        target = device.find("target")
        if alias is None or target is None:
            continue
        name = alias.get("name", "")
        key = target.get("dev", "")
        if key and name.startswith(USER_ALIAS_PREFIX):
            aliases[key] = name[len(USER_ALIAS_PREFIX) :]
    return aliases


def _device_names(stats: dict[str, Any]) -> tuple[str, ...]:
    return tuple(sorted(str(v) for k, v in stats.items() if k.endswith(".name") and k.startswith(("net.", "block."))))


@dataclass
class AliasCache:
    """A domain's aliases, reused while it has the same devices (a hotplug changes the names the bulk stats list):
    reading and parsing the domain XML is most of a stats read's cost (0.4 of 0.45 ms on the test driver)."""

    key: tuple[str, tuple[str, ...]] | None = None
    aliases: dict[str, str] = field(default_factory=dict)

    def of(self, domain: Any, stats: dict[str, Any]) -> dict[str, str]:
        key = (str(domain.UUIDString()), _device_names(stats))
        if self.key != key:
            self.aliases = device_aliases(domain.XMLDesc(0))
            self.key = key
        return dict(self.aliases)


# A launcher runs one domain: one cache for the process.
_ALIASES = AliasCache()


def read(conn: Any, domain: Any) -> DomainStatsReply:
    """Everything the handler's domain metrics need, read in one thread (blocking libvirt calls)."""
    records = conn.domainListGetStats([domain], STATS_TYPES, 0)
    stats = dict(records[0][1]) if records else {}
    try:
        memory = {str(k): int(v) for k, v in domain.memoryStats().items()}
    except libvirt.libvirtError:
        # A paused or starting domain may not answer the balloon driver; the bulk stats still stand.
        memory = {}
    _, max_memory, current, vcpus, cpu_time = domain.info()
    info: DomainInfo = {"maxMemory": max_memory, "memory": current, "vcpus": vcpus, "cpuTime": cpu_time}
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "stats": stats,
        "memory": memory,
        "info": info,
        "aliases": _ALIASES.of(domain, stats),
    }


def empty() -> DomainStatsReply:
    return {"protocolVersion": PROTOCOL_VERSION, "stats": {}, "memory": {}, "info": None, "aliases": {}}


async def answer(
    manager: DomainManager | None, request: Request, migration_job: Mapping[str, int] | None = None
) -> DomainStatsReply:
    """The command's handler: the stats of the launcher's domain, or an empty reply when there is none; with the
    outgoing migration's job statistics (`migration_job`, the source monitor's last poll) while one runs."""
    if manager is None:
        return empty()

    def run() -> DomainStatsReply:
        domain = manager.lookup()
        if domain is None:
            return empty()
        reply = read(manager.connection, domain)
        if migration_job:
            reply["migrationJob"] = dict(migration_job)
        return reply

    return await asyncio.to_thread(run)
