"""KubeVirt's VMSnapshotAdmitter and VMRestoreAdmitter (pkg/storage/admitters/vmsnapshot.go, vmrestore.go).

KubeVirt has no admitter for VirtualMachineSnapshotContent: its CRD's schema is all the API server checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import REQUEST_ERROR
from pykubevirt.api.backend_storage import has_persistent_efi, has_persistent_tpm
from pykubevirt.api.causes import Cause, FieldPath, invalid, required
from pykubevirt.api.constants import (
    KUBEVIRT_GROUP,
    VM_KIND,
    VM_RESTORE_KIND,
    VM_SNAPSHOT_CONTENT_KIND,
    VM_SNAPSHOT_KIND,
)
from pykubevirt.api.go_duration import GoDurationError
from pykubevirt.api.go_duration import go_duration_nanoseconds as parse_nanoseconds
from pykubevirt.api.json_lookup import as_list, as_map, as_str, get
from pykubevirt.api.kubevirt.snapshot import VOLUME_OWNERSHIP_POLICIES, VOLUME_RESTORE_POLICIES

SNAPSHOT_WEBHOOK = "virtualmachinesnapshot-validator.snapshot.kubevirt.io"
RESTORE_WEBHOOK = "virtualmachinerestore-validator.snapshot.kubevirt.io"
SNAPSHOT_GATE = "Snapshot"
# metav1.CauseTypeFieldValueNotFound, which api/causes has no helper for.
FIELD_VALUE_NOT_FOUND = "FieldValueNotFound"
SPEC_IMMUTABLE = "spec in immutable after creation"
BACKEND_STORAGE_RESTORE = (
    "Restore to a different VM is not supported when snapshotted VM has backend storage (persistent TPM or EFI)"
)
# client-go's Request.Name("") error: KubeVirt's admitter gets objects by name through a client.
EMPTY_NAME = "resource name may not be empty"


class _Refused(Exception):
    """A plain error the admitter answers with ToAdmissionResponseError (400, the message alone)."""


def _error(message: str) -> Cause:
    return Cause(REQUEST_ERROR, message, "")


# --- VirtualMachineSnapshot ------------------------------------------------------------------------------------------


def validate_vm_snapshot(
    snapshot: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """A create names a kubevirt.io VirtualMachine as its source; an update keeps the spec as it was."""
    if old is None and not ctx.config.gate_enabled(SNAPSHOT_GATE):
        return [_error("snapshot feature gate not enabled")]
    try:
        spec = _snapshot_spec(snapshot)
        if old is not None:
            return [invalid("spec", SPEC_IMMUTABLE)] if _snapshot_spec(old) != spec else []
    except _Refused as refused:
        return [_error(str(refused))]
    source = FieldPath("spec").child("source")
    api_group = get(snapshot, "spec", "source", "apiGroup")
    if api_group is None:
        return [Cause(FIELD_VALUE_NOT_FOUND, "missing apiGroup", str(source.child("apiGroup")))]
    if api_group != KUBEVIRT_GROUP:
        return [invalid(str(source.child("apiGroup")), "invalid apiGroup")]
    if get(snapshot, "spec", "source", "kind") != VM_KIND:
        return [invalid(str(source.child("kind")), "invalid kind")]
    return []


def _snapshot_spec(snapshot: Mapping[str, Any]) -> tuple[Any, ...]:
    """The spec as Go decodes it, for equality.Semantic; a failureDeadline Go cannot parse fails the decoding."""
    spec = as_map(snapshot.get("spec"))
    deadline = spec.get("failureDeadline")
    nanoseconds = None
    if deadline is not None:
        nanoseconds = go_duration_nanoseconds(as_str(deadline))
    return (_reference(spec.get("source")), spec.get("deletionPolicy"), nanoseconds)


def _reference(value: Any) -> tuple[Any, str, str]:
    """A TypedLocalObjectReference: apiGroup is a pointer (unset differs from ""), kind and name are plain strings."""
    ref = as_map(value)
    return (ref.get("apiGroup"), as_str(ref.get("kind")), as_str(ref.get("name")))


# --- VirtualMachineRestore -------------------------------------------------------------------------------------------


def validate_vm_restore(
    restore: Mapping[str, Any], ctx: AdmissionContext, *, old: Mapping[str, Any] | None = None
) -> list[Cause]:
    """A create targets a kubevirt.io VirtualMachine no other unfinished restore targets; an update keeps the spec."""
    if old is None and not ctx.config.gate_enabled(SNAPSHOT_GATE):
        return [_error("Snapshot/Restore feature gate not enabled")]
    if old is not None:
        return [invalid("spec", SPEC_IMMUTABLE)] if _restore_spec(old) != _restore_spec(restore) else []
    spec = as_map(restore.get("spec"))
    target_field = FieldPath("spec").child("target")
    target = as_map(spec.get("target"))
    causes: list[Cause]
    if target.get("apiGroup") is None:
        causes = [Cause(FIELD_VALUE_NOT_FOUND, "missing apiGroup", str(target_field.child("apiGroup")))]
    elif target.get("apiGroup") != KUBEVIRT_GROUP:
        causes = [invalid(str(target_field.child("apiGroup")), "invalid apiGroup")]
    elif target.get("kind") != VM_KIND:
        causes = [invalid(str(target_field.child("kind")), "invalid kind")]
    else:
        try:
            causes = _target_vm_causes(restore, ctx)
        except _Refused as refused:
            return [_error(str(refused))]
        causes += _override_causes(spec.get("volumeRestoreOverrides"))
        causes += _policy_causes(spec, "volumeRestorePolicy", "volume restore policy", VOLUME_RESTORE_POLICIES)
        causes += _policy_causes(spec, "volumeOwnershipPolicy", "volume ownership policy", VOLUME_OWNERSHIP_POLICIES)
    # Checked whatever the target is, as KubeVirt's admitter does after the switch on it.
    for other in ctx.lookup.list(VM_RESTORE_KIND, _namespace(restore)):
        other_spec = as_map(other.get("spec"))
        if _reference(other_spec.get("target")) == _reference(target) and get(other, "status", "complete") is not True:
            name = as_str(get(other, "metadata", "name"))
            causes.append(invalid(str(target_field), f'VirtualMachineRestore "{name}" in progress'))
    return causes


def _namespace(obj: Mapping[str, Any]) -> str:
    return as_str(get(obj, "metadata", "namespace")) or "default"


def _target_vm_causes(restore: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    """validateTargetVM: the patches, and no restore of backend storage into another VM; _Refused for a lookup error."""
    spec = as_map(restore.get("spec"))
    namespace = _namespace(restore)
    causes = _patch_causes(as_list(spec.get("patches")), FieldPath("spec").child("patches"))
    snapshot_name = as_str(spec.get("virtualMachineSnapshotName"))
    if not snapshot_name:
        raise _Refused(EMPTY_NAME)
    snapshot = ctx.lookup.get(VM_SNAPSHOT_KIND, namespace, snapshot_name)
    if snapshot is None:
        # KubeVirt returns no causes at all here, so a missing snapshot also drops the patches' causes.
        return []
    target_name = as_str(get(spec, "target", "name"))
    if not target_name:
        raise _Refused(EMPTY_NAME)
    target = ctx.lookup.get(VM_KIND, namespace, target_name)
    source_uid = get(snapshot, "status", "sourceUID")
    if target is not None and (source_uid is None or get(target, "metadata", "uid") == source_uid):
        return causes
    content_name = get(snapshot, "status", "virtualMachineSnapshotContentName")
    if content_name is None:
        raise _Refused("snapshot content name is nil in vmSnapshot status")
    if not as_str(content_name):
        raise _Refused(EMPTY_NAME)
    content = ctx.lookup.get(VM_SNAPSHOT_CONTENT_KIND, namespace, as_str(content_name))
    if content is None:
        raise _Refused(f'virtualmachinesnapshotcontents.snapshot.kubevirt.io "{as_str(content_name)}" not found')
    snapshot_vm = get(content, "spec", "source", "virtualMachine")
    if snapshot_vm is None:
        raise _Refused("unexpected snapshot source")
    template = get(snapshot_vm, "spec", "template")
    if template is not None:
        template_spec = as_map(get(template, "spec"))
        if has_persistent_tpm(template_spec) or has_persistent_efi(template_spec):
            causes.append(invalid("spec", BACKEND_STORAGE_RESTORE))
    return causes


def _patch_causes(patches: list[Any], field: FieldPath) -> list[Cause]:
    """validatePatches: KubeVirt splits each patch's text on "," and ":" rather than parsing its JSON; so do we."""
    causes: list[Cause] = []
    for patch in patches:
        for pair in as_str(patch).strip("{}").split(","):
            parts = pair.split(":")
            if len(parts) != 2:
                message = f'patch format is not valid - one ":" expected in a single key-value json patch: {pair}'
                causes.append(invalid(str(field), message))
                continue
            key, value = parts[0].strip(), parts[1].strip()
            if key != '"path"' or value.startswith(('"/metadata/labels/', '"/metadata/annotations/')):
                continue
            if not value.startswith('"/spec/'):
                causes.append(invalid(str(field), f"patching is valid only for elements under /spec/ only: {pair}"))
    return causes


def _override_causes(overrides: Any) -> list[Cause]:
    causes: list[Cause] = []
    field = FieldPath("spec").child("volumeRestoreOverrides")
    for i, item in enumerate(as_list(overrides)):
        override = as_map(item)
        if not as_str(override.get("volumeName")):
            causes.append(required(str(field.index(i).child("volumeName")), "must provide a volume name"))
        if (
            not as_str(override.get("restoreName"))
            and override.get("annotations") is None
            and override.get("labels") is None
        ):
            causes.append(required(str(field.index(i)), "must provide at least one overriden field"))
    return causes


def _policy_causes(spec: Mapping[str, Any], name: str, what: str, allowed: tuple[str, ...]) -> list[Cause]:
    policy = spec.get(name)
    if policy is None or policy in allowed:
        return []
    return [invalid(str(FieldPath("spec").child(name)), f'{what} "{as_str(policy)}" doesn\'t exist')]


def _restore_spec(restore: Mapping[str, Any]) -> tuple[Any, ...]:
    """The spec as Go decodes it, for equality.Semantic (an empty list or map equals an unset one)."""
    spec = as_map(restore.get("spec"))
    overrides = tuple(
        (
            as_str(as_map(o).get("volumeName")),
            as_str(as_map(o).get("restoreName")),
            dict(as_map(as_map(o).get("labels"))),
            dict(as_map(as_map(o).get("annotations"))),
        )
        for o in as_list(spec.get("volumeRestoreOverrides"))
    )
    return (
        _reference(spec.get("target")),
        as_str(spec.get("virtualMachineSnapshotName")),
        spec.get("targetReadinessPolicy"),
        spec.get("volumeRestorePolicy"),
        spec.get("volumeOwnershipPolicy"),
        overrides,
        tuple(as_str(p) for p in as_list(spec.get("patches"))),
    )


# --- metav1.Duration -------------------------------------------------------------------------------------------------


def go_duration_nanoseconds(text: str) -> int:
    """time.ParseDuration, raising _Refused with Go's message for what it refuses (metav1.Duration's decoding)."""
    try:
        return parse_nanoseconds(text)
    except GoDurationError as exc:
        raise _Refused(str(exc)) from None
