"""The instancetype part of the VM mutator: matcher checks, inference from volumes, preferred arch/machine/storage."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import (
    CONTROLLER_REVISION_KIND,
    DATA_SOURCE_KIND,
    PVC_KIND,
    VOLUME_SNAPSHOT_KIND,
    MutationDenied,
    as_dict,
    dicts,
    obj,
)
from pykubevirt.api import constants as c
from pykubevirt.api.causes import FIELD_VALUE_INVALID, FIELD_VALUE_NOT_SUPPORTED, Cause
from pykubevirt.api.json_lookup import get
from pykubevirt.instancetype.matcher_kind import is_namespaced, named_kind

FIELD_VALUE_NOT_FOUND = "FieldValueNotFound"
INFER_IGNORE = "Ignore"
INFER_REJECT = "Reject"
DEFAULT_LABELS = {
    "instancetype": (
        "instancetype.kubevirt.io/default-instancetype",
        "instancetype.kubevirt.io/default-instancetype-kind",
    ),
    "preference": ("instancetype.kubevirt.io/default-preference", "instancetype.kubevirt.io/default-preference-kind"),
}
OBJECT_NAME_LABEL = "instancetype.kubevirt.io/object-name"
MATCHER_TITLES = {"instancetype": "InstancetypeMatcher", "preference": "PreferenceMatcher"}
# Resource names as kube-apiserver prints them in NotFound errors.
_RESOURCES = {
    PVC_KIND: "persistentvolumeclaims",
    c.DATA_VOLUME_KIND: "datavolumes.cdi.kubevirt.io",
    DATA_SOURCE_KIND: "datasources.cdi.kubevirt.io",
    VOLUME_SNAPSHOT_KIND: "volumesnapshots.snapshot.storage.k8s.io",
}


class _Ignorable(Exception):
    """An inference failure that InferFromVolumeFailurePolicy=Ignore may swallow."""


def _matcher_causes(spec: dict[str, Any], which: str) -> list[Cause]:
    matcher = spec.get(which)
    if not isinstance(matcher, dict):
        return []
    path, title = f"spec.{which}", MATCHER_TITLES[which]
    causes: list[Cause] = []
    if not matcher.get("name") and not matcher.get("inferFromVolume"):
        causes.append(
            Cause(FIELD_VALUE_NOT_FOUND, f"Either Name or InferFromVolume should be provided within the {title}", path)
        )
    if matcher.get("inferFromVolume"):
        for key, label in (("name", "Name"), ("kind", "Kind")):
            if matcher.get(key):
                causes.append(
                    Cause(
                        FIELD_VALUE_NOT_SUPPORTED,
                        f"{label} already set, should be cleared before setting inferFromVolume",
                        f"{path}.{key}",
                    )
                )
    policy = matcher.get("inferFromVolumeFailurePolicy")
    if policy is not None and policy not in (INFER_IGNORE, INFER_REJECT):
        causes.append(
            Cause(
                FIELD_VALUE_INVALID,
                f"Invalid value '{policy}' for InferFromVolumeFailurePolicy",
                f"{path}.inferFromVolumeFailurePolicy",
            )
        )
    return causes


def _matcher_update_causes(new: Any, old: Any, which: str) -> list[Cause]:
    """A renamed matcher must not keep the revisionName it had (matchers may be added or removed freely)."""
    if not isinstance(new, dict) or not isinstance(old, dict) or not new.get("revisionName"):
        return []
    if new != old and new.get("name") != old.get("name") and new.get("revisionName") == old.get("revisionName"):
        return [
            Cause(
                FIELD_VALUE_INVALID,
                "the Matcher Name has been updated without updating the RevisionName",
                f"spec.{which}.revisionName",
            )
        ]
    return []


def matcher_causes(vm: dict[str, Any], old: dict[str, Any] | None, operation: str) -> list[Cause]:
    """What the instancetype mutator rejects before doing anything else (422, returned by the VM mutator)."""
    spec = as_dict(vm.get("spec"))
    if operation == "UPDATE" and old is not None:
        for which in ("instancetype", "preference"):
            causes = _matcher_update_causes(spec.get(which), get(old, "spec", which), which)
            if causes:
                return causes
    for which in ("instancetype", "preference"):
        causes = _matcher_causes(spec, which)
        if causes:
            return causes
    return []


def _get(ctx: AdmissionContext, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    found = ctx.lookup.get(kind, namespace, name)
    if found is None:
        raise LookupError(f'{_RESOURCES.get(kind, kind)} "{name}" not found')
    return found


def _from_labels(found: dict[str, Any], which: str) -> tuple[str, str]:
    name_label, kind_label = DEFAULT_LABELS[which]
    labels = get(found, "metadata", "labels") or {}
    if name_label not in labels:
        raise _Ignorable(f"unable to find required {name_label} label on the volume")
    return str(labels[name_label]), str(labels.get(kind_label, ""))


def _from_pvc(ctx: AdmissionContext, name: str, namespace: str | None, which: str) -> tuple[str, str]:
    return _from_labels(_get(ctx, PVC_KIND, namespace, name), which)


def _from_data_source(ctx: AdmissionContext, name: str, namespace: str | None, which: str) -> tuple[str, str]:
    source = _get(ctx, DATA_SOURCE_KIND, namespace, name)
    try:
        return _from_labels(source, which)
    except _Ignorable:
        pass
    pvc, snapshot = get(source, "spec", "source", "pvc"), get(source, "spec", "source", "snapshot")
    if isinstance(pvc, dict):
        return _from_pvc(ctx, str(pvc.get("name", "")), pvc.get("namespace"), which)
    if isinstance(snapshot, dict):
        found = _get(ctx, VOLUME_SNAPSHOT_KIND, snapshot.get("namespace"), str(snapshot.get("name", "")))
        return _from_labels(found, which)
    raise _Ignorable(
        "unable to infer defaults from DataSource that doesn't provide DataVolumeSourcePVC or DataVolumeSourceSnapshot"
    )


def _from_dv_spec(ctx: AdmissionContext, dv_spec: Any, namespace: str | None, which: str) -> tuple[str, str]:
    pvc, snapshot = get(dv_spec, "source", "pvc"), get(dv_spec, "source", "snapshot")
    if isinstance(pvc, dict):
        return _from_pvc(ctx, str(pvc.get("name", "")), pvc.get("namespace"), which)
    if isinstance(snapshot, dict):
        found = _get(ctx, VOLUME_SNAPSHOT_KIND, snapshot.get("namespace"), str(snapshot.get("name", "")))
        return _from_labels(found, which)
    ref = get(dv_spec, "sourceRef")
    if isinstance(ref, dict):
        if ref.get("kind") == DATA_SOURCE_KIND:
            return _from_data_source(ctx, str(ref.get("name", "")), ref.get("namespace") or namespace, which)
        raise _Ignorable(
            f"unable to infer defaults from DataVolumeSourceRef as Kind {ref.get('kind', '')} is not supported"
        )
    raise _Ignorable("unable to infer defaults from DataVolumeSpec as DataVolumeSource is not supported")


def _from_data_volume(ctx: AdmissionContext, vm: dict[str, Any], name: str, which: str) -> tuple[str, str]:
    namespace = get(vm, "metadata", "namespace")
    for template in dicts(get(vm, "spec", "dataVolumeTemplates")):
        if get(template, "metadata", "name") == name:
            return _from_dv_spec(ctx, template.get("spec"), namespace, which)
    data_volume = ctx.lookup.get(c.DATA_VOLUME_KIND, namespace, name)
    if data_volume is None:
        # A garbage-collected DataVolume leaves its PVC under the same name.
        return _from_pvc(ctx, name, namespace, which)
    try:
        return _from_labels(data_volume, which)
    except _Ignorable:
        return _from_dv_spec(ctx, data_volume.get("spec"), namespace, which)


def _from_volumes(ctx: AdmissionContext, vm: dict[str, Any], volume_name: str, which: str) -> tuple[str, str]:
    for volume in dicts(get(vm, "spec", "template", "spec", "volumes")):
        if volume.get("name") != volume_name:
            continue
        if isinstance(volume.get("persistentVolumeClaim"), dict):
            claim = str(volume["persistentVolumeClaim"].get("claimName", ""))
            return _from_pvc(ctx, claim, get(vm, "metadata", "namespace"), which)
        if isinstance(volume.get("dataVolume"), dict):
            return _from_data_volume(ctx, vm, str(volume["dataVolume"].get("name", "")), which)
        raise _Ignorable(f"unable to infer defaults from volume {volume_name} as type is not supported")
    raise LookupError(f"unable to find volume {volume_name} to infer defaults")


def infer_matchers(vm: dict[str, Any], ctx: AdmissionContext) -> None:
    """Replace `inferFromVolume` matchers by the name/kind labelled on the volume's source; 400 on failure."""
    spec = vm.get("spec")
    if not isinstance(spec, dict):
        return
    for which in ("instancetype", "preference"):
        matcher = spec.get(which)
        if not isinstance(matcher, dict) or not matcher.get("inferFromVolume"):
            continue
        ignore = matcher.get("inferFromVolumeFailurePolicy") == INFER_IGNORE
        try:
            name, kind = _from_volumes(ctx, vm, str(matcher["inferFromVolume"]), which)
        except _Ignorable as err:
            if not ignore:
                raise MutationDenied(str(err)) from err
            del spec[which]
            continue
        except LookupError as err:
            raise MutationDenied(str(err)) from err
        if ignore and which == "instancetype":
            # The instancetype will provide the memory; a template value would only conflict with it.
            domain = get(spec, "template", "spec", "domain")
            if isinstance(domain, dict):
                domain.pop("memory", None)
        spec[which] = {"name": name, "kind": kind} if kind else {"name": name}


def find_preference_spec(vm: dict[str, Any], ctx: AdmissionContext) -> dict[str, Any] | None:
    """The referenced preference's spec (stored revision first); None when there is none or it cannot be found."""
    matcher = get(vm, "spec", "preference")
    if not isinstance(matcher, dict):
        return None
    namespace = get(vm, "metadata", "namespace")
    revision_name = matcher.get("revisionName") or get(vm, "status", "preferenceRef", "controllerRevisionRef", "name")
    if revision_name:
        revision = ctx.lookup.get(CONTROLLER_REVISION_KIND, namespace, str(revision_name))
        if revision is None:
            return None
        # A revision named only in the status counts when it was taken of the preference now referenced.
        label = get(revision, "metadata", "labels", OBJECT_NAME_LABEL)
        if matcher.get("revisionName") or label == matcher.get("name"):
            found = get(revision, "data", "spec")
            return found if isinstance(found, dict) else None
    kind = named_kind("preference", str(matcher.get("kind") or ""))
    if kind is None:
        return None
    found = ctx.lookup.get(kind, namespace if is_namespaced(kind) else None, str(matcher.get("name") or ""))
    spec = get(found, "spec")
    return spec if isinstance(spec, dict) else None


def apply_preference_defaults(vm: dict[str, Any], preference: dict[str, Any] | None) -> None:
    """preferredArchitecture and preferredMachineType fill the template; preferredStorageClassName the DV templates."""
    if preference is None:
        return
    template_spec = get(vm, "spec", "template", "spec")
    if isinstance(template_spec, dict):
        arch = preference.get("preferredArchitecture")
        if arch and not template_spec.get("architecture"):
            template_spec["architecture"] = arch
        machine_type = get(preference, "machine", "preferredMachineType")
        domain = obj(template_spec, "domain")
        if machine_type and domain is not None and not get(domain, "machine", "type"):
            machine = obj(domain, "machine")
            if machine is not None:
                machine["type"] = machine_type
    storage_class = get(preference, "volumes", "preferredStorageClassName")
    if not storage_class:
        return
    for template in dicts(get(vm, "spec", "dataVolumeTemplates")):
        for kind in ("pvc", "storage"):
            claim = get(template, "spec", kind)
            if isinstance(claim, dict) and claim.get("storageClassName") is None:
                claim["storageClassName"] = storage_class
