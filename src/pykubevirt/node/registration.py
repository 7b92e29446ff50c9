"""The Node object of this agent: registered with the host's capacity, then kept Ready by a heartbeat.

Like the kubelet, the agent creates its Node (or updates the one it finds), reports capacity, addresses, the log
endpoint (daemonEndpoints.kubeletEndpoint) and nodeInfo, and renews the conditions' lastHeartbeatTime every
`heartbeat_interval` seconds through nodes/status. Labels others add (virt-handler's) are left alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
from pathlib import Path
from typing import Any

from pykubevirt import __version__
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, ApiError, NotFound
from pykubevirt.client.resources import NODES

log = logging.getLogger("pykubevirt.node.registration")

KUBELET_VERSION = "v1.32.0-pykubevirt"
HEARTBEAT_INTERVAL_SECONDS = 10.0
NODE_IP = "127.0.0.1"
MAX_PODS = "110"
# What KubeVirt's device plugins advertise on a node that can run VMs.
KUBEVIRT_DEVICES = ("devices.kubevirt.io/kvm", "devices.kubevirt.io/tun", "devices.kubevirt.io/vhost-net")
DEVICE_COUNT = "1000"
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "s390x": "s390x", "ppc64le": "ppc64le"}
# (type, status, reason, message) of the conditions a healthy kubelet reports.
_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def memory_total() -> str:
    """MemTotal of /proc/meminfo as a quantity (`<n>Ki`)."""
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return f"{line.split()[1]}Ki"
    return "0"


HUGEPAGES_DIR = Path("/sys/kernel/mm/hugepages")
# The kubelet's resource names for the page sizes the kernel offers (hugepages-<kB>kB directories).
_HUGEPAGE_NAMES = {2048: "hugepages-2Mi", 1048576: "hugepages-1Gi"}


def hugepages(root: Path = HUGEPAGES_DIR) -> dict[str, str]:
    """Reserved huge pages per size, as the kubelet reports them (`hugepages-2Mi: 160Mi`); 0 where none are."""
    values = {}
    for size_kib, name in _HUGEPAGE_NAMES.items():
        count = _read(str(root / f"hugepages-{size_kib}kB" / "nr_hugepages"))
        if count.isdigit():
            values[name] = f"{int(count) * size_kib // 1024}Mi"
    return values


def architecture() -> str:
    machine = platform.machine()
    return _ARCHES.get(machine, machine)


def os_image() -> str:
    for line in _read("/etc/os-release").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "Linux"


def capacity(data_dir: Path) -> dict[str, str]:
    """What the host offers: CPUs, memory, pods, the data directory's filesystem and KubeVirt's devices."""
    values = {"cpu": str(os.cpu_count() or 1), "memory": memory_total(), "pods": MAX_PODS}
    try:
        fs = os.statvfs(data_dir)
        values["ephemeral-storage"] = f"{fs.f_blocks * fs.f_frsize // 1024}Ki"
    except OSError:
        pass
    values.update(dict.fromkeys(KUBEVIRT_DEVICES, DEVICE_COUNT))
    # Read once at registration, as the kubelet does: pages reserved later need an agent restart to show.
    values.update(hugepages())
    return values


def labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/hostname": name, "kubernetes.io/arch": architecture(), "kubernetes.io/os": "linux"}


def node_info() -> dict[str, str]:
    return {
        "machineID": _read("/etc/machine-id"),
        "systemUUID": _read("/sys/class/dmi/id/product_uuid") or _read("/etc/machine-id"),
        "bootID": _read("/proc/sys/kernel/random/boot_id"),
        "kernelVersion": platform.release(),
        "osImage": os_image(),
        "containerRuntimeVersion": f"pykubevirt-process://{__version__}",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": architecture(),
    }


class NodeRegistration:
    """Registers the Node named `name` and heartbeats its conditions."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        data_dir: Path,
        *,
        log_port: int,
        node_ip: str = NODE_IP,
        heartbeat_interval: float = HEARTBEAT_INTERVAL_SECONDS,
        capacity_overrides: dict[str, str] | None = None,
        extra_labels: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        # Labels the node itself states (the static CPU manager's, which virt-handler derives from the kubelet's).
        self.extra_labels = dict(extra_labels or {})
        self.name = name
        self.data_dir = data_dir
        self.log_port = log_port
        self.node_ip = node_ip
        self.heartbeat_interval = heartbeat_interval
        # Overrides (kubelet's --max-pods, or a developer's memory figure for test-driver density runs) win.
        self.capacity = {**capacity(data_dir), **(capacity_overrides or {})}
        self._transitions: dict[str, str] = {}
        self.heartbeats = 0

    def conditions(self) -> list[dict[str, Any]]:
        now = now_rfc3339()
        result = []
        for kind, status, reason, message in _CONDITIONS:
            since = self._transitions.setdefault(kind, now)
            result.append(
                {
                    "type": kind,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": since,
                }
            )
        return result

    def status(self) -> dict[str, Any]:
        return {
            "capacity": dict(self.capacity),
            "allocatable": dict(self.capacity),
            "conditions": self.conditions(),
            "addresses": [{"type": "InternalIP", "address": self.node_ip}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.log_port}},
            "nodeInfo": node_info(),
        }

    def _remember_transitions(self, node: Object) -> None:
        """Keep lastTransitionTime of conditions whose status has not changed since the previous agent."""
        wanted = {kind: status for kind, status, _, _ in _CONDITIONS}
        for condition in (node.get("status") or {}).get("conditions") or []:
            kind = str(condition.get("type"))
            if wanted.get(kind) == condition.get("status") and condition.get("lastTransitionTime"):
                self._transitions[kind] = str(condition["lastTransitionTime"])

    async def register(self) -> Object:
        """Create the Node, or take over the existing one (labels and status merged: conditions others own stay)."""
        node_labels = {**labels(self.name), **self.extra_labels}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.name, "labels": node_labels}}
        try:
            await self.client.create(NODES, body)
            log.info("registered node %s", self.name, extra={"node": self.name})
        except AlreadyExists:
            existing = await self.client.get(NODES, self.name)
            self._remember_transitions(existing)
            await self.client.patch(NODES, self.name, {"metadata": {"labels": node_labels}})
            log.info("node %s already registered; updating it", self.name, extra={"node": self.name})
        # Strategic merge, as the kubelet's: a fence's Fenced condition outlives the agent it stopped.
        node: Object = await self.client.patch(
            NODES, self.name, {"status": self.status()}, subresource="status", patch_type=STRATEGIC_MERGE_PATCH
        )
        return node

    async def heartbeat(self) -> None:
        """Renew the conditions; re-register when the Node was deleted meanwhile."""
        try:
            # Strategic merge, as the kubelet's: conditions others own (the supervisor's Fenced) stay.
            await self.client.patch(
                NODES,
                self.name,
                {"status": {"conditions": self.conditions()}},
                subresource="status",
                patch_type=STRATEGIC_MERGE_PATCH,
            )
        except NotFound:
            log.warning("node %s was deleted; registering it again", self.name, extra={"node": self.name})
            await self.register()
        self.heartbeats += 1

    async def run(self) -> None:
        """Heartbeat until cancelled; failures are logged and retried at the next beat."""
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self.heartbeat()
            except (ApiError, OSError) as exc:
                log.warning("node heartbeat failed: %s", exc, extra={"node": self.name})
