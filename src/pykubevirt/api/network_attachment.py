"""The Network Plumbing Working Group's API that Multus implements: the NetworkAttachmentDefinition kind
(`k8s.cni.cncf.io/v1`), the pod annotations that request networks and report them, and their JSON shapes.

KubeVirt never parses a NAD's `config`; only the node's delegating CNI (Multus, here the node agent) runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.kinds import KindSpec
from pykubevirt.api.schema import obj, string

GROUP = "k8s.cni.cncf.io"
VERSION = "v1"
KIND = "NetworkAttachmentDefinition"
PLURAL = "network-attachment-definitions"

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
DEFAULT_NETWORK_ANNOTATION = "v1.multus-cni.io/default-network"

# Multus's own CRD (deployments/multus-daemonset.yml): only `spec.config`, a JSON string, and no status.
NETWORK_ATTACHMENT_DEFINITION = KindSpec(
    group=GROUP,
    version=VERSION,
    kind=KIND,
    plural=PLURAL,
    singular="network-attachment-definition",
    schema=obj(
        {
            "apiVersion": string("APIVersion defines the versioned schema of this representation of an object."),
            "kind": string("Kind is a string value representing the REST resource this object represents."),
            "metadata": {"type": "object"},
            "spec": obj(
                {"config": string("NetworkAttachmentDefinition config is a JSON-formatted CNI configuration")},
                "NetworkAttachmentDefinition spec defines the desired state of a network attachment",
            ),
        },
        "NetworkAttachmentDefinition is a CRD schema specified by the Network Plumbing Working Group to express "
        "the intent for attaching pods to one or more logical or physical networks.",
    ),
    short_names=("net-attach-def",),
    status_subresource=False,
)


class SelectionError(ValueError):
    """The pod's networks annotation cannot be parsed."""


@dataclass(frozen=True, slots=True)
class NetworkSelection:
    """One element of the networks annotation: which NAD, in which namespace, as which pod interface."""

    name: str
    namespace: str
    interface: str = ""
    mac: str = ""
    ips: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_selections(text: str, pod_namespace: str) -> list[NetworkSelection]:
    """The annotation's networks: a JSON list, or Multus's short form `[ns/]name[@ifname], …`."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise SelectionError(f"parsePodNetworkAnnotation: failed to parse pod Network Attachment: {exc}") from exc
        if not isinstance(items, list):
            raise SelectionError("parsePodNetworkAnnotation: the networks annotation is not a list")
        return [_selection(item, pod_namespace) for item in items]
    found = []
    for word in text.split(","):
        word = word.strip()
        name, _, ifname = word.partition("@")
        namespace, _, nad = name.rpartition("/")
        found.append(NetworkSelection(nad, namespace or pod_namespace, ifname))
    return found


def _selection(item: Any, pod_namespace: str) -> NetworkSelection:
    if not isinstance(item, dict) or not item.get("name"):
        raise SelectionError(f"parsePodNetworkAnnotation: invalid network selection element: {json.dumps(item)}")
    return NetworkSelection(
        str(item["name"]),
        str(item.get("namespace") or pod_namespace),
        str(item.get("interface") or ""),
        str(item.get("mac") or ""),
        tuple(str(ip) for ip in item.get("ips") or []),
    )


def network_status(
    network: str, interface: str, ips: Sequence[str], mac: str, *, default: bool = False, gateway: Sequence[str] = ()
) -> dict[str, Any]:
    """One element of the network-status annotation, in Multus's field order (`NetworkStatus`)."""
    entry: dict[str, Any] = {"name": network, "interface": interface}
    if ips:
        entry["ips"] = list(ips)
    if mac:
        entry["mac"] = mac
    if default:
        entry["default"] = True
    entry["dns"] = {}
    if gateway:
        entry["gateway"] = list(gateway)
    return entry


def read_network_status(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod's network-status entries (none when absent or unreadable)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(NETWORK_STATUS_ANNOTATION)
    try:
        entries = json.loads(text) if text else []
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
