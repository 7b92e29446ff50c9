"""Secondary networks delegated as Multus does: each network the pod's `k8s.v1.cni.cncf.io/networks` annotation
selects is its NetworkAttachmentDefinition's CNI configuration, run with ADD in the pod's namespace under the
interface name the selection gives (KubeVirt's `pod<hash>`), and DEL in reverse order when the sandbox goes.

What was attached is recorded on disk before the plugins run, so an agent that crashed mid-way still deletes it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import network_attachment as nad
from pykubevirt.node import cni
from pykubevirt.node.netns import NetworkError

log = logging.getLogger("pykubevirt.node.multus")

# Multus names secondary interfaces net1, net2… when the selection gives none.
ORDINAL_PREFIX = "net"


class DelegateError(NetworkError):
    """A network selection cannot be delegated (its NAD is missing or its configuration is not CNI)."""


@dataclass(frozen=True, slots=True)
class Delegate:
    """One secondary network to attach: the selection and its NAD's CNI configuration list."""

    selection: nad.NetworkSelection
    ifname: str
    conflist: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attached network as network-status reports it."""

    network: str
    ifname: str
    ips: tuple[str, ...]
    mac: str
    gateway: tuple[str, ...] = ()

    def status(self, *, default: bool = False) -> dict[str, Any]:
        return nad.network_status(self.network, self.ifname, self.ips, self.mac, default=default, gateway=self.gateway)


def missing_nad_message(selection: nad.NetworkSelection) -> str:
    """Multus's error for a selection whose NAD does not exist (what the kubelet's event quotes)."""
    return (
        "error loading k8s delegates k8s args: TryLoadPodDelegates: error in getting k8s network for pod: "
        "GetNetworkDelegates: failed getting the delegate: getKubernetesDelegate: cannot find a "
        f"network-attachment-definition ({selection.name}) in namespace ({selection.namespace}): "
        f'{nad.PLURAL}.{nad.GROUP} "{selection.name}" not found'
    )


def delegate_conflist(definition: Mapping[str, Any], ipam_dir: Path) -> dict[str, Any]:
    """The NAD's `spec.config` as a configuration list (a single plugin's config becomes a list of one)."""
    meta = definition.get("metadata") or {}
    text = str((definition.get("spec") or {}).get("config") or "")
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    try:
        config = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise DelegateError(
            f"GetNetworkDelegates: failed getting the delegate: {where}: invalid config: {exc}"
        ) from exc
    if not isinstance(config, dict) or not (config.get("type") or config.get("plugins")):
        raise DelegateError(f"GetNetworkDelegates: failed getting the delegate: {where}: config has no type or plugins")
    if "plugins" in config:
        conflist = dict(config)
    else:
        plugin = {k: v for k, v in config.items() if k not in ("cniVersion", "name")}
        conflist = {"cniVersion": config.get("cniVersion") or "0.3.1", "name": config.get("name"), "plugins": [plugin]}
    conflist["name"] = str(conflist.get("name") or meta.get("name") or "")
    conflist["plugins"] = [_local_ipam(dict(p), ipam_dir) for p in conflist.get("plugins") or []]
    return conflist


def _local_ipam(plugin: dict[str, Any], ipam_dir: Path) -> dict[str, Any]:
    """host-local's store in the cluster's own directory unless the NAD names one (its default is the host's
    /var/lib/cni/networks, which outlives the cluster)."""
    ipam = plugin.get("ipam")
    if isinstance(ipam, dict) and ipam.get("type") == "host-local" and not ipam.get("dataDir"):
        plugin["ipam"] = {**ipam, "dataDir": str(ipam_dir)}
    return plugin


def lease_dirs(conflist: Mapping[str, Any]) -> list[Path]:
    """Where host-local keeps this configuration's leases (its dataDir, one directory per network name)."""
    found = []
    for plugin in conflist.get("plugins") or []:
        ipam = plugin.get("ipam") if isinstance(plugin, Mapping) else None
        if isinstance(ipam, Mapping) and ipam.get("type") == "host-local" and ipam.get("dataDir"):
            found.append(Path(str(ipam["dataDir"])) / str(conflist.get("name") or ""))
    return found


def recorded_lease_dirs(record: Path) -> list[Path]:
    """The lease directories of every delegate a pod's record names (none when it is unreadable)."""
    try:
        entries = json.loads(record.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(entries, list):
        return []
    return [d for e in entries if isinstance(e, dict) for d in lease_dirs(e.get("conflist") or {})]


def interface_names(selections: Sequence[nad.NetworkSelection]) -> list[str]:
    """Each selection's interface: the one it asks for, else Multus's ordinal `net<n>`."""
    return [s.interface or f"{ORDINAL_PREFIX}{i}" for i, s in enumerate(selections, start=1)]


def attachment_of(result: Mapping[str, Any], network: str, ifname: str) -> Attachment:
    """What a CNI result says about the sandbox's interface: its addresses (with prefix), MAC and gateways."""
    interfaces = result.get("interfaces") or []
    mac = ""
    index = None
    for i, iface in enumerate(interfaces):
        if iface.get("name") == ifname and iface.get("sandbox"):
            mac, index = str(iface.get("mac") or ""), i
    ips, gateways = [], []
    for ip in result.get("ips") or []:
        if ip.get("interface") is not None and index is not None and ip["interface"] != index:
            continue
        ips.append(str(ip["address"]).split("/")[0])
        if ip.get("gateway"):
            gateways.append(str(ip["gateway"]))
    return Attachment(network, ifname, tuple(ips), mac, tuple(gateways))


class Delegator:
    """One node's secondary attachments, one record file a pod."""

    def __init__(self, cni_dir: Path, run_in: str, ipam_dir: Path, cni_path: str = cni.CNI_PATH) -> None:
        self.records = Path(cni_dir) / "multus"
        self.ipam_dir = Path(ipam_dir)
        self.run_in = run_in
        self.cni_path = cni_path

    def _file(self, uid: str) -> Path:
        return self.records / f"{uid}.json"

    def _read(self, uid: str) -> list[dict[str, Any]]:
        try:
            entries = json.loads(self._file(uid).read_text())
        except (OSError, ValueError):
            return []
        return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []

    def _write(self, uid: str, entries: Sequence[Mapping[str, Any]]) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        path = self._file(uid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(list(entries), sort_keys=True))
        os.replace(tmp, path)

    def recorded(self, uid: str) -> list[Attachment] | None:
        """The pod's attachments when all of them completed (after an agent restart too)."""
        entries = self._read(uid)
        if not entries or not all(e.get("done") for e in entries):
            return None
        return [Attachment(str(e["network"]), str(e["ifname"]), tuple(e["ips"]), str(e["mac"])) for e in entries]

    def intend(self, uid: str, delegates: Sequence[Delegate]) -> list[dict[str, Any]]:
        """Record the delegates before any plugin runs, so a crash at any point leaves them to delete."""
        entries = [
            {"network": d.selection.key, "ifname": d.ifname, "conflist": d.conflist, "done": False} for d in delegates
        ]
        self._write(uid, entries)
        return entries

    def pending(self, uid: str) -> bool:
        """Whether the pod has delegates recorded that are not all attached."""
        entries = self._read(uid)
        return bool(entries) and not all(e.get("done") for e in entries)

    async def attach(self, uid: str, call: cni.Invocation, delegates: Sequence[Delegate]) -> list[Attachment]:
        """ADD every delegate in order (idempotent); on a failure the ones added are deleted again."""
        done = self.recorded(uid)
        if done is not None and [a.ifname for a in done] == [d.ifname for d in delegates]:
            return done
        await self.detach(uid, call)  # what a crash or an earlier failure left, if anything ran
        entries = self.intend(uid, delegates)
        attachments = []
        try:
            for delegate, entry in zip(delegates, entries, strict=True):
                network = delegate.selection.key
                entry["started"] = True
                self._write(uid, entries)
                result = await cni.add_network(delegate.conflist, _for(call, delegate.ifname), run_in=self.run_in)
                attachment = attachment_of(result, network, delegate.ifname)
                entry.update({"ips": list(attachment.ips), "mac": attachment.mac, "done": True})
                self._write(uid, entries)
                attachments.append(attachment)
                log.info("added %s from %s: %s", delegate.ifname, network, ", ".join(attachment.ips) or "no address")
        except NetworkError:
            await self.detach(uid, call)
            raise
        return attachments

    async def detach(self, uid: str, call: cni.Invocation) -> None:
        """DEL every recorded delegate in reverse order and forget them (no-op for a pod without any)."""
        entries = self._read(uid)
        for entry in reversed(entries):
            if not entry.get("started"):
                continue  # only intended: no plugin ever ran for it
            await cni.del_network(entry["conflist"], _for(call, str(entry["ifname"])), run_in=self.run_in)
        if entries:
            log.info("removed %d secondary networks", len(entries), extra={"uid": uid})
        self._file(uid).unlink(missing_ok=True)

    def recorded_uids(self) -> list[str]:
        return sorted(p.stem for p in self.records.glob("*.json")) if self.records.is_dir() else []


def _for(call: cni.Invocation, ifname: str) -> cni.Invocation:
    return cni.Invocation(call.container_id, call.netns_path, ifname, call.args)
