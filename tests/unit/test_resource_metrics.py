"""Resource metrics from the node's /proc to metrics.k8s.io: a container's usage is its process group's (and its pod's
strays'), the kubelet's text reads back as metrics-server reads it, and rates come out in metrics-server's units."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.apiserver.resource_metrics import go_duration, parse_scrape, usage
from pykubevirt.node.resource_usage import (
    ContainerUsage,
    PodProcesses,
    Usage,
    exposition,
    metered_containers,
    mirror_processes,
    node_usage,
    pod_usage,
)

# It says when its 0.3 s of CPU are spent: on a loaded machine that may take far longer than 0.3 s of wall time.
BUSY_THEN_SLEEP = (
    "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
    "print('spent', flush=True)\ntime.sleep(60)"
)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def test_a_containers_usage_is_its_process_groups_and_strays_count_for_the_first_container(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    marker = f"{tmp_path}/runtime/"
    # The container's command leads its own group (as the agent's wrapper does); the stray left it, as QEMU does.
    main = subprocess.Popen([sys.executable, "-c", BUSY_THEN_SLEEP], start_new_session=True, stdout=subprocess.PIPE)
    stray = subprocess.Popen(
        [sys.executable, "-c", BUSY_THEN_SLEEP, marker], start_new_session=True, stdout=subprocess.PIPE
    )
    processes += [main, stray]
    for process in (main, stray):
        assert process.stdout is not None and process.stdout.readline() == b"spent\n"
    pod = PodProcesses("ns", "pod", ("compute", "sidecar"), {main.pid: "compute"}, marker)
    other = PodProcesses("ns", "other", ("main",), {}, f"{tmp_path}/elsewhere/")
    found = {(u.pod, u.container): u.usage for u in pod_usage([pod, other])}
    assert set(found) == {("pod", "compute"), ("pod", "sidecar"), ("other", "main")}
    # Both processes burned 0.3 s of CPU; the stray's counts for compute, the first container.
    assert found[("pod", "compute")].cpu_seconds >= 0.55
    assert found[("pod", "compute")].memory_bytes > 2 * 1024 * 1024
    assert found[("pod", "sidecar")] == Usage(0.0, 0)
    assert found[("other", "main")] == Usage(0.0, 0)


def test_a_mirror_pods_containers_are_the_sessions_its_container_ids_name() -> None:
    pod = {
        "metadata": {"namespace": "kubevirt", "name": "virt-api-node01"},
        "status": {
            "containerStatuses": [
                {"name": "virt-api", "containerID": "process://4242", "state": {"running": {}}},
                {"name": "gone", "containerID": "process://4243", "state": {"waiting": {}}},
            ]
        },
    }
    assert mirror_processes(pod) == PodProcesses("kubevirt", "virt-api-node01", ("virt-api",), {4242: "virt-api"}, "")
    assert mirror_processes({"metadata": {"namespace": "n", "name": "p"}, "status": {}}) is None


def test_the_node_uses_what_is_not_idle_and_not_available(tmp_path: Path) -> None:
    stat, meminfo = tmp_path / "stat", tmp_path / "meminfo"
    ticks = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(f"cpu  {ticks * 3} 0 {ticks} {ticks * 50} {ticks * 7} 0 0 0 {ticks * 9} 0\ncpu0 1 2 3\n")
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    400 kB\n")
    assert node_usage(str(stat), str(meminfo), cgroup_cpu=()) == Usage(4.0, 600 * 1024)
    # The root cgroup's counter, where the host has one, to the nanosecond (v1) or microsecond (v2).
    cpuacct, cpu_stat = tmp_path / "cpuacct.usage", tmp_path / "cpu.stat"
    cpuacct.write_text("2500000000\n")
    cpu_stat.write_text("usage_usec 7250000\nuser_usec 7000000\n")
    v1 = [(str(tmp_path / "absent"), "usage_usec", 1e-6), (str(cpuacct), "", 1e-9)]
    assert node_usage(str(stat), str(meminfo), cgroup_cpu=v1).cpu_seconds == 2.5
    v2 = [(str(cpu_stat), "usage_usec", 1e-6), (str(cpuacct), "", 1e-9)]
    assert node_usage(str(stat), str(meminfo), cgroup_cpu=v2).cpu_seconds == 7.25
    real = node_usage()
    assert real.cpu_seconds > 0 and real.memory_bytes > 0


def test_metered_containers_are_the_containers_then_the_sidecars() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "setup"}, {"name": "guest-console-log", "restartPolicy": "Always"}],
            "containers": [{"name": "compute"}, {"name": "volumerootdisk"}],
        }
    }
    assert metered_containers(pod) == ["compute", "volumerootdisk", "guest-console-log"]


def test_the_kubelets_text_reads_back_as_metrics_server_reads_it() -> None:
    entries = [
        ContainerUsage("ns", "web", "compute", Usage(12.5, 300 * 1024 * 1024)),
        ContainerUsage("ns", "web", "guest-console-log", Usage(0.0, 0)),
    ]
    text = exposition(entries, Usage(1000.25, 2 * 1024**3), 1_796_576_668.517).decode()
    series = 'container_cpu_usage_seconds_total{container="compute",namespace="ns",pod="web"}'
    assert f"{series} 12.5 1796576668517\n" in text
    scrape = parse_scrape(text, received_at=0.0)
    assert scrape.at == 1_796_576_668.517  # the sample's own time, not the receiver's
    assert scrape.node == (1000.25, 2 * 1024**3)
    assert scrape.containers[("ns", "web", "compute")] == (12.5, 300 * 1024 * 1024)
    assert scrape.by_pod == {("ns", "web"): ["compute", "guest-console-log"]}
    with pytest.raises(ValueError, match="node_cpu_usage_seconds_total"):
        parse_scrape("scrape_error 1\n", 0.0)


def test_usage_is_a_rate_in_nanocores_and_a_working_set_in_ki() -> None:
    assert usage((10.0, 0), (10.5, 300 * 1024 * 1024 + 1000), 2.0) == {"cpu": "250000000n", "memory": "307200Ki"}
    # A counter that went back (a process gone with its CPU time) reads as idle, never negative.
    assert usage((10.0, 0), (9.0, 2048), 15.0) == {"cpu": "0n", "memory": "2Ki"}


@pytest.mark.parametrize(
    ("seconds", "text"), [(15.0, "15s"), (1.0094, "1.009s"), (0.5, "0.5s"), (65.5, "1m5.5s"), (120.0, "2m0s")]
)
def test_windows_read_as_go_durations(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text
