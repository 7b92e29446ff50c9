"""Multus's API side for one pod: the NetworkAttachmentDefinitions its annotations select (loaded before any
plugin runs, so a missing one fails the sandbox with nothing created) and the network-status it gets back."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api import network_attachment as nad
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import Conflict, NotFound
from pykubevirt.client.resources import NETWORK_ATTACHMENT_DEFINITIONS, PODS
from pykubevirt.node import multus
from pykubevirt.node.pod_network import PodNetwork

log = logging.getLogger("pykubevirt.node.multus")

STATUS_WRITE_ATTEMPTS = 5


@dataclass(slots=True)
class PodNetworks:
    """What the pod asks of Multus: a NAD that replaces the default network, and the secondary networks."""

    default: dict[str, Any] | None = None
    default_name: str = ""
    delegates: list[multus.Delegate] = field(default_factory=list)

    @property
    def wanted(self) -> bool:
        return self.default is not None or bool(self.delegates)


def _prefixed(message: str, pod: Object) -> multus.DelegateError:
    meta = pod["metadata"]
    where = f"[{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}:multus-cni-network]"
    return multus.DelegateError(f'plugin type="multus" name="multus-cni-network" failed (add): {where}: {message}')


async def _definition(client: KubeClient, selection: nad.NetworkSelection, pod: Object) -> Object:
    try:
        return await client.get(NETWORK_ATTACHMENT_DEFINITIONS, selection.name, selection.namespace)
    except NotFound as exc:
        raise _prefixed(multus.missing_nad_message(selection), pod) from exc


async def resolve(client: KubeClient, pod: Object, ipam_dir: Path) -> PodNetworks:
    """Load every delegate the pod's annotations select (Multus's TryLoadPodDelegates)."""
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    namespace = str(meta.get("namespace") or "default")
    found = PodNetworks()
    try:
        default = nad.parse_selections(str(annotations.get(nad.DEFAULT_NETWORK_ANNOTATION) or ""), namespace)
        selections = nad.parse_selections(str(annotations.get(nad.NETWORKS_ANNOTATION) or ""), namespace)
    except nad.SelectionError as exc:
        raise _prefixed(f"error loading k8s delegates k8s args: {exc}", pod) from exc
    for selection in default[:1]:
        found.default = multus.delegate_conflist(await _definition(client, selection, pod), ipam_dir)
        found.default_name = selection.key
    for selection, ifname in zip(selections, multus.interface_names(selections), strict=True):
        conflist = multus.delegate_conflist(await _definition(client, selection, pod), ipam_dir)
        found.delegates.append(multus.Delegate(selection, ifname, conflist))
    return found


async def write_network_status(
    client: KubeClient, pod: Object, default: multus.Attachment | None, attached: Sequence[multus.Attachment]
) -> None:
    """The pod's `k8s.v1.cni.cncf.io/network-status`: the default network first, then each secondary one."""
    entries = ([default.status(default=True)] if default is not None else []) + [a.status() for a in attached]
    text = json.dumps(entries, indent=4)
    current: Object | None = copy_json(pod)
    for _ in range(STATUS_WRITE_ATTEMPTS):
        if current is None:
            return
        annotations = current["metadata"].setdefault("annotations", {})
        if annotations.get(nad.NETWORK_STATUS_ANNOTATION) == text:
            return
        annotations[nad.NETWORK_STATUS_ANNOTATION] = text
        try:
            await client.update(PODS, current)
            return
        except NotFound:
            return
        except Conflict:
            try:
                current = await client.get(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
            except NotFound:
                return
            if current["metadata"].get("uid") != pod["metadata"].get("uid"):
                return
    log.warning("could not write the pod's network-status", extra={"uid": pod["metadata"].get("uid")})


async def setup(client: KubeClient, network: PodNetwork, pod: Object) -> tuple[list[str], list[multus.Attachment]]:
    """The pod's default network and then its secondary ones, with network-status written when it asked for any;
    the pod's IPs and what was attached."""
    uid = str(pod["metadata"]["uid"])
    wanted = await resolve(client, pod, network.multus.ipam_dir)
    if wanted.delegates and network.multus.recorded(uid) is None and not network.multus.pending(uid):
        network.multus.intend(uid, wanted.delegates)
    ips = await network.setup(pod, wanted.default, wanted.default_name)
    attached = await network.attach(pod, wanted.delegates) if wanted.delegates else []
    if wanted.wanted:
        await write_network_status(client, pod, network.default_attachment(uid), attached)
    return ips, attached
