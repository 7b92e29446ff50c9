"""The VirtualMachine admitter: instance types, a defaulted template, run strategy, live-update limits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import REQUEST_ERROR
from pykubevirt.admission.validation.compute import live_update_memory_error
from pykubevirt.admission.validation.datavolume import (
    validate_datavolume_template_namespaces,
    validate_datavolume_templates,
)
from pykubevirt.admission.validation.metadata import validate_vmi_metadata
from pykubevirt.admission.validation.networks import validate_networks_creation
from pykubevirt.admission.validation.vmi import validate_discontinued_gates, validate_vmi_spec
from pykubevirt.admission.validation.volume_requests import validate_volume_requests
from pykubevirt.api.causes import Cause, FieldPath, invalid, not_supported, required
from pykubevirt.api.constants import RUN_STRATEGY_WAIT_AS_RECEIVER
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_lookup import as_int, as_list, as_map, as_str, get, parse_quantity
from pykubevirt.instancetype import instancetype_apply as itapply
from pykubevirt.instancetype.preference_apply import apply_preference

VALID_RUN_STRATEGIES = ("Halted", "Manual", "Always", "RerunOnFailure", "Once")


def _set_template_defaults(spec: dict[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """Default the template copy; a refusal (e.g. a forbidden default pod binding) is upstream's plain 400 error."""
    # Imported lazily so importing validation never pulls in the mutating side (and no cycle can form).
    from pykubevirt.admission.defaults.common import MutationDenied
    from pykubevirt.admission.defaults.vmi_spec import set_vmi_spec_defaults

    try:
        set_vmi_spec_defaults(spec, ctx)
    except MutationDenied as denied:
        return [Cause(REQUEST_ERROR, denied.message, "")]
    return []


def validate_vm(vm: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None) -> list[Cause]:
    """VMsAdmitter.Admit for CREATE (`old` None) or UPDATE; like upstream it stops at the first failing stage."""
    if get(vm, "metadata", "deletionTimestamp") is not None:
        return []
    vm_copy: dict[str, Any] = copy_json(dict(vm))
    raw_spec = vm_copy.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    template = spec.get("template")
    instancetype = preference = None
    if isinstance(template, dict):
        for key in ("spec", "metadata"):
            if not isinstance(template.get(key), dict):
                template[key] = {}
        template_spec: dict[str, Any] = template["spec"]
        template_metadata: dict[str, Any] = template["metadata"]
        instancetype = itapply.find_instancetype_spec(vm_copy, ctx.lookup)
        preference = itapply.find_preference_spec(vm_copy, ctx.lookup)
        if instancetype is not None or preference is not None:
            causes = itapply.check_spread_topology(instancetype, preference)
            if instancetype is not None:
                causes = causes or itapply.conflict_causes(template, instancetype, FieldPath("spec.template.spec"))
            if causes:
                return causes
            if instancetype is not None:
                itapply.apply_instancetype(template_spec, template_metadata, instancetype, preference)
            apply_preference(preference, template_spec, template_metadata)
        causes = _set_template_defaults(template_spec, ctx)
        causes = causes or itapply.check_requirements(instancetype, preference, template_spec)
        if causes:
            return causes

    if old is None:
        original_spec = as_map(get(vm, "spec", "template", "spec"))
        causes = validate_discontinued_gates(original_spec, ctx)
        if causes:
            return causes
        if isinstance(template, dict):
            causes = validate_networks_creation(FieldPath("spec"), as_map(template.get("spec")))
            if causes:
                return causes

    causes = validate_vm_spec(FieldPath("spec"), spec, ctx)
    if causes:
        return causes
    causes = validate_datavolume_template_namespaces(vm, old)
    if causes:
        return causes
    causes = _snapshot_and_restore(vm, old)
    if causes:
        return causes
    return validate_volume_requests(vm, ctx, validate_vmi_spec)


def validate_vm_spec(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """ValidateVirtualMachineSpec on the instancetype-applied, defaulted spec."""
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return [required(str(field.child("template")), "missing virtual machine template.")]
    template_spec = as_map(template.get("spec"))
    causes = validate_vmi_metadata(
        field.child("template", "metadata"),
        as_map(template.get("metadata")),
        ctx,
        is_kubevirt=ctx.is_kubevirt_service_account(),
    )
    causes += validate_vmi_spec(template_spec, field.child("template", "spec"), ctx)
    causes += validate_datavolume_templates(field, spec)
    causes += validate_run_strategy(field, spec, ctx)
    causes += _validate_live_update(field, template_spec, ctx)
    return causes


def validate_run_strategy(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    causes: list[Cause] = []
    running, strategy = spec.get("running"), spec.get("runStrategy")
    if running is not None and strategy is not None:
        causes.append(
            invalid(
                str(field.child("running")),
                "Running and RunStrategy are mutually exclusive. "
                "Note that Running is deprecated, please use RunStrategy instead",
            )
        )
    if running is None and strategy is None:
        causes.append(invalid(str(field.child("running")), "RunStrategy must be specified"))
    if strategy is None:
        return causes
    path = str(field.child("runStrategy"))
    if strategy == RUN_STRATEGY_WAIT_AS_RECEIVER:
        if not ctx.config.gate_enabled("DecentralizedLiveMigration"):
            causes.append(
                invalid(
                    path,
                    f"Invalid RunStrategy ({strategy}), DecentralizedLiveMigration feature gate is not enabled in "
                    "kubevirt resource",
                )
            )
    elif strategy not in VALID_RUN_STRATEGIES:
        causes.append(invalid(path, f"Invalid RunStrategy ({strategy})"))
    return causes


def _validate_live_update(field: FieldPath, template_spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """validateLiveUpdateFeatures: CPU sockets within maxSockets, memory hotplug limits, both under LiveUpdate."""
    if ctx.config.vm_rollout_strategy != "LiveUpdate":
        return []
    causes: list[Cause] = []
    cpu = get(template_spec, "domain", "cpu")
    if cpu is not None:
        sockets, max_sockets = as_int(get(cpu, "sockets")), as_int(get(cpu, "maxSockets"))
        if sockets != 0 and max_sockets != 0 and sockets > max_sockets:
            causes.append(
                invalid(
                    str(field.child("template", "spec", "domain", "cpu", "sockets")),
                    "Number of sockets in CPU topology is greater than the maximum sockets allowed",
                )
            )
    memory = get(template_spec, "domain", "memory")
    if memory is not None and get(memory, "maxGuest") is not None:
        error = live_update_memory_error(template_spec, parse_quantity(get(memory, "maxGuest")))
        if error:
            causes.append(invalid(str(field.child("template", "spec", "domain", "memory", "guest")), error))
    return causes


def _run_strategy_of(spec: Mapping[str, Any]) -> str:
    strategy = spec.get("runStrategy")
    if strategy is not None:
        return as_str(strategy)
    running = spec.get("running")
    if running is None:
        return "Halted"
    return "Always" if running is True else "Halted"


def _snapshot_and_restore(vm: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[Cause]:
    """While a snapshot or restore runs, volumes and the run state are frozen (UPDATE only)."""
    if old is None:
        return []
    new_spec, old_spec = as_map(vm.get("spec")), as_map(old.get("spec"))
    snapshot = get(vm, "status", "snapshotInProgress")
    if snapshot is not None:
        new_volumes = as_list(get(new_spec, "template", "spec", "volumes"))
        if as_list(get(old_spec, "template", "spec", "volumes")) != new_volumes:
            return [not_supported("spec", f'Cannot update vm disks or volumes until snapshot "{snapshot}" completes')]
        if not _same_running(old_spec, new_spec):
            return [not_supported("spec", f'Cannot update vm running state until snapshot "{snapshot}" completes')]
    restore = get(vm, "status", "restoreInProgress")
    if restore is not None and old_spec != new_spec and _run_strategy_of(old_spec) != _run_strategy_of(new_spec):
        return [not_supported("spec", f'Cannot update VM runStrategy until restore "{restore}" completes')]
    return []


def _same_running(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if old.get("running") is not None and new.get("running") is not None:
        return bool(old["running"] == new["running"])
    if old.get("runStrategy") is not None and new.get("runStrategy") is not None:
        return bool(old["runStrategy"] == new["runStrategy"])
    return False
