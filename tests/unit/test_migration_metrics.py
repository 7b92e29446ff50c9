"""virt-handler's migration progress metrics (KubeVirt's migrationdomainstats collector): the source launcher keeps
its migration job's statistics and hands them out with its domain stats; the handler renders them per VMI.

libvirt's test driver has no job statistics (virDomainGetJobStats: "this function is not supported by the connection
driver"), so the job is a fake domain's here; the domain stats around it are the test driver's own.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import libvirt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.handler.domain_metrics import migration_samples, vmi_samples
from pykubevirt.handler.domain_stats_scrape import CATALOG
from pykubevirt.launcher import domain_stats, migration_source
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.migration_commands import MigrationCommands
from pykubevirt.launcher.migration_source import MigrationSource, job_stats
from pykubevirt.launcher.protocol import Command, request
from pykubevirt.metrics.exposition import Sample, families, render

LABELS = {"namespace": "ns", "name": "vm1", "node": "node-a"}
MIGRATING: dict[str, Any] = {
    "metadata": {"namespace": "ns", "name": "vm1", "labels": {"kubevirt.io/domain": "vm1"}},
    "status": {
        "nodeName": "node-a",
        "phase": "Running",
        "migrationState": {"sourceNode": "node-a", "targetNode": "node-b", "migrationUid": "m1"},
    },
}
# What the source launcher's `domainstats` carries while the job runs (libvirt's jobStats names).
JOB = {
    "data_total": 3_000,
    "data_processed": 2_000,
    "data_remaining": 1_000,
    "memory_bps": 40_000,
    "memory_dirty_rate": 5,
    "memory_page_size": 4096,
}
REPLY: dict[str, Any] = {
    "stats": {"state.state": 1, "cpu.time": 1_000_000_000},
    "memory": {},
    "info": {"maxMemory": 65536, "memory": 65536, "vcpus": 1, "cpuTime": 1_000_000_000},
    "aliases": {},
    "migrationJob": JOB,
}


def with_state(**state: Any) -> dict[str, Any]:
    status = {**MIGRATING["status"], "migrationState": {**MIGRATING["status"]["migrationState"], **state}}
    return {**MIGRATING, "status": status}


def test_the_five_families_render_with_kubevirts_names_types_help_and_labels() -> None:
    text = render(families(CATALOG, vmi_samples(MIGRATING, REPLY))).decode()
    migration = "".join(line + "\n" for line in text.splitlines() if "kubevirt_vmi_migration_" in line)
    labels = '{name="vm1",namespace="ns",node="node-a"}'
    assert migration == (
        "# HELP kubevirt_vmi_migration_data_bytes_total The total Guest OS data to be migrated to the new VM.\n"
        "# TYPE kubevirt_vmi_migration_data_bytes_total counter\n"
        f"kubevirt_vmi_migration_data_bytes_total{labels} 3000.0\n"
        "# HELP kubevirt_vmi_migration_data_remaining_bytes The remaining guest OS data to be migrated to the new VM.\n"
        "# TYPE kubevirt_vmi_migration_data_remaining_bytes gauge\n"
        f"kubevirt_vmi_migration_data_remaining_bytes{labels} 1000.0\n"
        "# HELP kubevirt_vmi_migration_data_processed_bytes The total Guest OS data processed and migrated to the "
        "new VM.\n"
        "# TYPE kubevirt_vmi_migration_data_processed_bytes gauge\n"
        f"kubevirt_vmi_migration_data_processed_bytes{labels} 2000.0\n"
        "# HELP kubevirt_vmi_migration_dirty_memory_rate_bytes The rate of memory being dirty in the Guest OS.\n"
        "# TYPE kubevirt_vmi_migration_dirty_memory_rate_bytes gauge\n"
        f"kubevirt_vmi_migration_dirty_memory_rate_bytes{labels} 20480.0\n"
        "# HELP kubevirt_vmi_migration_memory_transfer_rate_bytes The rate at which the memory is being "
        "transferred.\n"
        "# TYPE kubevirt_vmi_migration_memory_transfer_rate_bytes gauge\n"
        f"kubevirt_vmi_migration_memory_transfer_rate_bytes{labels} 40000.0\n"
    )
    # Prometheus reads them back as such (the counter's family name without `_total`).
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["kubevirt_vmi_migration_data_bytes"].type == "counter"
    assert parsed["kubevirt_vmi_migration_data_remaining_bytes"].samples[0].labels == LABELS


def test_no_migration_metrics_without_a_job_or_once_the_migration_state_is_completed_or_gone() -> None:
    assert migration_samples(MIGRATING, {**REPLY, "migrationJob": {}}) == []
    assert migration_samples(MIGRATING, {key: value for key, value in REPLY.items() if key != "migrationJob"}) == []
    assert migration_samples(with_state(completed=True), REPLY) == []
    not_migrating = {**MIGRATING, "status": {"nodeName": "node-a", "phase": "Running"}}
    assert migration_samples(not_migrating, REPLY) == []
    # The domain metrics are there all the same, and a failed one's state is completed too.
    assert any(s.name == "kubevirt_vmi_cpu_usage_seconds_total" for s in vmi_samples(not_migrating, REPLY))
    assert migration_samples(with_state(completed=True, failed=True), REPLY) == []


def test_each_statistic_libvirt_left_out_is_left_out_and_the_dirty_rate_needs_the_page_size() -> None:
    got = migration_samples(MIGRATING, {"migrationJob": {"data_remaining": 7, "memory_dirty_rate": 5}})
    assert got == [Sample("kubevirt_vmi_migration_data_remaining_bytes", LABELS, 7.0)]


def test_the_monitor_keeps_the_running_jobs_statistics_by_libvirts_names() -> None:
    stats = {"type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "time_elapsed": 1200, "memory_total": 9, **JOB}
    assert job_stats(stats) == JOB


class MigratingDomain:
    """A running domain whose migrateToURI3 blocks until released, and libvirt's jobStats of that job."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.migrating = threading.Event()
        self.polls = 0
        self.polled_twice = threading.Event()

    def XMLDesc(self, flags: int = 0) -> str:
        return "<domain><devices/></domain>"

    def state(self) -> tuple[int, int]:
        return libvirt.VIR_DOMAIN_RUNNING, 0

    def name(self) -> str:
        return "ns_vm1"

    def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> None:
        self.migrating.set()
        self.release.wait(30)

    def jobStats(self, flags: int = 0) -> dict[str, Any]:
        if not self.migrating.is_set() or self.release.is_set():
            return {"type": libvirt.VIR_DOMAIN_JOB_NONE}
        self.polls += 1
        if self.polls >= 2:
            self.polled_twice.set()
        return {"type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "time_elapsed": 800, **JOB}


async def test_a_source_launcher_hands_out_the_running_jobs_statistics_with_its_domain_stats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(migration_source, "MONITOR_INTERVAL_SECONDS", 0.01)
    domain = MigratingDomain()
    source = MigrationSource(domain, {"targetUri": "qemu+unix:///system"}, 0.125, lambda: None)
    manager = DomainManager("test:///default", "test")
    await manager.connect()
    stats_request = request(Command.DOMAIN_STATS)
    try:
        # No migration: the test driver's domain stats, and no job.
        idle = await domain_stats.answer(manager, stats_request, {})
        assert idle["stats"] and "migrationJob" not in idle
        source.start()
        # Polled twice: the monitor kept the first poll's statistics before it asked again.
        assert await asyncio.wait_for(asyncio.to_thread(domain.polled_twice.wait, 30), 40)
        assert source.job == JOB
        launcher = MigrationCommands()
        launcher.outgoing = source
        reply = await domain_stats.answer(manager, stats_request, launcher._outgoing_job())
        assert reply["migrationJob"] == JOB and reply["stats"]
        got = {s.name: s.value for s in vmi_samples(MIGRATING, dict(reply)) if "migration" in s.name}
        assert got["kubevirt_vmi_migration_data_remaining_bytes"] == 1_000
        assert got["kubevirt_vmi_migration_dirty_memory_rate_bytes"] == 5 * 4096
        # The job ends: its statistics go with it.
        domain.release.set()
        assert source.task is not None
        await source.task
        assert source.status["state"] == "Succeeded" and source.job == {}
        assert launcher._outgoing_job() == {}
        # A launcher without a domain answers empty, job or not.
        assert "migrationJob" not in await domain_stats.answer(None, stats_request, JOB)
    finally:
        domain.release.set()
