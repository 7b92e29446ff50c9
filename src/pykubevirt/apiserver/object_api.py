"""The API's object semantics independent of HTTP: create, read, update, patch and delete with Kubernetes' rules.

The HTTP layer and the in-process garbage collector both go through here, so every write gets the same
metadata handling, schema pruning and validation, admission, finalizer and deletion semantics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_equal import ABSENT
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.api.scale import scale_errors
from pykubevirt.api.schema import Schema
from pykubevirt.api.structural import validate
from pykubevirt.api.timestamps import format_time
from pykubevirt.apiserver import managed_fields, metadata, patching, server_side_apply, write_validation
from pykubevirt.apiserver.deletion import (
    PROTECTED_NAMESPACES,
    DeleteOptions,
    check_preconditions,
    pod_grace_period,
    propagation_finalizers,
    ready_to_remove,
)
from pykubevirt.apiserver.list_pages import list_page
from pykubevirt.apiserver.object_decoding import decode_object, schema_pass
from pykubevirt.apiserver.request_context import AdmissionPlugin, RequestContext
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.selectors import FieldSelector
from pykubevirt.apiserver.served_versions import served, served_record, stored
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import AlreadyExists, Conflict, NotFound, Record, without_resource_version


def _parse_resource_version(value: Any, resource: Resource, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise errors.invalid_field(
            resource.kind,
            resource.group,
            name,
            "metadata.resourceVersion",
            f'Invalid value: "{value}": must be a number',
        ) from exc


class ObjectAPI:
    """Kubernetes object semantics over the store."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        admission: list[AdmissionPlugin] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_object_bytes: int = 3 * 1024 * 1024,
    ) -> None:
        self.store = store
        self.registry = registry
        self.admission = admission or []
        self.clock = clock
        # What a stored object may grow to once decoded or patched (the request body limit, as kube-apiserver's).
        self.max_object_bytes = max_object_bytes
        # Called after a write that changes the set of served resources (CRDs).
        self.on_crd_change: list[Callable[[dict[str, Any], str], None]] = []
        # Per collection, the schema its writes were last checked against and the revision it has served since.
        self._schemas_since: dict[str, tuple[Schema, int]] = {}
        self._first_revision = store.revision

    # ------------------------------------------------------------------------------------------------- reads

    def _record(self, resource: Resource, namespace: str | None, name: str) -> Record | None:
        """The stored object as the resource's version serves it."""
        return served_record(resource, self.store.get(resource.collection, resource.key(namespace, name)))

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        record = self._record(resource, namespace, name)
        if record is None:
            raise errors.not_found(resource.plural, resource.group, name)
        return record.value

    def find(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any] | None:
        record = self._record(resource, namespace, name)
        return record.value if record is not None else None

    def list_objects(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
        limit: int = 0,
        continue_token: str = "",
        exact_revision: int | None = None,
    ) -> tuple[list[dict[str, Any]], int, str]:
        """Matching objects (sorted by key), the list revision and a continue token when `limit` cut the list.

        `exact_revision` lists the state at that revision (resourceVersionMatch=Exact).
        """
        items, revision, token = list_page(
            self.store,
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=continue_token,
            exact_revision=exact_revision,
        )
        if resource.storage_version:
            items = [served(resource, item) for item in items]
        return items, revision, token

    # ------------------------------------------------------------------------------------------------- create

    def create(
        self,
        resource: Resource,
        namespace: str | None,
        body: Any,
        ctx: RequestContext,
        *,
        lease: float = 0,
        track: bool = True,
        owned: bool = False,
    ) -> dict[str, Any]:
        """Create an object; `track=False` keeps the managedFields it carries (a server-side apply made them).

        `owned`: the body was decoded for this request alone and may be changed in place rather than copied."""
        managed_fields.options_error("CreateOptions", ctx.field_manager)
        obj = decode_object(
            resource, body, ctx.field_validation, ctx.warnings, max_bytes=self.max_object_bytes, owned=owned
        )
        meta = obj["metadata"]
        if resource.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                namespace = body_ns or "default"
            elif body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
            self._require_namespace(namespace)
        else:
            meta.pop("namespace", None)
        if meta.get("deletionTimestamp"):
            meta.pop("deletionTimestamp")
        if resource.has_status and not resource.builtin:
            # Custom resources with a status subresource never take status from a create.
            obj.pop("status", None)
        obj = schema_pass(resource, obj, ctx.field_validation, ctx.warnings, owned=True)
        if track:
            obj = managed_fields.track(resource, None, obj, manager=ctx.manager, subresource="", now=self._now())
        metadata.stamp_new(obj, track_generation=not resource.builtin or resource.kind == "CustomResourceDefinition")
        obj = self._mutate(resource, "CREATE", obj, None, ctx)
        # After mutating admission, as kube's BeforeCreate: its plugins and webhooks see a generateName's object
        # without a name, and name it by the prefix (`pods "virt-launcher-vm-" is forbidden: …`).
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = metadata.generate_name(str(meta["generateName"]))
        name = str(meta.get("name") or "")
        write_validation.validate_metadata(resource, obj)
        self._validate_schema(resource, obj, name)
        self._validate_admission(resource, "CREATE", obj, None, ctx)
        if resource.ttl_seconds and not lease:
            lease = self._lease(resource)
        if ctx.dry_run:
            if self._record(resource, namespace, name) is not None:
                raise errors.already_exists(resource.plural, resource.group, name)
            return obj
        try:
            record = self.store.create(
                resource.collection, resource.key(namespace, name), stored(resource, obj), lease=lease
            )
        except AlreadyExists as exc:
            raise errors.already_exists(resource.plural, resource.group, name) from exc
        self._after_write(resource, record.value, "create")
        return served(resource, record.value)

    # ------------------------------------------------------------------------------------------------- update

    def update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        ctx: RequestContext,
        *,
        subresource: str = "",
        owned: bool = False,
    ) -> dict[str, Any]:
        """Replace an object (PUT); `owned` as for create."""
        managed_fields.options_error("UpdateOptions", ctx.field_manager)
        current = self._record(resource, namespace, name)
        if current is None:
            raise errors.not_found(resource.plural, resource.group, name)
        checked = self._checked(resource, current)
        new = decode_object(
            resource,
            body,
            ctx.field_validation,
            ctx.warnings,
            max_bytes=self.max_object_bytes,
            old=current.value,
            checked=checked,
            owned=owned,
        )
        write_validation.check_replacement_name(new, name, namespace if resource.namespaced else None)
        expected = _parse_resource_version((new.get("metadata") or {}).get("resourceVersion"), resource, name)
        if expected is None and not resource.builtin:
            raise errors.invalid_field(
                resource.kind,
                resource.group,
                name,
                "metadata.resourceVersion",
                "Invalid value: 0: must be specified for an update",
            )
        return self._write_update(
            resource, current, new, ctx, subresource=subresource, expected=expected, checked=checked
        )

    def _write_update(
        self,
        resource: Resource,
        current: Record,
        new: dict[str, Any],
        ctx: RequestContext,
        *,
        subresource: str,
        expected: int | None,
        checked: dict[str, Any] | None,
        tracked: bool = False,
    ) -> dict[str, Any]:
        """`checked`: `_checked(resource, current)`, worked out once by the caller, which decoded `new` with it."""
        old = current.value
        name = str(old["metadata"]["name"])
        if expected is not None and expected != current.revision:
            raise errors.conflict(resource.plural, resource.group, name, errors.MODIFIED_CONFLICT)
        write_validation.check_uid_unchanged(resource, new, old)
        # An apply computed its managedFields already; a write to /status takes everything else from storage.
        applied_fields = (new.get("metadata") or {}).get("managedFields") if tracked else None
        if subresource == "status":
            # What a status write keeps of the stored object is shared, not copied, when the schema walks will pass
            # it by (checked); they change in place only what differs from the stored object.
            new = metadata.only_status_changes(new, old, share=checked is not None)
        elif subresource == "finalize":
            # namespaces/<n>/finalize changes spec.finalizers and nothing else.
            finalizers = list((new.get("spec") or {}).get("finalizers") or [])
            new = copy_json(old)
            new.setdefault("spec", {})["finalizers"] = finalizers
        elif resource.has_status:
            new = metadata.without_status_changes(new, old)
        metadata.carry_over_system_fields(new, old)
        if resource.namespaced:
            new["metadata"]["namespace"] = old["metadata"]["namespace"]
        self._check_finalizers(resource, new, old)
        new = schema_pass(resource, new, ctx.field_validation, ctx.warnings, checked=checked, owned=True)
        if tracked:
            managed_fields.restore(new, applied_fields)
        else:
            new = managed_fields.track(
                resource, old, new, manager=ctx.manager, subresource=subresource, now=self._now()
            )
        # Admission (KubeVirt's webhooks, built-in strategies) is registered for main resources, not subresources.
        if not subresource:
            new = self._mutate(resource, "UPDATE", new, old, ctx)
        write_validation.validate_metadata(resource, new, old)
        self._validate_schema(resource, new, name, checked=checked, status=subresource == "status")
        if not subresource:
            self._validate_admission(resource, "UPDATE", new, old, ctx)
        metadata.bump_generation(new, old, status_is_separate=resource.has_status)
        if ready_to_remove(new):
            return new if ctx.dry_run else self._remove(resource, current, ctx)
        if without_resource_version(new) == without_resource_version(old):
            # Like etcd3's GuaranteedUpdate: a write that changes nothing is not stored and wakes no watcher.
            return old
        if ctx.dry_run:
            return new
        try:
            record = self.store.update(
                resource.collection,
                current.key,
                stored(resource, new),
                expected_revision=current.revision,
                # Like kube-apiserver's TTL function for events: every write starts the TTL again.
                lease=self._lease(resource) if resource.ttl_seconds else None,
            )
        except Conflict as exc:
            raise errors.conflict(resource.plural, resource.group, name, errors.MODIFIED_CONFLICT) from exc
        self._after_write(resource, record.value, "update")
        return served(resource, record.value)

    def _check_finalizers(self, resource: Resource, new: dict[str, Any], old: dict[str, Any]) -> None:
        if not (old.get("metadata") or {}).get("deletionTimestamp"):
            return
        added = set(new["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
        if added:
            raise errors.invalid_field(
                resource.kind,
                resource.group,
                str(old["metadata"]["name"]),
                "metadata.finalizers",
                "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                + json.dumps(sorted(added)),
                "FieldValueForbidden",
            )

    # ------------------------------------------------------------------------------------------------- patch

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: bytes,
        patch_type: str,
        ctx: RequestContext,
        *,
        subresource: str = "",
    ) -> tuple[dict[str, Any], bool]:
        """Apply a patch; returns the object and whether it was created (server-side apply of a new object)."""
        accepted = patching.BUILTIN_PATCH_TYPES if resource.builtin else patching.CUSTOM_RESOURCE_PATCH_TYPES
        if patch_type not in accepted:
            raise errors.unsupported_media_type(patch_type, accepted)
        applying = patch_type == patching.APPLY_PATCH
        managed_fields.options_error("PatchOptions", ctx.field_manager, apply=applying, force=ctx.force)
        patch = patching.decode_patch(body, patch_type, self.max_object_bytes)
        current = self._record(resource, namespace, name)
        if applying:
            return self._apply(resource, namespace, name, patch, current, ctx, subresource)
        if current is None:
            raise errors.not_found(resource.plural, resource.group, name)
        checked = self._checked(resource, current)
        # A status write takes only the patched status, so the rest of the result may stay the stored object's.
        share = subresource == "status" and checked is not None
        patched = patching.apply(current.value, patch, patch_type, builtin=resource.builtin, share=share)
        return self._write_patched(resource, current, patched, ctx, subresource, checked, tracked=False), False

    def _write_patched(
        self,
        resource: Resource,
        current: Record,
        patched: dict[str, Any],
        ctx: RequestContext,
        subresource: str,
        checked: dict[str, Any] | None,
        *,
        tracked: bool,
    ) -> dict[str, Any]:
        """`checked`: `_checked(resource, current)`, worked out once by the caller."""
        name = str(current.value["metadata"]["name"])
        patched = decode_object(
            resource,
            patched,
            ctx.field_validation,
            ctx.warnings,
            max_bytes=self.max_object_bytes,
            old=current.value,
            checked=checked,
            patched=True,
            # A patch's result is this write's own (patching.apply copies, or for a status write makes its top level
            # and the patch's paths new); an apply's may share with its inputs.
            owned=not tracked,
        )
        # After decoding, as kube's patcher checks the name of what decoded.
        write_validation.check_patched_name(patched, name, current.value["metadata"].get("namespace"))
        expected = _parse_resource_version((patched.get("metadata") or {}).get("resourceVersion"), resource, name)
        if expected is not None and str(expected) == current.value["metadata"].get("resourceVersion"):
            expected = current.revision
        return self._write_update(
            resource,
            current,
            patched,
            ctx,
            subresource=subresource,
            expected=expected,
            checked=checked,
            tracked=tracked,
        )

    def _apply(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        current: Record | None,
        ctx: RequestContext,
        subresource: str,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply; a missing object is created (not through a subresource)."""
        if not isinstance(patch, dict):
            raise errors.bad_request("an apply patch must be an object")
        # The applied configuration is decoded like any body before it is merged (types, unknown fields).
        patch = write_validation.decode_fields(resource, patch, ctx.field_validation, ctx.warnings)
        if current is None and subresource:
            raise errors.not_found(resource.plural, resource.group, name)
        applied = server_side_apply.apply(
            resource,
            current.value if current is not None else None,
            patch,
            manager=ctx.field_manager,
            subresource=subresource,
            force=bool(ctx.force),
            now=self._now(),
        )
        meta = applied.setdefault("metadata", {})
        if resource.namespaced and namespace and meta.get("namespace", namespace) != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if meta.get("name") != name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})"
            )
        if current is None:
            return self.create(resource, namespace, applied, ctx, track=False), True
        checked = self._checked(resource, current)
        return self._write_patched(resource, current, applied, ctx, subresource, checked, tracked=True), False

    # ------------------------------------------------------------------------------------------------- delete

    def delete(
        self, resource: Resource, namespace: str | None, name: str, options: DeleteOptions, ctx: RequestContext
    ) -> tuple[dict[str, Any], bool]:
        """Delete or start deleting; returns the object and whether it is gone (False while finalizers remain)."""
        current = self._record(resource, namespace, name)
        if current is None:
            raise errors.not_found(resource.plural, resource.group, name)
        obj = copy_json(current.value)
        meta = obj["metadata"]
        check_preconditions(resource, name, meta, options)
        if resource.kind == "Namespace" and not resource.group:
            return self._start_namespace_termination(resource, current, obj, ctx), False
        finalizers = propagation_finalizers(meta, options)
        grace = pod_grace_period(resource, obj, options)
        if not finalizers and not grace:
            if ctx.dry_run:
                return obj, True
            return self._remove(resource, current, ctx), True
        now = self.clock()
        already = meta.get("deletionTimestamp")
        if not already or (grace is not None and grace < int(meta.get("deletionGracePeriodSeconds") or 0)):
            meta["deletionTimestamp"] = format_time(now + timedelta(seconds=grace or 0))
            meta["deletionGracePeriodSeconds"] = grace or 0
        if finalizers:
            meta["finalizers"] = finalizers
        if obj == current.value:
            return current.value, False  # deleting again changes nothing
        if ctx.dry_run:
            return obj, False
        record = self.store.update(
            resource.collection, current.key, stored(resource, obj), expected_revision=current.revision
        )
        self._after_write(resource, record.value, "update")
        return served(resource, record.value), False

    def _start_namespace_termination(
        self, resource: Resource, current: Record, obj: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        """Namespaces are emptied by the garbage collector before they go; until then they are Terminating."""
        name = str(obj["metadata"]["name"])
        if name in PROTECTED_NAMESPACES:
            raise errors.forbidden(
                f'namespaces "{name}" is forbidden: this namespace may not be deleted', plural="namespaces", name=name
            )
        if obj["metadata"].get("deletionTimestamp"):
            return obj
        obj["metadata"]["deletionTimestamp"] = format_time(self.clock())
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
        obj.setdefault("status", {})["phase"] = "Terminating"
        if ctx.dry_run:
            return obj
        record = self.store.update(resource.collection, current.key, obj, expected_revision=current.revision)
        return record.value

    def _remove(self, resource: Resource, current: Record, ctx: RequestContext) -> dict[str, Any]:
        try:
            record = self.store.delete(resource.collection, current.key)
        except NotFound as exc:
            raise errors.not_found(resource.plural, resource.group, str(current.value["metadata"]["name"])) from exc
        self._after_write(resource, record.value, "delete")
        return served(resource, record.value)

    def delete_collection(
        self,
        resource: Resource,
        namespace: str | None,
        options: DeleteOptions,
        ctx: RequestContext,
        *,
        label_selector: LabelSelector | None = None,
        field_selector: FieldSelector | None = None,
    ) -> list[dict[str, Any]]:
        items, _, _ = self.list_objects(
            resource, namespace, label_selector=label_selector, field_selector=field_selector
        )
        deleted = []
        for item in items:
            meta = item["metadata"]
            try:
                obj, _ = self.delete(resource, meta.get("namespace"), str(meta["name"]), options, ctx)
            except errors.APIError as exc:
                if exc.code != 404:
                    raise
                continue
            deleted.append(obj)
        return deleted

    # ------------------------------------------------------------------------------------------------- helpers

    def _now(self) -> str:
        return format_time(self.clock())

    def _lease(self, resource: Resource) -> float:
        return self.clock().timestamp() + resource.ttl_seconds

    def _require_namespace(self, namespace: str) -> None:
        ns = self.store.get("core/namespaces", namespace)
        if ns is None:
            raise errors.not_found("namespaces", "", namespace)
        if (ns.value.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.forbidden(
                f"unable to create new content in namespace {namespace} because it is being terminated"
            )

    def _checked(self, resource: Resource, current: Record) -> dict[str, Any] | None:
        """The stored object when it passed this process's decoding and schema walks as they are now, else None.

        What an update leaves as it was there needs no walk again (api/json_equal.py). Objects stored before this
        process started (an older version may have let through what this one refuses) or, for a custom resource,
        before its schema last changed (a CRD update) are walked in full.
        """
        if resource.builtin:
            return current.value if current.revision > self._first_revision else None
        schema = resource.schema
        if schema is None:
            return None
        seen = self._schemas_since.get(resource.collection)
        if seen is None or seen[0] is not schema:
            self._schemas_since[resource.collection] = (schema, self.store.revision)
            return None
        return current.value if current.revision > seen[1] else None

    def _validate_schema(
        self,
        resource: Resource,
        obj: dict[str, Any],
        name: str,
        *,
        checked: dict[str, Any] | None = None,
        status: bool = False,
    ) -> None:
        """The schema's checks, then kube's ValidateScaleSpec (or, for a status write, ValidateScaleStatus)."""
        causes: list[dict[str, str]] = []
        if resource.schema is not None and not resource.schema.get("x-kubernetes-preserve-unknown-fields"):
            problems = validate(obj, resource.schema, old=checked if checked is not None else ABSENT)
            causes = [p.cause() for p in problems]
        if resource.scale is not None and not resource.builtin:
            causes += scale_errors(obj, resource.scale, status=status)
        if causes:
            raise errors.invalid(resource.kind, resource.group, name, causes)

    def _mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        for plugin in self.admission:
            if plugin.handles(resource):
                obj = plugin.mutate(resource, operation, obj, old, ctx)
        return obj

    def _validate_admission(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> None:
        for plugin in self.admission:
            if plugin.handles(resource):
                ctx.warnings.extend(plugin.validate(resource, operation, obj, old, ctx))

    def _after_write(self, resource: Resource, obj: dict[str, Any], action: str) -> None:
        if resource.kind == "CustomResourceDefinition" and resource.group == "apiextensions.k8s.io":
            for hook in self.on_crd_change:
                hook(obj, action)
