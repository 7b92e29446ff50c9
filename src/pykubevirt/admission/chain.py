"""The admission chain for our kinds: mutate (defaults) then validate, as KubeVirt's webhooks run in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pykubevirt.admission.causes import AdmissionRejected, RequestDenied
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_migration, mutate_vm, mutate_vm_clone, mutate_vmi
from pykubevirt.admission.defaults.clone_mutator import CLONE_MUTATOR_WEBHOOK
from pykubevirt.admission.defaults.datavolume_mutator import authorize_datavolume
from pykubevirt.admission.go_decoding import check_decodable
from pykubevirt.admission.validation import (
    REQUEST_ERROR,
    validate_datavolume,
    validate_instancetype,
    validate_migration_create,
    validate_preference,
    validate_vm,
    validate_vm_clone,
    validate_vm_pool,
    validate_vm_restore,
    validate_vm_snapshot,
    validate_vmi_create,
    validate_vmi_update,
    validate_vmirs,
)
from pykubevirt.admission.validation.clone import CLONE_WEBHOOK
from pykubevirt.admission.validation.export import EXPORT_WEBHOOK, validate_vm_export
from pykubevirt.admission.validation.snapshot import RESTORE_WEBHOOK, SNAPSHOT_WEBHOOK
from pykubevirt.api import constants as c
from pykubevirt.api.causes import Cause
from pykubevirt.api.json_copy import copy_json

CREATE = "CREATE"
UPDATE = "UPDATE"

RUNNING_DEPRECATED_WARNING = "spec.running is deprecated, please use spec.runStrategy instead."

Mutator = Callable[[dict[str, Any], AdmissionContext, str, dict[str, Any] | None], None]
Validator = Callable[[dict[str, Any], AdmissionContext, str, dict[str, Any] | None], list[Cause]]


@dataclass(frozen=True, slots=True)
class _Hooks:
    """The kind's mutator (which names its own webhook in a refusal) and its validating webhook."""

    mutate: Mutator | None
    validating_webhook: str
    validate: Validator


def _mutate_vm(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> None:
    mutate_vm(obj, ctx, operation=op, old=old)


def _mutate_vmi(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> None:
    mutate_vmi(obj, ctx, operation=op, old=old)


def _mutate_vmim(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> None:
    mutate_migration(obj, ctx, operation=op)


def _mutate_dv(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> None:
    authorize_datavolume(obj, ctx)


def _mutate_vm_clone(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> None:
    mutate_vm_clone(obj, operation=op)


def _validate_vm(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_vm(obj, ctx, old=old)


def _validate_vmi(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    if op == UPDATE and old is not None:
        return validate_vmi_update(obj, old, ctx)
    return validate_vmi_create(obj, ctx)


def _validate_vmim(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_migration_create(obj, ctx) if op == CREATE else []


def _validate_vmirs(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_vmirs(obj, ctx, old=old if op == UPDATE else None)


def _validate_vm_pool(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_vm_pool(obj, ctx, old=old if op == UPDATE else None)


def _validate_vm_snapshot(
    obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None
) -> list[Cause]:
    return validate_vm_snapshot(obj, ctx, old=old if op == UPDATE else None)


def _validate_vm_restore(
    obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None
) -> list[Cause]:
    return validate_vm_restore(obj, ctx, old=old if op == UPDATE else None)


def _validate_vm_clone(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_vm_clone(obj, ctx, creating=op == CREATE)


def _validate_vm_export(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
    return validate_vm_export(obj, old=old if op == UPDATE else None)


def _simple(validator: Callable[[dict[str, Any], AdmissionContext], list[Cause]]) -> Validator:
    def run(obj: dict[str, Any], ctx: AdmissionContext, op: str, old: dict[str, Any] | None) -> list[Cause]:
        return validator(obj, ctx)

    return run


_HOOKS: dict[str, _Hooks] = {
    c.VM_KIND: _Hooks(_mutate_vm, "virtualmachine-validator.kubevirt.io", _validate_vm),
    c.VMI_KIND: _Hooks(_mutate_vmi, "virtualmachineinstances-create-validator.kubevirt.io", _validate_vmi),
    c.VMIM_KIND: _Hooks(_mutate_vmim, "migration-create-validator.kubevirt.io", _validate_vmim),
    c.VMIRS_KIND: _Hooks(None, "virtualmachinereplicaset-validator.kubevirt.io", _validate_vmirs),
    c.VM_POOL_KIND: _Hooks(None, "virtualmachinepool-validator.kubevirt.io", _validate_vm_pool),
    c.INSTANCETYPE_KIND: _Hooks(
        None, "virtualmachineinstancetype-validator.instancetype.kubevirt.io", _simple(validate_instancetype)
    ),
    c.CLUSTER_INSTANCETYPE_KIND: _Hooks(
        None, "virtualmachineclusterinstancetype-validator.instancetype.kubevirt.io", _simple(validate_instancetype)
    ),
    c.PREFERENCE_KIND: _Hooks(
        None, "virtualmachinepreference-validator.instancetype.kubevirt.io", _simple(validate_preference)
    ),
    c.CLUSTER_PREFERENCE_KIND: _Hooks(
        None, "virtualmachineclusterpreference-validator.instancetype.kubevirt.io", _simple(validate_preference)
    ),
    c.VM_SNAPSHOT_KIND: _Hooks(None, SNAPSHOT_WEBHOOK, _validate_vm_snapshot),
    c.VM_RESTORE_KIND: _Hooks(None, RESTORE_WEBHOOK, _validate_vm_restore),
    c.VM_CLONE_KIND: _Hooks(_mutate_vm_clone, CLONE_WEBHOOK, _validate_vm_clone),
    c.VM_EXPORT_KIND: _Hooks(None, EXPORT_WEBHOOK, _validate_vm_export),
    c.DATA_VOLUME_KIND: _Hooks(_mutate_dv, "datavolume-validate.cdi.kubevirt.io", _simple(validate_datavolume)),
}


# The first webhook that decodes each write: KubeVirt's mutators, and for a VMI update (no mutator) its validator.
_DECODING_WEBHOOKS = {
    (c.VM_KIND, CREATE): "virtualmachines-mutator.kubevirt.io",
    (c.VM_KIND, UPDATE): "virtualmachines-mutator.kubevirt.io",
    (c.VMI_KIND, CREATE): "virtualmachineinstances-mutator.kubevirt.io",
    (c.VMI_KIND, UPDATE): "virtualmachineinstances-update-validator.kubevirt.io",
    (c.VMIM_KIND, CREATE): "migrations-mutator.kubevirt.io",
    (c.VM_CLONE_KIND, CREATE): CLONE_MUTATOR_WEBHOOK,
}


def handles(kind: str) -> bool:
    return kind in _HOOKS


def mutate(
    obj: dict[str, Any],
    ctx: AdmissionContext,
    *,
    operation: str = CREATE,
    old: dict[str, Any] | None = None,
    in_place: bool = False,
) -> dict[str, Any]:
    """The object after the kind's mutating webhook: a copy, or `obj` itself changed when `in_place` (a caller that
    owns it and keeps only the result)."""
    kind = str(obj.get("kind", ""))
    webhook = _DECODING_WEBHOOKS.get((kind, operation))
    if webhook is not None:
        check_decodable(obj, webhook, old)
    mutated = obj if in_place else copy_json(obj)
    hooks = _HOOKS.get(kind)
    if hooks is not None and hooks.mutate is not None:
        hooks.mutate(mutated, ctx, operation, old)
    return mutated


def validate(
    obj: dict[str, Any], ctx: AdmissionContext, *, operation: str = CREATE, old: dict[str, Any] | None = None
) -> list[str]:
    """Run the kind's validating webhook; raises AdmissionRejected with the causes, returns the warnings."""
    hooks = _HOOKS.get(str(obj.get("kind", "")))
    if hooks is None:
        return []
    webhook = hooks.validating_webhook
    if operation == UPDATE and webhook.endswith("-create-validator.kubevirt.io"):
        webhook = webhook.replace("-create-validator", "-update-validator")
    causes = hooks.validate(obj, ctx, operation, old)
    plain = [cause for cause in causes if cause.type == REQUEST_ERROR]
    if plain:
        # Some KubeVirt checks answer a bare 400 with one message instead of a 422 with causes.
        raise RequestDenied(plain[0].message, webhook)
    if causes:
        raise AdmissionRejected(causes, webhook)
    if obj.get("kind") == c.VM_KIND and (obj.get("spec") or {}).get("running") is not None:
        return [RUNNING_DEPRECATED_WARNING]
    return []
