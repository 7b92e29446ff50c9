"""Garbage collection by ownerReferences and namespace termination, as kube-controller-manager does them.

Dependents whose owners are all gone are deleted (background propagation); an owner deleted with the `orphan`
finalizer first has its dependents released; an owner deleted in the foreground waits until its blocking
dependents are gone. A terminating namespace is emptied, then removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.json_copy import copy_json
from pykubevirt.apiserver import patching
from pykubevirt.apiserver.deletion import BACKGROUND, FOREGROUND, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, DeleteOptions
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.request_context import RequestContext, UserInfo
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.store_records import DELETED, Event

log = logging.getLogger("pykubevirt.apiserver.gc")

GC_USER = UserInfo("system:serviceaccount:kube-system:generic-garbage-collector", ("system:serviceaccounts",))
NAMESPACE_COLLECTION = "core/namespaces"
NAMESPACE_FINALIZER = "kubernetes"

# (collection, key) of an object in the store.
Ref = tuple[str, str]


def _owner_uids(obj: dict[str, Any]) -> list[str]:
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return []
    return [str(o["uid"]) for o in refs if isinstance(o, dict) and o.get("uid")]


def malformed_metadata(obj: dict[str, Any]) -> str:
    """Why the collector cannot follow this object's metadata ("" when it can): stored by an older version."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "metadata is not an object"
    refs = meta.get("ownerReferences")
    if refs is not None and not (isinstance(refs, list) and all(isinstance(o, dict) for o in refs)):
        return "metadata.ownerReferences is not a list of objects"
    if not isinstance(meta.get("uid", ""), str):
        return "metadata.uid is not a string"
    return ""


class GarbageCollector:
    """Keeps an index of owners and dependents from the store's events and acts on it in one task."""

    def __init__(self, api: ObjectAPI) -> None:
        self.api = api
        self.store = api.store
        self._by_uid: dict[str, Ref] = {}
        self._dependents: dict[str, set[Ref]] = {}
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._pending: set[tuple[str, str]] = set()
        self._build_index()
        self.store.add_listener(self._on_event)

    # --------------------------------------------------------------------------------------------- index

    def _build_index(self) -> None:
        indexed: list[dict[str, Any]] = []
        for collection in self.store.collections():
            for record in self.store.records(collection):
                problem = malformed_metadata(record.value)
                if problem:
                    # Written before writes were validated; serving it beats refusing to start.
                    log.warning("not collecting %s %s: %s", collection, record.key, problem)
                    continue
                self._index(collection, record.key, record.value)
                indexed.append(record.value)
        for uid, dependents in self._dependents.items():
            if uid not in self._by_uid and dependents:
                self._enqueue("owner-gone", uid)
        for obj in indexed:
            if obj["metadata"].get("deletionTimestamp"):
                self._enqueue("deleting", str(obj["metadata"].get("uid")))

    def _index(self, collection: str, key: str, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            self._by_uid[str(uid)] = (collection, key)
        for owner in _owner_uids(obj):
            self._dependents.setdefault(owner, set()).add((collection, key))

    def _unindex(self, collection: str, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        uid = (obj.get("metadata") or {}).get("uid")
        if uid and self._by_uid.get(str(uid)) == (collection, key):
            del self._by_uid[str(uid)]
        for owner in _owner_uids(obj):
            dependents = self._dependents.get(owner)
            if dependents is not None:
                dependents.discard((collection, key))
                if not dependents:
                    del self._dependents[owner]

    def _on_event(self, event: Event) -> None:
        self._unindex(event.collection, event.key, event.previous)
        meta = event.value.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if event.type == DELETED:
            self._unindex(event.collection, event.key, event.value)
            if uid in self._dependents:
                self._enqueue("owner-gone", uid)
            for owner in _owner_uids(event.value):
                if owner in self._by_uid:
                    self._enqueue("deleting", owner)
            return
        self._index(event.collection, event.key, event.value)
        if meta.get("deletionTimestamp"):
            self._enqueue("deleting", uid)
        for owner in _owner_uids(event.value):
            if owner not in self._by_uid:
                self._enqueue("owner-gone", owner)

    def _enqueue(self, action: str, uid: str) -> None:
        item = (action, uid)
        if item not in self._pending:
            self._pending.add(item)
            self._queue.put_nowait(item)

    # --------------------------------------------------------------------------------------------- work

    async def run(self) -> None:
        """Process work items until cancelled; one failure never stops the collector."""
        while True:
            action, uid = await self._queue.get()
            self._pending.discard((action, uid))
            try:
                if action == "owner-gone":
                    self._owner_gone(uid)
                else:
                    self._deleting(uid)
            except errors.APIError as exc:
                if exc.code == 409:
                    self._enqueue(action, uid)
                    await asyncio.sleep(0.05)
                elif exc.code != 404:
                    log.warning("garbage collection of %s failed: %s", uid, exc.message)
            except Exception:
                log.exception("garbage collection of %s failed", uid)
            await asyncio.sleep(0)

    def _resource_of(self, collection: str) -> Resource | None:
        for resource in self.api.registry.all():
            if resource.collection == collection:
                return resource
        return None

    def _object(self, ref: Ref) -> tuple[Resource, dict[str, Any]] | None:
        resource = self._resource_of(ref[0])
        record = self.store.get(*ref)
        if resource is None or record is None:
            return None
        return resource, record.value

    def _context(self) -> RequestContext:
        return RequestContext(user=GC_USER, user_agent="kube-controller-manager")

    def _delete(self, resource: Resource, obj: dict[str, Any], policy: str) -> None:
        meta = obj["metadata"]
        options = DeleteOptions(propagation_policy=policy, precondition_uid=meta.get("uid"))
        self.api.delete(resource, meta.get("namespace"), str(meta["name"]), options, self._context())
        log.info(
            "deleted dependent %s %s/%s (%s propagation)",
            resource.kind,
            meta.get("namespace", ""),
            meta["name"],
            policy,
        )

    def _patch_metadata(self, resource: Resource, obj: dict[str, Any], changes: dict[str, Any]) -> None:
        """Merge `changes` into the object's metadata, only if it is still the version read (else a 409 requeues)."""
        meta = obj["metadata"]
        patch = {"metadata": {**changes, "resourceVersion": meta.get("resourceVersion")}}
        self.api.patch(
            resource,
            meta.get("namespace"),
            str(meta["name"]),
            json.dumps(patch).encode(),
            patching.MERGE_PATCH,
            self._context(),
        )

    def _set_owner_references(self, resource: Resource, obj: dict[str, Any], refs: list[dict[str, Any]]) -> None:
        self._patch_metadata(resource, obj, {"ownerReferences": refs or None})

    def _owner_gone(self, uid: str) -> None:
        if uid in self._by_uid:
            return
        for ref in list(self._dependents.get(uid, ())):
            found = self._object(ref)
            if found is None:
                continue
            resource, obj = found
            meta = obj["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            remaining = [o for o in meta.get("ownerReferences") or [] if str(o.get("uid")) in self._by_uid]
            if remaining:
                self._set_owner_references(resource, obj, remaining)
            else:
                self._delete(resource, obj, BACKGROUND)

    def _deleting(self, uid: str) -> None:
        ref = self._by_uid.get(uid)
        if ref is None:
            return
        found = self._object(ref)
        if found is None:
            return
        resource, obj = found
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp"):
            return
        if resource.collection == NAMESPACE_COLLECTION:
            self._terminate_namespace(resource, obj)
            return
        finalizers = list(meta.get("finalizers") or [])
        if ORPHAN_FINALIZER in finalizers:
            for dependent in self._dependent_objects(uid):
                dep_resource, dep = dependent
                refs = [o for o in dep["metadata"].get("ownerReferences") or [] if str(o.get("uid")) != uid]
                self._set_owner_references(dep_resource, dep, refs)
            self._remove_finalizer(resource, uid, ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            blocking = False
            for dep_resource, dep in self._dependent_objects(uid):
                if not dep["metadata"].get("deletionTimestamp"):
                    self._delete(dep_resource, dep, FOREGROUND)
                if any(
                    str(o.get("uid")) == uid and o.get("blockOwnerDeletion")
                    for o in dep["metadata"].get("ownerReferences") or []
                ):
                    blocking = True
            if not blocking:
                self._remove_finalizer(resource, uid, FOREGROUND_FINALIZER)

    def _dependent_objects(self, uid: str) -> Iterable[tuple[Resource, dict[str, Any]]]:
        for ref in list(self._dependents.get(uid, ())):
            found = self._object(ref)
            if found is not None:
                yield found

    def _remove_finalizer(self, resource: Resource, uid: str, finalizer: str) -> None:
        ref = self._by_uid.get(uid)
        if ref is None:
            return
        record = self.store.get(*ref)
        if record is None:
            return
        finalizers = [f for f in record.value["metadata"].get("finalizers") or [] if f != finalizer]
        self._patch_metadata(resource, record.value, {"finalizers": finalizers or None})

    def _terminate_namespace(self, resource: Resource, namespace: dict[str, Any]) -> None:
        name = str(namespace["metadata"]["name"])
        if NAMESPACE_FINALIZER not in ((namespace.get("spec") or {}).get("finalizers") or []):
            return  # emptied already; what remains are metadata.finalizers for their owners to remove
        remaining = 0
        for res in self.api.registry.all():
            if not res.namespaced:
                continue
            for record in self.store.records(res.collection, f"{name}/"):
                remaining += 1
                if not (record.value.get("metadata") or {}).get("deletionTimestamp"):
                    self._delete(res, record.value, BACKGROUND)
        if remaining:
            # Re-check once the contents are gone; their DELETED events do not name the namespace.
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, self._enqueue, "deleting", str(namespace["metadata"]["uid"]))
            return
        # Empty: drop the `kubernetes` finalizer through /finalize, as the namespace controller does. The namespace
        # goes once its metadata.finalizers are gone too.
        finalizers = [f for f in (namespace.get("spec") or {}).get("finalizers") or [] if f != NAMESPACE_FINALIZER]
        finalized = copy_json(namespace)
        finalized["spec"] = dict(finalized.get("spec") or {}, finalizers=finalizers)
        self.api.update(resource, None, name, finalized, self._context(), subresource="finalize")
        log.info("namespace %s emptied", name)
