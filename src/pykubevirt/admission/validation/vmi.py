"""The VMI spec validation shared by VM templates and VMIs, and the VMI create/update admitters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation import compute, devices, dns, firmware, lifecycle, volumes
from pykubevirt.admission.validation.access_credentials import validate_access_credentials
from pykubevirt.admission.validation.arch import validate_hyperv, validate_per_arch
from pykubevirt.admission.validation.disks import validate_boot_order, validate_disks
from pykubevirt.admission.validation.machine import validate_machine
from pykubevirt.admission.validation.metadata import reserved_labels, validate_vmi_metadata
from pykubevirt.admission.validation.networks import (
    interfaces_of,
    lookup_pod_network,
    validate_networks,
    validate_networks_creation,
)
from pykubevirt.admission.validation.probes import validate_probe, validate_probes_need_pod_network
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported
from pykubevirt.api.json_lookup import as_int, as_list, as_map, get, parse_quantity
from pykubevirt.config.feature_gates import GATES, GateState

_DISCONTINUED_GATE_MESSAGES = {
    "Passt": (
        "passt",
        "Passt network binding is discontinued since v1.3. Please refer to Kubevirt user guide for alternatives.",
    ),
    "Macvtap": (
        "macvtap",
        "Macvtap network binding is discontinued since v1.3. Please refer to Kubevirt user guide for alternatives.",
    ),
}


def validate_vmi_spec(spec: Mapping[str, Any], path: FieldPath, ctx: AdmissionContext) -> list[Cause]:
    """ValidateVirtualMachineInstanceSpec: every rule shared by VMIs and VM templates, in upstream's order."""
    causes: list[Cause] = []
    causes += dns.validate_hostname(path, spec)
    causes += dns.validate_subdomain(path, spec)
    causes += compute.validate_memory_requests(path, spec)
    causes += compute.validate_memory_limits(path, spec)
    causes += compute.validate_hugepages(path, spec)
    causes += compute.validate_guest_memory_limit(path, spec, ctx)
    causes += validate_machine(path, spec, ctx)
    causes += firmware.validate_firmware_acpi(path.child("acpi"), spec)
    causes += compute.validate_cpu_requests_and_limits(path, spec)
    causes += compute.validate_dedicated_cpus(path, spec, ctx)
    causes += compute.validate_numa(path, spec, ctx)
    causes += compute.validate_isolate_emulator_thread(path, spec)
    causes += compute.validate_cpu_feature_policies(path, spec)
    causes += compute.validate_cpu_hotplug(path, spec)
    causes += lifecycle.validate_start_strategy(path, spec)
    causes += compute.validate_realtime(path, spec)
    # Affinity and topology-spread checks (copied by KubeVirt from Kubernetes) are left to the pod's own admission.
    causes += validate_networks(path, spec, ctx)
    causes += validate_boot_order(path, spec, ctx)
    causes += devices.validate_input_devices(path, spec)
    causes += compute.validate_io_threads_policy(path, spec)
    causes += validate_probe(path.child("readinessProbe"), spec.get("readinessProbe"))
    causes += validate_probe(path.child("livenessProbe"), spec.get("livenessProbe"))
    if lookup_pod_network(spec) is None:
        causes += validate_probes_need_pod_network(path.child("readinessProbe"), spec.get("readinessProbe"))
        causes += validate_probes_need_pod_network(path.child("livenessProbe"), spec.get("livenessProbe"))
    causes += _validate_domain(path.child("domain"), as_map(spec.get("domain")))
    causes += volumes.validate_volumes(path.child("volumes"), volumes.volumes_of(spec), ctx)
    causes += volumes.validate_container_disks(path, spec)
    causes += volumes.validate_utility_volumes_on_creation(path, spec)
    causes += validate_access_credentials(path.child("accessCredentials"), spec)
    causes += dns.validate_dns_policy(path, spec)
    causes += dns.validate_dns_config(path, spec)
    causes += lifecycle.validate_eviction_strategy(path, spec, ctx)
    causes += devices.validate_mdev_ramfb(path, spec)
    causes += devices.validate_host_devices_gate(path, spec, ctx)
    causes += devices.validate_sound(path, spec)
    causes += firmware.validate_launch_security(path, spec, ctx)
    causes += devices.validate_vsock(path, spec, ctx)
    causes += devices.validate_persistent_reservation(path, spec, ctx)
    causes += devices.validate_downward_metrics_device(path, spec, ctx)
    causes += devices.validate_virtiofs_filesystems(path, spec, ctx)
    causes += devices.validate_video(path, spec)
    causes += devices.validate_panic_devices(path, spec, ctx)
    causes += lifecycle.validate_reboot_policy(path, spec, ctx)
    causes += compute.validate_reserved_overhead(path, spec, ctx)
    causes += volumes.validate_service_account_name(path, spec)
    return causes


def _validate_domain(path: FieldPath, domain: Mapping[str, Any]) -> list[Cause]:
    disks = [as_map(d) for d in as_list(get(domain, "devices", "disks"))]
    causes = validate_disks(path.child("devices", "disks"), disks)
    causes += firmware.validate_firmware(path.child("firmware"), domain.get("firmware"))
    causes += firmware.validate_secure_boot(path, domain)
    return causes


def validate_discontinued_gates(spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """featuregate.ValidateFeatureGates: a discontinued gate still listed in the config and used by the spec."""
    causes: list[Cause] = []
    for gate in sorted(ctx.config.feature_gates):
        if GATES.get(gate) is not GateState.DISCONTINUED or gate not in _DISCONTINUED_GATE_MESSAGES:
            continue
        key, message = _DISCONTINUED_GATE_MESSAGES[gate]
        if any(iface.get(key) is not None for iface in interfaces_of(spec)):
            causes.append(not_supported("", message))
    return causes


def _storage_spec_validator(path: FieldPath, spec: Mapping[str, Any]) -> list[Cause]:
    """storageadmitters.Validate, which virt-api registers as an extra VMI spec validator."""
    disks = [as_map(d) for d in as_list(get(spec, "domain", "devices", "disks"))]
    causes = volumes.validate_container_disks(path, spec)
    causes += volumes.validate_utility_volumes_on_creation(path, spec)
    causes += validate_disks(path.child("domain", "devices", "disks"), disks)
    return causes


def validate_vmi_create(vmi: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """VMICreateAdmitter.Admit on a mutated VMI."""
    spec = as_map(vmi.get("spec"))
    metadata = as_map(vmi.get("metadata"))
    path = FieldPath("spec")
    causes = validate_discontinued_gates(spec, ctx)
    # virt-api registers the network and storage validators again on top of the shared spec validation, so a
    # VMI gets those causes twice, exactly as KubeVirt reports them.
    causes += validate_networks_creation(path, spec) + validate_networks(path, spec, ctx)
    causes += _storage_spec_validator(path, spec)
    causes += validate_vmi_spec(spec, path, ctx)
    causes += volumes.validate_volume_disks(path, spec)
    causes += compute.validate_mandatory_memory(path, spec)
    causes += validate_vmi_metadata(FieldPath("metadata"), metadata, ctx, is_kubevirt=ctx.is_kubevirt_service_account())
    causes += validate_hyperv(path.child("domain", "features", "hyperv"), spec)
    causes += validate_per_arch(path, spec)
    return causes


def validate_vmi_update(new: Mapping[str, Any], old: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """VMIUpdateAdmitter.Admit: only KubeVirt may change the spec, nobody else the reserved labels."""
    new_spec, old_spec = as_map(new.get("spec")), as_map(old.get("spec"))
    is_kubevirt = ctx.is_kubevirt_service_account()
    if new_spec != old_spec:
        if not is_kubevirt:
            return [not_supported("", "update of VMI object is restricted")]
        hotplug = _hotplug_changes(old_spec, new_spec)
        if hotplug:
            return hotplug
    if not is_kubevirt:
        new_labels = reserved_labels(get(new, "metadata", "labels"))
        old_labels = reserved_labels(get(old, "metadata", "labels"))
        if new_labels != old_labels:
            return [
                not_supported(
                    "", "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited"
                )
            ]
    return []


def _hotplug_changes(old_spec: Mapping[str, Any], new_spec: Mapping[str, Any]) -> list[Cause]:
    """admitHotplug's CPU and memory parts: maxSockets and maxGuest are fixed for the VMI's lifetime."""
    if as_int(get(old_spec, "domain", "cpu", "maxSockets")) != as_int(get(new_spec, "domain", "cpu", "maxSockets")):
        return [invalid("", "CPU topology maxSockets changed")]
    old_max = parse_quantity(get(old_spec, "domain", "memory", "maxGuest"))
    new_max = parse_quantity(get(new_spec, "domain", "memory", "maxGuest"))
    if old_max is not None and new_max is not None and old_max != new_max:
        return [invalid("", "Memory maxGuest changed")]
    return []
