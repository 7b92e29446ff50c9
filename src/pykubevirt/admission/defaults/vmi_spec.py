"""The VMI spec defaults in KubeVirt's order: the shared spec part and the full set the VMI mutator applies."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import compute_defaults as compute
from pykubevirt.admission.defaults import device_defaults as devices
from pykubevirt.admission.defaults import feature_defaults as features
from pykubevirt.admission.defaults import firmware_defaults as firmware
from pykubevirt.admission.defaults.common import ARCH_AMD64, ARCH_ARM64, ARCH_S390X
from pykubevirt.api.json_lookup import get


def set_vmi_spec_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> None:
    """Default a VMI spec in place, as SetDefaultVirtualMachineInstanceSpec does.

    Raises MutationDenied when the default pod interface is a binding the cluster does not allow.
    """
    config = ctx.config
    compute.set_default_architecture(spec, config)
    compute.set_default_machine_type(spec)
    compute.set_default_resource_requests(spec, config)
    compute.set_guest_memory(spec)
    compute.set_default_guest_cpu_topology(spec)
    devices.set_default_pull_policies(spec)
    compute.set_default_eviction_strategy(spec, config)
    devices.set_default_network_interface(spec, config)
    devices.set_default_volume_disks(spec)


def set_object_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> None:
    """The API type's own defaults (SetObjectDefaults_VirtualMachineInstance): firmware, features, devices, probes."""
    firmware.set_firmware_defaults(spec, ctx)
    features.set_feature_defaults(spec)
    devices.set_disk_target_defaults(spec)
    devices.set_input_defaults(spec)
    devices.set_probe_defaults(spec)


def set_arch_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> None:
    """Disk bus, watchdog, CPU model and bootloader per architecture; unknown architectures get amd64's."""
    arch = spec.get("architecture")
    if arch == ARCH_ARM64:
        compute.set_default_arm64_cpu_model(spec)
        firmware.set_arm64_bootloader(spec)
        devices.set_default_disk_bus(spec, devices.BUS_VIRTIO)
    elif arch == ARCH_S390X:
        devices.set_default_disk_bus(spec, devices.BUS_VIRTIO)
        devices.set_watchdog_defaults(spec, "diag288")
    else:
        # q35 has no IDE, and SATA works in guests without extra drivers.
        devices.set_default_disk_bus(spec, devices.BUS_SATA)
        devices.set_watchdog_defaults(spec, "i6300esb")
    compute.set_default_cpu_model(spec, ctx.config)


def set_vmi_defaults(vmi: dict[str, Any], ctx: AdmissionContext) -> str | None:
    """All defaults of a new VMI (SetDefaultVirtualMachineInstance), spec and status, in place.

    Returns the Hyper-V dependency conflict, if any, which KubeVirt leaves to validation.
    """
    spec = vmi.get("spec")
    if not isinstance(spec, dict):
        spec = vmi["spec"] = {}
    set_vmi_spec_defaults(spec, ctx)
    if spec.get("architecture") == ARCH_S390X:
        features.set_s390x_features(spec)
    set_object_defaults(spec, ctx)
    conflict = features.set_hyperv_dependencies(spec)
    set_arch_defaults(spec, ctx)
    compute.set_guest_memory_status(vmi)
    compute.set_current_cpu_topology_status(vmi)
    compute.setup_hotplug(spec, ctx.config)
    return conflict


def supports_pcie_hotplug(spec: dict[str, Any]) -> bool:
    """PCIe root ports exist on amd64/arm64 (or unset) with a q35 or virt machine type (or none)."""
    if spec.get("architecture") not in (ARCH_AMD64, ARCH_ARM64, "", None):
        return False
    machine = get(spec, "domain", "machine")
    if isinstance(machine, dict):
        machine_type = str(machine.get("type") or "")
        if "q35" not in machine_type and not machine_type.startswith("virt"):
            return False
    return True
