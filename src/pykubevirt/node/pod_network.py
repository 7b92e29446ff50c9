"""The embedded cluster's pod network: each pod that is not hostNetwork gets a network namespace whose `eth0` is on
its node's bridge, with an IP from the node's podCIDR, through the real CNI plugins (bridge, host-local, portmap).

All node bridges of a cluster live in one cluster namespace (`pkvnet-<key>`, standing for the nodes' shared L3
network), so pods reach each other across nodes. One veth joins it to the host, with a route for the cluster CIDR
only: the host reaches pods, and nothing is routed or NATed off the host. Every name is generated here and removed
by that name: a pod's namespace at its deletion (or at the next start after a crash), the cluster's by `down`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pykubevirt.node import cni, multus, netns
from pykubevirt.node.netns import IP, NetworkError

log = logging.getLogger("pykubevirt.node.pod_network")

NETWORK_NAME = "pykubevirt"
POD_NETNS_PREFIX = "pkvpod-"
HOST_IFNAME = "host0"
DEFAULT_MTU = 1500
LOCK_DIR = "/run/lock"
IPV6_DISABLED_SYSCTL = "/proc/sys/net/ipv6/conf/all/disable_ipv6"
# Secondary networks' host-local stores, one per cluster: its nodes share each secondary bridge, so they must share
# its leases too. Under /run: they live as long as the cluster's namespace, which a reboot removes as well.
SHARED_IPAM_ROOT = "/run/pykubevirt-cni"


class NetworkNotReady(Exception):
    """The node has no podCIDR yet (the kubelet's NetworkPluginNotReady)."""


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def ipv6_enabled(path: str = "") -> bool:
    """Whether the host has IPv6 (`net.ipv6.conf.all.disable_ipv6` is 0): without it the pod network is IPv4 only."""
    try:
        with open(path or IPV6_DISABLED_SYSCTL) as sysctl:
            return sysctl.read().strip() == "0"
    except OSError:
        return False  # no such file: a kernel without IPv6


def split_cidrs(cidrs: str) -> tuple[str, str]:
    """A dual-stack list as kube-controller-manager's `--cluster-cidr` (or a node's podCIDRs) takes it, "V4[,V6]":
    the IPv4 CIDR and the IPv6 one ("" when absent)."""
    ipv4 = ipv6 = ""
    for part in (p.strip() for p in cidrs.split(",")):
        if not part:
            continue
        if ":" in part:
            ipv6 = ipv6 or part
        else:
            ipv4 = ipv4 or part
    return ipv4, ipv6


@dataclass(frozen=True, slots=True)
class ClusterNetwork:
    """The names and host link of one cluster CIDR (one embedded cluster on this host): "V4" or dual-stack "V4,V6".
    Names derive from the IPv4 CIDR, so a cluster keeps them whether or not it has IPv6."""

    cidr: str

    @property
    def ipv4_cidr(self) -> str:
        return split_cidrs(self.cidr)[0]

    @property
    def ipv6_cidr(self) -> str:
        return split_cidrs(self.cidr)[1]

    @property
    def netns(self) -> str:
        return f"pkvnet-{_key(self.ipv4_cidr)}"

    @property
    def host_veth(self) -> str:
        return f"pkvh{_key(self.ipv4_cidr)}"

    @property
    def host_link(self) -> ipaddress.IPv4Network:
        """The last /30 of the cluster CIDR joins the host and the cluster namespace (never a node's podCIDR)."""
        network = ipaddress.IPv4Network(self.ipv4_cidr)
        return ipaddress.IPv4Network(f"{network.broadcast_address - 3}/30")

    @property
    def host_link_v6(self) -> ipaddress.IPv6Network | None:
        """The last /64 of the IPv6 cluster CIDR joins the host and the cluster namespace (never a node's)."""
        if not self.ipv6_cidr:
            return None
        network = ipaddress.IPv6Network(self.ipv6_cidr)
        return ipaddress.IPv6Network(f"{network.broadcast_address - (2**64 - 1)}/64")

    @property
    def nft_table(self) -> str:
        """The host's nft table (family ip) of the cluster's Service proxy."""
        return f"pykubevirt-{_key(self.ipv4_cidr)}"

    @property
    def service_cidr(self) -> str:
        """The Services' ClusterIP range: the first half of the /24 that holds the host link, which node IPAM never
        gives a node; the host's route for the cluster CIDR already leads it into the cluster's namespace only."""
        network = ipaddress.IPv4Network(self.ipv4_cidr)
        return str(ipaddress.IPv4Network(f"{network.broadcast_address - 255}/25"))

    @property
    def shared_ipam_dir(self) -> Path:
        return Path(SHARED_IPAM_ROOT) / self.netns

    @property
    def host_address(self) -> str:
        return str(self.host_link.network_address + 1)

    @property
    def inner_address(self) -> str:
        return str(self.host_link.network_address + 2)

    @property
    def host_address_v6(self) -> str:
        link = self.host_link_v6
        return str(link.network_address + 1) if link is not None else ""

    @property
    def inner_address_v6(self) -> str:
        link = self.host_link_v6
        return str(link.network_address + 2) if link is not None else ""

    @property
    def has_ipv6(self) -> bool:
        """Whether the cluster's IPv6 CIDR is plumbed: it has one and the host has IPv6 (else IPv4 only)."""
        return bool(self.ipv6_cidr) and ipv6_enabled()

    async def ensure(self) -> None:
        """Create the cluster namespace and its link to the host (idempotent; agents of a cluster race safely)."""
        lock = await asyncio.to_thread(_locked, os.path.join(LOCK_DIR, f"pykubevirt-{self.netns}.lock"))
        with lock:
            await netns.add(self.netns)
            prefix = self.host_link.prefixlen
            if not netns.link_exists(self.host_veth):
                await netns.run(
                    [
                        IP,
                        "link",
                        "add",
                        self.host_veth,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        HOST_IFNAME,
                        "netns",
                        self.netns,
                    ]
                )
                await netns.run([IP, "addr", "add", f"{self.host_address}/{prefix}", "dev", self.host_veth])
                await netns.run(
                    [IP, "-n", self.netns, "addr", "add", f"{self.inner_address}/{prefix}", "dev", HOST_IFNAME]
                )
                await netns.run([IP, "-n", self.netns, "link", "set", HOST_IFNAME, "up"])
                await netns.run([IP, "link", "set", self.host_veth, "up"])
            await netns.run([IP, "route", "replace", self.ipv4_cidr, "via", self.inner_address, "dev", self.host_veth])
            # A connection to a node's loopback InternalIP:nodePort is DNATed to a pod but keeps its 127/8 source
            # until masqueraded after routing: the host veth must be allowed to route it (kube-proxy's localhost
            # nodePorts set the same, host-wide; here only this link).
            await netns.run(["sysctl", "-qw", f"net.ipv4.conf.{self.host_veth}.route_localnet=1"])
            await netns.run([*netns.enter_argv(self.netns), "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            if self.has_ipv6:
                await self._ensure_ipv6()

    async def _ensure_ipv6(self) -> None:
        """The IPv6 side of the host link (no DAD: both ends are ours) and the route for the IPv6 cluster CIDR."""
        prefix = 64
        inside = netns.enter_argv(self.netns)
        # Devices made here later (node bridges, pod veths' host ends) skip DAD too: a pod's start never waits on it.
        await netns.run(
            [*inside, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.default.accept_dad=0"]
        )
        for argv in (
            [IP, "addr", "replace", f"{self.host_address_v6}/{prefix}", "dev", self.host_veth, "nodad"],
            [IP, "-n", self.netns, "addr", "replace", f"{self.inner_address_v6}/{prefix}", "dev", HOST_IFNAME, "nodad"],
            [IP, "-6", "route", "replace", self.ipv6_cidr, "via", self.inner_address_v6, "dev", self.host_veth],
        ):
            await netns.run(argv)

    async def remove(self) -> None:
        """Delete the cluster namespace: its bridges and the host veth (and so the host route) go with it."""
        await netns.delete(self.netns)
        shutil.rmtree(self.shared_ipam_dir, ignore_errors=True)
        if netns.link_exists(self.host_veth):
            # The kernel removes the veth when it destroys the namespace, asynchronously: either may come first.
            try:
                await netns.run([IP, "link", "delete", self.host_veth])
            except NetworkError:
                if netns.link_exists(self.host_veth):
                    raise


def _locked(path: str) -> IO[str]:
    """An exclusive flock on `path`, held until the returned file is closed."""
    lock = open(path, "a+")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def node_pod_cidrs(node: Mapping[str, Any]) -> str:
    """A Node's podCIDRs as "V4[,V6]" (`spec.podCIDRs`, dual-stack, else `spec.podCIDR`; "" before IPAM gave any)."""
    spec = node.get("spec") or {}
    cidrs = [str(c) for c in spec.get("podCIDRs") or [] if c] or ([str(spec["podCIDR"])] if spec.get("podCIDR") else [])
    return ",".join(cidrs)


def outside_cluster(pod_cidrs: str, cluster_cidr: str) -> bool:
    """Whether a node's podCIDRs ("V4[,V6]") lie outside the cluster CIDR of their family: given by a cluster whose
    CIDR has changed since."""
    cluster = [ipaddress.ip_network(c) for c in split_cidrs(cluster_cidr) if c]
    for text in (c for c in pod_cidrs.split(",") if c.strip()):
        network = ipaddress.ip_network(text.strip(), strict=False)
        family = [c for c in cluster if c.version == network.version]
        if family and not any(network[0] in c and network[-1] in c for c in family):
            return True
    return False


def pod_netns(uid: str) -> str:
    return POD_NETNS_PREFIX + uid


def host_network(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("hostNetwork"))


class PodNetwork:
    """One node's side of the pod network: its bridge, IPAM store and the sandboxes of its pods."""

    def __init__(self, cluster_cidr: str, node_name: str, data_dir: Path, *, pod_cidr: str = "", mtu: int = 0) -> None:
        self.cluster = ClusterNetwork(cluster_cidr)
        self.node_name = node_name
        self.dir = Path(data_dir) / "cni"
        self.pod_cidr = pod_cidr
        self.mtu = mtu or DEFAULT_MTU
        self.bridge = f"cni{_key(node_name)}"
        self.conf_file = self.dir / "net.d" / "10-pykubevirt.conflist"
        self.records = self.dir / "pods"
        self.multus = multus.Delegator(self.dir, self.cluster.netns, self.cluster.shared_ipam_dir)

    @property
    def ipam_dir(self) -> Path:
        """host-local's store (one file per leased IP): on disk under the data dir, so it survives restarts."""
        return self.dir / "ipam"

    async def start(self, pod_cidr: str = "") -> None:
        """Make the cluster namespace; write the conflist once the podCIDR is known."""
        self.records.mkdir(parents=True, exist_ok=True)
        await self.cluster.ensure()
        if pod_cidr:
            self.set_pod_cidr(pod_cidr)

    def set_pod_cidr(self, pod_cidr: str) -> None:
        """The node's podCIDRs ("V4[,V6]", as `spec.podCIDRs` joined): the conflist's ranges. The IPv6 one is left
        out where the host has IPv6 disabled, so such a host runs the pod network IPv4 only."""
        if pod_cidr == self.pod_cidr and self.conf_file.exists():
            return
        self.pod_cidr = pod_cidr
        ipv4, ipv6 = split_cidrs(pod_cidr)
        subnets = [ipv4] + ([ipv6] if ipv6 and self.cluster.has_ipv6 else [])
        conflist = cni.bridge_conflist(NETWORK_NAME, self.bridge, subnets, self.ipam_dir, self.mtu)
        cni.write_conflist(self.conf_file, conflist)
        log.info(
            "pod network ready: podCIDRs %s on bridge %s",
            ", ".join(subnets),
            self.bridge,
            extra={"node": self.node_name},
        )

    def _conflist(self) -> dict[str, Any]:
        if not self.pod_cidr or not self.conf_file.exists():
            raise NetworkNotReady("network is not ready: the node has no podCIDR yet")
        conflist: dict[str, Any] = json.loads(self.conf_file.read_text())
        return conflist

    def _record_file(self, uid: str) -> Path:
        return self.records / f"{uid}.json"

    def _read_record(self, uid: str) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(self._record_file(uid).read_text())
        except (OSError, ValueError):
            return None
        return record

    def _write_record(self, uid: str, record: Mapping[str, Any]) -> None:
        path = self._record_file(uid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, sort_keys=True))
        os.replace(tmp, path)

    def recorded_ips(self, uid: str) -> list[str] | None:
        """The pod's IPs when its sandbox is complete (after an agent restart too)."""
        return None if self.multus.pending(uid) else self._primary_ips(uid)

    def _primary_ips(self, uid: str) -> list[str] | None:
        record = self._read_record(uid)
        if record and record.get("ips") and netns.exists(str(record["netns"])):
            return [str(ip) for ip in record["ips"]]
        return None

    def netns_of(self, uid: str) -> str | None:
        record = self._read_record(uid)
        return str(record["netns"]) if record and record.get("ips") and netns.exists(str(record["netns"])) else None

    def default_attachment(self, uid: str) -> multus.Attachment | None:
        """The pod's `eth0` as network-status reports the cluster's default network."""
        record = self._read_record(uid)
        if not record or not record.get("ips"):
            return None
        name = str(record.get("network") or NETWORK_NAME)
        return multus.Attachment(name, "eth0", tuple(record["ips"]), str(record.get("mac") or ""))

    async def setup(
        self, pod: Mapping[str, Any], default: Mapping[str, Any] | None = None, default_name: str = ""
    ) -> list[str]:
        """The pod's sandbox network (idempotent): its namespace, lo, eth0 by CNI ADD (of the node's network, or the
        `default` configuration list that replaces it); its IPs."""
        meta = pod["metadata"]
        uid = str(meta["uid"])
        ips = self._primary_ips(uid)
        if ips is not None:
            return ips
        conflist = dict(default) if default is not None else self._conflist()
        name = pod_netns(uid)
        call = self._invocation(uid, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        runtime = {"portMappings": list(cni.ports_of(pod))}
        earlier = self._read_record(uid)
        if earlier is not None:
            # A set-up that a crash interrupted: undo what it did before doing it again.
            await cni.del_network(earlier.get("conflist") or conflist, call, run_in=self.cluster.netns, runtime=runtime)
        # The intent is on disk before anything exists, so a crash at any point leaves something to clean up.
        record: dict[str, Any] = {
            "netns": name,
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "ips": [],
        }
        if default is not None:
            record.update(conflist=conflist, network=default_name)
        self._write_record(uid, record)
        await netns.add(name, loopback_up=False)  # the loopback plugin brings `lo` up
        await cni.add_loopback(netns.netns_path(name), uid, run_in=self.cluster.netns)
        result = await cni.add_network(conflist, call, run_in=self.cluster.netns, runtime=runtime)
        ips = cni.result_ips(result)
        if not ips:
            raise NetworkError(f"CNI ADD gave pod {meta.get('namespace')}/{meta.get('name')} no address")
        mac = multus.attachment_of(result, "", "eth0").mac
        self._write_record(uid, {**record, "ips": ips, "mac": mac, "runtime": runtime})
        log.info("pod network set up: %s", ", ".join(ips), extra={"uid": uid, "node": self.node_name})
        return ips

    def _invocation(self, uid: str, namespace: str, name: str) -> cni.Invocation:
        return cni.Invocation(uid, netns.netns_path(pod_netns(uid)), "eth0", cni.pod_args(namespace, name, uid))

    async def attach(self, pod: Mapping[str, Any], delegates: list[multus.Delegate]) -> list[multus.Attachment]:
        """The pod's secondary networks, after its `eth0` (idempotent)."""
        meta = pod["metadata"]
        uid = str(meta["uid"])
        call = self._invocation(uid, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        return await self.multus.attach(uid, call, delegates)

    async def teardown(self, uid: str) -> None:
        """CNI DEL (frees the IP, removes the veth) and the namespace; no-op for a pod without a sandbox."""
        record = self._read_record(uid)
        if record is None:
            await self.multus.detach(uid, cni.Invocation(uid, netns.netns_path(pod_netns(uid)), "", ""))
            return
        call = self._invocation(uid, str(record.get("namespace") or ""), str(record.get("name") or ""))
        # Multus deletes the secondary networks before the default one.
        await self.multus.detach(uid, call)
        conflist = record.get("conflist") or (self._conflist_file() if self.conf_file.exists() else None)
        if conflist is not None:
            runtime = record.get("runtime") or {}
            await cni.del_network(conflist, call, run_in=self.cluster.netns, runtime=runtime)
        await netns.delete(str(record["netns"]))
        self._record_file(uid).unlink(missing_ok=True)
        log.info("pod network torn down", extra={"uid": uid, "node": self.node_name})

    def _conflist_file(self) -> dict[str, Any]:
        conflist: dict[str, Any] = json.loads(self.conf_file.read_text())
        return conflist

    def recorded_uids(self) -> list[str]:
        primary = {p.stem for p in self.records.glob("*.json")} if self.records.is_dir() else set()
        return sorted(primary | set(self.multus.recorded_uids()))

    async def collect_garbage(self, live: set[str]) -> int:
        """Tear down the sandboxes of pods this node no longer has (left by a crash); how many."""
        removed = 0
        for uid in self.recorded_uids():
            if uid in live:
                continue
            try:
                await self.teardown(uid)
            except NetworkError as exc:
                log.warning("could not remove a stale pod network: %s", exc, extra={"uid": uid})
                continue
            removed += 1
        return removed


def remove_node_networks(node_data_dir: Path) -> int:
    """Delete every pod sandbox a node recorded and free its IPs, at once and without CNI (a power cut's clean-up:
    `down --all`, tests); the veths die with the namespaces. How many."""
    base = Path(node_data_dir) / "cni"
    records = sorted((base / "pods").glob("*.json")) if (base / "pods").is_dir() else []
    ipam = base / "ipam"
    # host-local keeps one directory a network: the node's own and every secondary network's.
    networks = [d for d in ipam.iterdir() if d.is_dir()] if ipam.is_dir() else []
    removed = 0
    for path in records:
        uid = path.stem
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        name = str(record.get("netns") or pod_netns(uid))
        if netns.exists(name):
            subprocess.run([IP, "netns", "delete", name], check=False, capture_output=True)
        # Secondary networks and a NAD replacing eth0 lease from the stores their configurations name.
        secondary = multus.recorded_lease_dirs(base / "multus" / path.name)
        secondary += multus.lease_dirs(record.get("conflist") or {})
        for leases in [*networks, *(d for d in secondary if d.is_dir())]:
            for lease in leases.iterdir():
                with contextlib.suppress(OSError):
                    if lease.read_text().split("\n", 1)[0].strip() == uid:
                        lease.unlink()
        path.unlink(missing_ok=True)
        (base / "multus" / path.name).unlink(missing_ok=True)
        removed += 1
    return removed
