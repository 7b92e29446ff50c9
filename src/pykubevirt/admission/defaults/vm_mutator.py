"""The VirtualMachine mutating webhook: instancetype matchers, firmware IDs, architecture and machine type."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import (
    ARCH_AMD64,
    ARCH_ARM64,
    ARCH_S390X,
    DATA_SOURCE_KIND,
    VM_MUTATOR_WEBHOOK,
    MutationDenied,
    dicts,
    obj,
)
from pykubevirt.admission.defaults.compute_defaults import set_default_architecture, set_default_machine_type
from pykubevirt.admission.defaults.firmware_defaults import set_vm_firmware_defaults
from pykubevirt.admission.defaults.serialization import (
    add_struct_artefacts,
    canonicalize_data_volume_templates,
    canonicalize_vmi_spec,
)
from pykubevirt.admission.defaults.vm_instancetype import (
    apply_preference_defaults,
    find_preference_spec,
    infer_matchers,
    matcher_causes,
)
from pykubevirt.admission.defaults.vmi_mutator import set_pci_topology_version
from pykubevirt.admission.defaults.vmi_spec import supports_pcie_hotplug
from pykubevirt.api.json_lookup import get

TEMPLATE_ARCH_LABEL = "template.kubevirt.io/architecture"
KNOWN_ARCHITECTURES = (ARCH_AMD64, ARCH_ARM64, ARCH_S390X)


def _data_source_architecture(vm: dict[str, Any], ctx: AdmissionContext) -> str | None:
    """The architecture labelled on the first DataSource (or the one it points to) a DataVolumeTemplate uses."""
    for template in dicts(get(vm, "spec", "dataVolumeTemplates")):
        ref = get(template, "spec", "sourceRef")
        if not isinstance(ref, dict) or str(ref.get("kind", "")).lower() != "datasource":
            continue
        namespace = ref.get("namespace") or get(vm, "metadata", "namespace")
        source = ctx.lookup.get(DATA_SOURCE_KIND, namespace, str(ref.get("name", "")))
        if source is None:
            continue
        nested = get(source, "spec", "source", "dataSource")
        if isinstance(nested, dict):
            source = ctx.lookup.get(DATA_SOURCE_KIND, nested.get("namespace"), str(nested.get("name", "")))
            if source is None:
                continue
        arch = get(source, "metadata", "labels", TEMPLATE_ARCH_LABEL)
        # Unknown values are ignored and the next template is tried.
        if arch in KNOWN_ARCHITECTURES:
            return str(arch)
    return None


def _mutate(vm: dict[str, Any], ctx: AdmissionContext, operation: str, old: dict[str, Any] | None) -> None:
    causes = matcher_causes(vm, old, operation)
    if causes:
        raise AdmissionRejected(causes, VM_MUTATOR_WEBHOOK)
    infer_matchers(vm, ctx)
    apply_preference_defaults(vm, find_preference_spec(vm, ctx))

    spec = vm.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        # No template: nothing to default, validation rejects it.
        return
    template_spec = obj(template, "spec")
    if template_spec is None:
        return
    if operation == "CREATE":
        # Only at creation: on update the VM controller owns the firmware UUID.
        set_vm_firmware_defaults(template_spec, ctx)
    if not template_spec.get("architecture"):
        arch = _data_source_architecture(vm, ctx)
        if arch is not None:
            template_spec["architecture"] = arch
    set_default_architecture(template_spec, ctx.config)
    set_default_machine_type(template_spec)
    if operation == "CREATE" and supports_pcie_hotplug(template_spec):
        metadata = obj(template, "metadata")
        if metadata is not None:
            set_pci_topology_version(metadata)
    add_struct_artefacts(template_spec)
    canonicalize_vmi_spec(template_spec)
    if isinstance(spec, dict):
        canonicalize_data_volume_templates(spec)


def mutate_vm(vm: dict[str, Any], ctx: AdmissionContext, *, operation: str, old: dict[str, Any] | None = None) -> None:
    """Apply the VM mutator in place (CREATE and UPDATE); a VM being deleted is left alone.

    Raises AdmissionRejected (422) for invalid instancetype/preference matchers and MutationDenied (400) when a
    matcher cannot be inferred from its volume.
    """
    if get(vm, "metadata", "deletionTimestamp") is not None:
        return
    try:
        _mutate(vm, ctx, operation, old)
    except MutationDenied as denied:
        denied.webhook = denied.webhook or VM_MUTATOR_WEBHOOK
        raise
