"""VirtualMachineInstanceMigration create (rule 38): the VMI exists, is not final, is migratable, is not migrating."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import REQUEST_ERROR
from pykubevirt.api.causes import FIELD_VALUE_FORBIDDEN, Cause, invalid, not_supported, required
from pykubevirt.api.constants import FINAL_PHASES, VMI_KIND, VMI_NAME_LABEL, VMIM_KIND
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get

_CONTROLLER_SA_SUFFIX = "kubevirt-controller"


def _error(message: str) -> Cause:
    return Cause(REQUEST_ERROR, message, "")


def validate_migration_create(vmim: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    spec = as_map(vmim.get("spec"))
    vmi_name = as_str(spec.get("vmiName"))
    if not vmi_name:
        return [required("spec.vmiName", "vmiName is missing")]
    if spec.get("priority") is not None and not (
        ctx.is_kubevirt_service_account() and ctx.username.endswith(_CONTROLLER_SA_SUFFIX)
    ):
        return [
            Cause(
                FIELD_VALUE_FORBIDDEN,
                "Migration priority queue, only virt-controller is allowed to set priority field",
                "spec.migrationPriority",
            )
        ]
    namespace = as_str(get(vmim, "metadata", "namespace")) or "default"
    vmi = ctx.lookup.get(VMI_KIND, namespace, vmi_name)
    if vmi is None:
        return [_error(f'the VMI "{namespace}/{vmi_name}" does not exist')]
    if as_str(get(vmi, "status", "phase")) in FINAL_PHASES:
        return [_error("Cannot migrate VMI in finalized state.")]
    decentralized = spec.get("sendTo") is not None or spec.get("receive") is not None
    for condition in as_list(get(vmi, "status", "conditions")):
        c = as_map(condition)
        if c.get("type") == "LiveMigratable" and c.get("status") == "False":
            # Cross-cluster migrations copy the disks, so non-migratable disks are allowed for them.
            if c.get("reason") == "DisksNotLiveMigratable" and decentralized:
                continue
            return [
                _error(f"Cannot migrate VMI, Reason: {as_str(c.get('reason'))}, Message: {as_str(c.get('message'))}")
            ]
    for other in ctx.lookup.list(VMIM_KIND, namespace):
        if as_str(get(other, "metadata", "labels", VMI_NAME_LABEL)) != vmi_name:
            continue
        if as_str(get(other, "status", "phase")) in ("Succeeded", "Failed"):
            continue
        return [
            _error(
                f"in-flight migration detected. Active migration job ({as_str(get(other, 'metadata', 'uid'))}) is "
                f"currently already in progress for VMI {as_str(get(other, 'spec', 'vmiName'))}."
            )
        ]
    if decentralized:
        if not ctx.config.gate_enabled("DecentralizedLiveMigration"):
            return [not_supported("", "DecentralizedLiveMigration feature gate is not enabled in kubevirt resource")]
        send_id, receive_id = get(spec, "sendTo", "migrationID"), get(spec, "receive", "migrationID")
        if spec.get("sendTo") is not None and spec.get("receive") is not None and send_id != receive_id:
            return [
                invalid(
                    "", f"sendTo migrationID {as_str(send_id)} does not match receive migrationID {as_str(receive_id)}"
                )
            ]
    return []
