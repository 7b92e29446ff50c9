"""KubeVirt's per-VMI detail metrics from virt-controller's caches: addresses, vNICs and migration times. Pure.

Labels and values follow pkg/monitoring/metrics/virt-controller/vmistats_collector.go.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from pykubevirt.api.timestamps import parse_time

# The binding of an interface as KubeVirt's GetBinding reports it: (binding_type, binding_name).
_CORE_BINDINGS = ("masquerade", "bridge", "sriov")


def binding_of(interface: Mapping[str, Any]) -> tuple[str, str]:
    for name in _CORE_BINDINGS:
        if name in interface:
            return "core", name
    plugin = interface.get("binding")
    if isinstance(plugin, Mapping):
        return "plugin", str(plugin.get("name", ""))
    return "", ""


def network_name(networks: Iterable[Mapping[str, Any]], interface: str) -> str | None:
    """`pod networking` or the Multus network of the VMI network named like the interface; None when none is."""
    for network in networks:
        if network.get("name") != interface:
            continue
        if "pod" in network:
            return "pod networking"
        multus = network.get("multus")
        if isinstance(multus, Mapping):
            return str(multus.get("networkName", ""))
    return None


def _identity(vmi: Mapping[str, Any]) -> tuple[str, str, str]:
    metadata = vmi.get("metadata") or {}
    node = str((vmi.get("status") or {}).get("nodeName", ""))
    return node, str(metadata.get("namespace", "")), str(metadata.get("name", ""))


def detail_families(vmis: Iterable[Mapping[str, Any]], migration_names: Mapping[str, str]) -> Iterator[Metric]:
    """kubevirt_vmi_status_addresses, kubevirt_vmi_vnic_info and kubevirt_vmi_migration_{start,end}_time_seconds;
    `migration_names` maps a migration's uid to its name."""
    addresses = GaugeMetricFamily(
        "kubevirt_vmi_status_addresses",
        "The addresses of a VirtualMachineInstance. This metric provides the address of an available network "
        "interface associated with the VMI in the 'address' label, and about the type of address, such as internal "
        "IP, in the 'type' label.",
        labels=["node", "namespace", "name", "vnic_name", "interface_name", "address", "type"],
    )
    vnics = GaugeMetricFamily(
        "kubevirt_vmi_vnic_info",
        "Details of VirtualMachineInstance (VMI) vNIC interfaces, such as vNIC name, binding type, network name, and "
        "binding name for each vNIC of a running instance.",
        labels=["name", "namespace", "vnic_name", "binding_type", "network", "binding_name", "model"],
    )
    started = GaugeMetricFamily(
        "kubevirt_vmi_migration_start_time_seconds",
        "The time at which the migration started.",
        labels=["node", "namespace", "name", "migration_name"],
    )
    ended = GaugeMetricFamily(
        "kubevirt_vmi_migration_end_time_seconds",
        "The time at which the migration ended.",
        labels=["node", "namespace", "name", "migration_name", "status"],
    )
    for vmi in vmis:
        node, namespace, name = _identity(vmi)
        status = vmi.get("status") or {}
        for interface in status.get("interfaces") or []:
            ip = str(interface.get("ipAddress", ""))
            vnic, guest_name = str(interface.get("name", "")), str(interface.get("interfaceName", ""))
            if not ip and not vnic and not guest_name:
                continue
            kind = "ExternalInterface" if ip else "SystemInterface"
            addresses.add_metric([node, namespace, name, vnic, guest_name, ip, kind], 1.0)
        spec = vmi.get("spec") or {}
        networks = spec.get("networks") or []
        for interface in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []:
            network = network_name(networks, str(interface.get("name", "")))
            if network is None:
                continue
            binding_type, binding_name = binding_of(interface)
            model = str(interface.get("model") or "<none>")
            vnics.add_metric(
                [name, namespace, str(interface.get("name", "")), binding_type, network, binding_name, model], 1.0
            )
        state = status.get("migrationState") or {}
        migration = migration_names.get(str(state.get("migrationUid", "")), "")
        begin, end = parse_time(state.get("startTimestamp")), parse_time(state.get("endTimestamp"))
        if begin is not None:
            started.add_metric([node, namespace, name, migration], begin.timestamp())
        if end is not None:
            outcome = ("failed" if state.get("failed") else "succeeded") if state.get("completed") else ""
            ended.add_metric([node, namespace, name, migration, outcome], end.timestamp())
    yield from (addresses, vnics, started, ended)
