"""What a node and its pods use, for the kubelet's resource metrics (`GET /metrics/resource`, what metrics-server
scrapes and `kubectl top` shows): CPU seconds and working-set bytes of each running container, and of the node.

Containers here are process groups, not cgroups. A container uses what its process group's processes use (their CPU
time, their children's that they reaped, and their resident memory). The processes that left a pod's groups
(libvirt daemonizes QEMU) count for the pod's first running container: they are found by the pod's runtime
directory in their command line or environment, as the stray sweeper finds them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from pykubevirt.client.delegated_auth import Decision, status_body
from pykubevirt.metrics.exposition import CONTENT_TYPE_LATEST, Descriptor, Sample, families, render
from pykubevirt.node.processes import markers_in

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_seconds: float
    memory_bytes: int

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_seconds + other.cpu_seconds, self.memory_bytes + other.memory_bytes)


NOTHING = Usage(0.0, 0)


@dataclass(frozen=True, slots=True)
class PodProcesses:
    """A running pod as the agent knows it: its running containers, those with processes by process group."""

    namespace: str
    name: str
    containers: tuple[str, ...]
    groups: dict[int, str]
    marker: str


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    namespace: str
    pod: str
    container: str
    usage: Usage


def metered_containers(pod: dict[str, Any]) -> list[str]:
    """The containers whose usage a pod's metrics show: its containers and its sidecars (restartable init containers,
    such as a launcher's guest-console-log); init containers that ran to their end use nothing any more."""
    spec = pod.get("spec") or {}
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return [str(c.get("name")) for c in [*(spec.get("containers") or []), *sidecars]]


def mirror_processes(pod: dict[str, Any]) -> PodProcesses | None:
    """A mirror pod's running containers: the supervisor starts each component as a session of its own and puts its
    pid in the container's id (`process://PID`), so the pid is its process group."""
    groups = {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        scheme, _, pid = str(status.get("containerID") or "").partition("://")
        if scheme == "process" and pid.isdigit() and "running" in (status.get("state") or {}):
            groups[int(pid)] = str(status.get("name"))
    if not groups:
        return None
    meta = pod["metadata"]
    return PodProcesses(str(meta["namespace"]), str(meta["name"]), tuple(groups.values()), groups, "")


def _process(pid: str) -> tuple[int, Usage] | None:
    """A process's group and usage from /proc/PID/stat (None once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as source:
            raw = source.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
        return int(fields[2]), Usage(ticks / CLOCK_TICKS, int(fields[21]) * PAGE_SIZE)
    except (IndexError, ValueError):
        return None


def pod_usage(pods: Iterable[PodProcesses]) -> list[ContainerUsage]:
    """Every running container's usage, from one pass over /proc."""
    pods = list(pods)
    owner: dict[int, tuple[int, str]] = {}  # process group → (pod index, container)
    for index, pod in enumerate(pods):
        for group, container in pod.groups.items():
            owner[group] = (index, container)
    needles = {pod.marker: pod.marker.encode() for pod in pods if pod.marker}
    first = {pod.marker: index for index, pod in enumerate(pods) if pod.marker and pod.containers}
    totals: dict[tuple[int, str], Usage] = {}
    own = str(os.getpid())
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit() or entry.name == own:
                continue
            found = _process(entry.name)
            if found is None:
                continue
            group, usage = found
            key = owner.get(group)
            if key is None:
                marker = next(iter(markers_in(entry.name, needles)), None) if needles else None
                if marker is None:
                    continue
                key = (first[marker], pods[first[marker]].containers[0])
            totals[key] = totals.get(key, NOTHING) + usage
    return [
        ContainerUsage(pod.namespace, pod.name, container, totals.get((index, container), NOTHING))
        for index, pod in enumerate(pods)
        for container in pod.containers
    ]


# The root cgroup's CPU time, as cAdvisor reads the node's: to the nanosecond or microsecond, where /proc/stat counts
# ticks (10 ms), too coarse for a rate over the one-second first window.
CGROUP_CPU = (("/sys/fs/cgroup/cpu.stat", "usage_usec", 1e-6), ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "", 1e-9))


def node_usage(
    stat: str = "/proc/stat",
    meminfo: str = "/proc/meminfo",
    cgroup_cpu: Iterable[tuple[str, str, float]] = CGROUP_CPU,
) -> Usage:
    """The node's CPU time (the root cgroup's, else the ticks /proc/stat counts not idle) and its memory in use
    (total less what is available), as cAdvisor's root container."""
    busy = _cgroup_cpu_seconds(cgroup_cpu)
    if busy is None:
        with open(stat) as source:
            cpu = [int(value) for value in source.readline().split()[1:]]
        busy = (sum(cpu[:8]) - cpu[3] - cpu[4]) / CLOCK_TICKS  # user … steal, less idle and iowait
    memory: dict[str, int] = {}
    with open(meminfo) as source:
        for line in source:
            name, _, rest = line.partition(":")
            memory[name] = int(rest.split()[0]) * 1024
    return Usage(busy, memory["MemTotal"] - memory["MemAvailable"])


def _cgroup_cpu_seconds(sources: Iterable[tuple[str, str, float]]) -> float | None:
    """The first readable of (file, key or "" for a bare number, unit in seconds)."""
    for path, key, unit in sources:
        try:
            with open(path) as source:
                text = source.read()
        except OSError:
            continue
        if not key:
            return int(text.split()[0]) * unit
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value) * unit
    return None


# The series of the kubelet's `/metrics/resource` that metrics-server reads.
CATALOG = (
    Descriptor(
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    ),
    Descriptor("container_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the container in bytes"),
    Descriptor(
        "node_cpu_usage_seconds_total", "counter", "[STABLE] Cumulative cpu time consumed by the node in core-seconds"
    ),
    Descriptor("node_memory_working_set_bytes", "gauge", "[STABLE] Current working set of the node in bytes"),
    Descriptor("scrape_error", "gauge", "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise"),
)


def exposition(containers: Iterable[ContainerUsage], node: Usage, timestamp: float) -> bytes:
    """The kubelet's `/metrics/resource` text, each sample stamped with the time it was read (seconds)."""
    samples = [Sample("scrape_error", {}, 0.0)]
    for entry in containers:
        labels = {"container": entry.container, "namespace": entry.namespace, "pod": entry.pod}
        samples.append(Sample("container_cpu_usage_seconds_total", labels, entry.usage.cpu_seconds, timestamp))
        samples.append(Sample("container_memory_working_set_bytes", labels, entry.usage.memory_bytes, timestamp))
    samples.append(Sample("node_cpu_usage_seconds_total", {}, node.cpu_seconds, timestamp))
    samples.append(Sample("node_memory_working_set_bytes", {}, node.memory_bytes, timestamp))
    return render(families(CATALOG, samples))


class UsageSource(Protocol):
    async def authorize_metrics(self, authorization: str | None) -> Decision: ...

    def pod_processes(self) -> list[PodProcesses]: ...


async def serve_resource_metrics(request: web.Request, source: UsageSource) -> web.Response:
    """`GET /metrics/resource`, for a caller allowed `get nodes/metrics` on this node (the kubelet's rule)."""
    decision = await source.authorize_metrics(request.headers.get("Authorization"))
    if decision.code != 200:
        return web.json_response(status_body(decision), status=decision.code)
    pods = source.pod_processes()

    def read() -> tuple[Usage, float, list[ContainerUsage]]:
        # The node's counter right next to the time it is stamped with: a rate over a second has no room for more.
        node = node_usage()
        return node, time.time(), pod_usage(pods)

    # One pass over /proc reads a file or three a process: off the loop, whose pods it must not hold up.
    node, timestamp, containers = await asyncio.to_thread(read)
    return web.Response(body=exposition(containers, node, timestamp), headers={"Content-Type": CONTENT_TYPE_LATEST})
