"""Instancetypes and preferences for VMs: snapshot them into ControllerRevisions and apply them to new VMIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.causes import FieldPath
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, ApiError
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import (
    CLUSTER_INSTANCETYPES,
    CLUSTER_PREFERENCES,
    CONTROLLER_REVISIONS,
    INSTANCETYPES,
    PREFERENCES,
    ResourceRef,
)
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vm_revisions import revision_data_spec
from pykubevirt.controller.vmi_from_vm import controller_ref
from pykubevirt.instancetype.conflicts import instancetype_conflicts
from pykubevirt.instancetype.instancetype_apply import apply_instancetype
from pykubevirt.instancetype.matcher_kind import is_namespaced, named_kind
from pykubevirt.instancetype.preference_apply import apply_preference

FAILED_FIND_INSTANCETYPE = "FailedFindInstancetype"
FAILED_FIND_PREFERENCE = "FailedFindPreference"
FAILED_CREATE = "FailedCreate"
OBJECT_LABELS = {
    "generation": "instancetype.kubevirt.io/object-generation",
    "kind": "instancetype.kubevirt.io/object-kind",
    "name": "instancetype.kubevirt.io/object-name",
    "uid": "instancetype.kubevirt.io/object-uid",
    "version": "instancetype.kubevirt.io/object-version",
}


@dataclass(frozen=True, slots=True)
class _Matcher:
    field: str
    status_field: str
    namespaced: ResourceRef
    cluster: ResourceRef
    find_reason: str
    singular: str

    def resource(self, kind: str) -> ResourceRef | None:
        named = named_kind(self.field, kind)
        if named is None:
            return None
        return self.namespaced if is_namespaced(named) else self.cluster


INSTANCETYPE = _Matcher(
    "instancetype", "instancetypeRef", INSTANCETYPES, CLUSTER_INSTANCETYPES, FAILED_FIND_INSTANCETYPE, "Instancetype"
)
PREFERENCE = _Matcher(
    "preference", "preferenceRef", PREFERENCES, CLUSTER_PREFERENCES, FAILED_FIND_PREFERENCE, "Preference"
)


def revision_name(vm_name: str, obj: Object) -> str:
    meta = obj["metadata"]
    version = str(obj.get("apiVersion", c.INSTANCETYPE_API_VERSION)).rpartition("/")[2]
    return f"{vm_name}-{meta['name']}-{version}-{meta['uid']}-{meta.get('generation', 1)}"


def revision_payload(obj: Object) -> Object:
    """The object as stored in the revision: labels, annotations, finalizers, owners and managedFields stripped."""
    data = copy_json(obj)
    for field in ("labels", "annotations", "finalizers", "ownerReferences", "managedFields"):
        data.get("metadata", {}).pop(field, None)
    return data


class InstancetypeSync:
    """KubeVirt's instancetype controller for the Reference policy (the default)."""

    def __init__(self, client: KubeClient, revisions: Informer) -> None:
        self.client = client
        self.revisions = revisions

    async def sync(self, vm: Object) -> SyncError | None:
        """Ensure revisions and status refs for the VM's instancetype and preference (status updated in place)."""
        for matcher in (INSTANCETYPE, PREFERENCE):
            error = await self._sync_one(vm, matcher)
            if error is not None:
                return error
        return None

    async def _sync_one(self, vm: Object, matcher: _Matcher) -> SyncError | None:
        spec_matcher = (vm.get("spec") or {}).get(matcher.field)
        if not spec_matcher:
            return None
        kind = str(spec_matcher.get("kind") or "")
        resource = matcher.resource(kind)
        if resource is None:
            return SyncError(f"got unexpected kind in {matcher.singular}Matcher: {kind}", FAILED_CREATE)
        status = vm.setdefault("status", {})
        ref = copy_json(status.get(matcher.status_field) or {})
        name = str(spec_matcher.get("name") or "")
        if (name and name != ref.get("name")) or (kind and kind != ref.get("kind")):
            ref.pop("controllerRevisionRef", None)
        ref["name"] = name
        if kind:
            ref["kind"] = kind
        elif "kind" not in ref:
            ref["kind"] = resource.kind
        if spec_matcher.get("revisionName"):
            ref["controllerRevisionRef"] = {"name": spec_matcher["revisionName"]}
        if not ref.get("controllerRevisionRef"):
            namespace = vm["metadata"]["namespace"] if resource.namespaced else None
            try:
                obj = await self.client.get(resource, name, namespace)
            except ApiError as exc:
                return SyncError(exc.message, matcher.find_reason)
            if matcher is INSTANCETYPE:
                template_spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
                conflicts = instancetype_conflicts(
                    template_spec, obj.get("spec") or {}, FieldPath("spec.template.spec")
                )
                if conflicts:
                    return SyncError(
                        "error encountered while storing instancetype.kubevirt.io controllerRevisions: "
                        f"VM field(s) {', '.join(conflicts)} conflicts with selected instance type",
                        FAILED_CREATE,
                    )
            created = await self._store_revision(vm, obj)
            if isinstance(created, SyncError):
                return created
            ref["controllerRevisionRef"] = {"name": created}
        status[matcher.status_field] = ref
        return None

    async def _store_revision(self, vm: Object, obj: Object) -> str | SyncError:
        name = revision_name(vm["metadata"]["name"], obj)
        meta = obj["metadata"]
        payload = revision_payload(obj)
        body: Object = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {
                "name": name,
                "namespace": vm["metadata"]["namespace"],
                "ownerReferences": [controller_ref(vm)],
                "labels": {
                    OBJECT_LABELS["generation"]: str(meta.get("generation", 1)),
                    OBJECT_LABELS["kind"]: str(obj.get("kind")),
                    OBJECT_LABELS["name"]: str(meta["name"]),
                    OBJECT_LABELS["uid"]: str(meta["uid"]),
                    OBJECT_LABELS["version"]: str(obj.get("apiVersion", "")).rpartition("/")[2],
                },
            },
            "data": payload,
            "revision": 0,
        }
        try:
            await self.client.create(CONTROLLER_REVISIONS, body, vm["metadata"]["namespace"])
        except AlreadyExists:
            existing = await self.client.get(CONTROLLER_REVISIONS, name, vm["metadata"]["namespace"])
            if (existing.get("data") or {}).get("spec") != payload.get("spec"):
                return SyncError(f"found existing ControllerRevision with unexpected data: {name}", FAILED_CREATE)
        except ApiError as exc:
            return SyncError(
                f"error encountered while storing instancetype.kubevirt.io controllerRevisions: {exc.message}",
                FAILED_CREATE,
            )
        return name

    def _revision_spec(self, vm: Object, status_field: str) -> dict[str, Any] | None:
        ref = ((vm.get("status") or {}).get(status_field) or {}).get("controllerRevisionRef") or {}
        if not ref.get("name"):
            return None
        revision = self.revisions.get_by_name(vm["metadata"]["namespace"], str(ref["name"]))
        if revision is None:
            raise SyncError(f'controllerrevisions.apps "{ref["name"]}" not found', FAILED_CREATE)
        return revision_data_spec(revision)

    def apply_to_vmi(self, vm: Object, vmi: Object) -> None:
        """Apply the stored instancetype and preference to a new VMI; raises SyncError when they cannot be read."""
        spec = vm.get("spec") or {}
        if not spec.get("instancetype") and not spec.get("preference"):
            return
        instancetype = self._revision_spec(vm, "instancetypeRef") if spec.get("instancetype") else None
        preference = self._revision_spec(vm, "preferenceRef") if spec.get("preference") else None
        annotations = vmi["metadata"].setdefault("annotations", {})
        if instancetype is not None:
            apply_instancetype(vmi["spec"], vmi["metadata"], instancetype, preference)
            name = spec["instancetype"]["name"]
            cluster = INSTANCETYPE.resource(str(spec["instancetype"].get("kind") or "")) is CLUSTER_INSTANCETYPES
            annotations[c.CLUSTER_INSTANCETYPE_NAME_ANNOTATION if cluster else c.INSTANCETYPE_NAME_ANNOTATION] = name
        if preference is not None:
            apply_preference(preference, vmi["spec"], vmi["metadata"])
            name = spec["preference"]["name"]
            cluster = PREFERENCE.resource(str(spec["preference"].get("kind") or "")) is CLUSTER_PREFERENCES
            annotations[c.CLUSTER_PREFERENCE_NAME_ANNOTATION if cluster else c.PREFERENCE_NAME_ANNOTATION] = name
