"""The launcher pod's Multus annotations, as virt-controller writes them (`pkg/network/multus/annotation.go`,
`pkg/network/pod/annotations/generator.go`): the secondary networks to attach, and the NAD that replaces the
cluster's default network; and what it reads back from the pod's network-status (`pkg/network/controllers`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import network_attachment as nad
from pykubevirt.api.kubevirt import multus_status, network_names


def _namespaced(network_name: str, vmi_namespace: str) -> tuple[str, str]:
    """`[<ns>/]<nad>` → (namespace, name); the VMI's namespace when none is given."""
    namespace, _, name = network_name.rpartition("/")
    return namespace or vmi_namespace, name


def multus_annotations(vmi: Mapping[str, Any]) -> dict[str, str]:
    """`k8s.v1.cni.cncf.io/networks` for the non-default Multus networks (interfaces being unplugged excluded),
    `v1.multus-cni.io/default-network` for a `multus.default` one; empty when the VMI has neither."""
    spec = vmi.get("spec") or {}
    namespace = str((vmi.get("metadata") or {}).get("namespace") or "")
    interfaces = {
        str(i.get("name")): i for i in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
    }
    selections: list[dict[str, str]] = []
    annotations: dict[str, str] = {}
    for network in spec.get("networks") or []:
        multus = network.get("multus")
        if not isinstance(multus, Mapping):
            continue
        network_name = str(multus.get("networkName") or "")
        if network_names.is_default_multus(network):
            annotations[nad.DEFAULT_NETWORK_ANNOTATION] = network_name
            continue
        iface = interfaces.get(str(network.get("name"))) or {}
        if iface.get("state") == "absent":
            continue
        nad_namespace, nad_name = _namespaced(network_name, namespace)
        # Go's json.Marshal of Multus's NetworkSelectionElement: its field order, `mac` omitted when empty.
        selection = {"name": nad_name, "namespace": nad_namespace}
        if iface.get("macAddress"):
            selection["mac"] = str(iface["macAddress"])
        selection["interface"] = network_names.pod_interface(network)
        selections.append(selection)
    if selections:
        annotations[nad.NETWORKS_ANNOTATION] = json.dumps(selections, separators=(",", ":"))
    return annotations


def sync_multus_status(vmi: dict[str, Any], pod: Mapping[str, Any]) -> None:
    """Mark the VMI's secondary interfaces that the pod's network-status lists (`multus-status`, podInterfaceName)."""
    networks = (vmi.get("spec") or {}).get("networks") or []
    if not any(network_names.is_secondary_multus(n) for n in networks):
        return
    status = vmi.setdefault("status", {})
    interfaces = multus_status.from_network_status(vmi, nad.read_network_status(pod))
    if interfaces != (status.get("interfaces") or []):
        status["interfaces"] = interfaces
