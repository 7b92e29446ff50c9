"""KubeVirt's names for a VMI network's devices in the launcher pod (`pkg/network/namescheme`, `pkg/network/link`):
the pod interface (`eth0`, or `pod` + 11 hex of sha256(network name) for a secondary Multus network), and from it
the in-pod bridge `k6t-…`, the guest's tap `tap…` and the renamed CNI interface `…-nic` of the bridge binding."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

PRIMARY_POD_INTERFACE = "eth0"
HASHED_PREFIX = "pod"
# 15 (the kernel's longest name) minus "-nic", the suffix the bridge binding gives the CNI interface.
HASH_LENGTH = 11


def is_secondary_multus(network: Mapping[str, Any]) -> bool:
    multus = network.get("multus")
    return isinstance(multus, Mapping) and not multus.get("default")


def is_default_multus(network: Mapping[str, Any]) -> bool:
    multus = network.get("multus")
    return isinstance(multus, Mapping) and bool(multus.get("default"))


def hashed_interface(network_name: str) -> str:
    """GenerateHashedInterfaceName: `pod` + the first 11 hex digits of the network name's sha256."""
    return HASHED_PREFIX + hashlib.sha256(network_name.encode()).hexdigest()[:HASH_LENGTH]


def pod_interface(network: Mapping[str, Any]) -> str:
    """The pod interface that carries this VMI network."""
    return hashed_interface(str(network.get("name"))) if is_secondary_multus(network) else PRIMARY_POD_INTERFACE


def pod_interfaces(networks: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Network name → pod interface, for the pod network and every Multus network (CreateHashedNetworkNameScheme)."""
    return {
        str(n.get("name")): pod_interface(n)
        for n in networks
        if n.get("pod") is not None or n.get("multus") is not None
    }


def bridge_name(pod_iface: str) -> str:
    """The in-pod bridge: `k6t-` + the pod interface without its `pod` prefix."""
    return "k6t-" + pod_iface.removeprefix(HASHED_PREFIX)


def tap_name(pod_iface: str) -> str:
    """The guest's tap: `tap` + the pod interface from its fourth character (`tap0` for `eth0`)."""
    return "tap" + pod_iface[3:]


def nic_name(pod_iface: str) -> str:
    """What the bridge binding renames the CNI interface to, leaving its name to a dummy that keeps the IPs."""
    return pod_iface.removeprefix(HASHED_PREFIX) + "-nic"
