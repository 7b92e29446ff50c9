"""KubeVirt's VMExportAdmitter (pkg/storage/admitters/vmexport.go): the source's kind, name and API group on create,
and a spec that never changes after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pykubevirt.api.causes import Cause, invalid
from pykubevirt.api.constants import KUBEVIRT_GROUP, SNAPSHOT_GROUP
from pykubevirt.api.json_lookup import as_map

EXPORT_WEBHOOK: Final = "virtualmachineexport-validator.export.kubevirt.io"
BACKUP_GROUP: Final = "backup.kubevirt.io"
TEMPLATE_NEEDS_OCI = (
    "VirtualMachineTemplate source requires the OCIExport feature gate and virt-template deployment to be enabled"
)
IMMUTABLE_SPEC = "spec in immutable after creation"  # sic: KubeVirt's text
# KubeVirt names the group's field after the Go field, not the JSON one.
_NAME, _GROUP, _KIND = "spec.source.name", "spec.source.APIGroup", "spec.source.kind"
# kind → (what the name's message calls it, the API group it needs: None for "missing or blank").
_SOURCES: Final[dict[str, tuple[str, str | None, str]]] = {
    "PersistentVolumeClaim": ("PVC", None, "PVC"),
    "VirtualMachineSnapshot": ("VMSnapshot", SNAPSHOT_GROUP, "VMSnapshot"),
    "VirtualMachine": ("Virtual Machine", KUBEVIRT_GROUP, "VM"),
    "VirtualMachineBackup": ("VirtualMachineBackup", BACKUP_GROUP, "VirtualMachineBackup"),
}


def validate_vm_export(export: Mapping[str, Any], *, old: Mapping[str, Any] | None = None) -> list[Cause]:
    """The causes KubeVirt's admitter finds: on create, the source; on update, any change of the spec."""
    spec = as_map(export.get("spec"))
    if old is not None:
        return [] if spec == as_map(old.get("spec")) else [invalid("spec", IMMUTABLE_SPEC)]
    source = as_map(spec.get("source"))
    kind = source.get("kind")
    if kind == "VirtualMachineTemplate":
        # This cluster has neither the OCIExport gate's server side nor virt-template.
        return [invalid(_KIND, TEMPLATE_NEEDS_OCI)]
    if not isinstance(kind, str) or kind not in _SOURCES:
        return [invalid(_KIND, "invalid kind")]
    name_word, group, group_word = _SOURCES[kind]
    causes = []
    if not source.get("name"):
        causes.append(invalid(_NAME, f"{name_word} name must not be empty"))
    api_group = source.get("apiGroup")
    if group is None:
        if api_group:
            causes.append(invalid(_GROUP, "PVC API group must be missing or blank"))
    elif api_group != group:
        causes.append(invalid(_GROUP, f"{group_word} API group must be {group}"))
    return causes
