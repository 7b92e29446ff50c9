"""Informers: list, then watch from the list's resourceVersion, into an indexed cache that handlers hear about.

A watch that ends is resumed from the last resourceVersion seen (bookmarks keep it fresh); 410 Gone means the
history is gone, so the informer lists again and reconciles its cache with what it missed. The loop is
supervised: any error backs off and restarts it.

The cache drops `metadata.managedFields` (client-go's TransformStripManagedFields): no component reads them, they
are most of a launcher pod's decoded containers (341 of 461), and an update sent without them keeps the stored ones.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError, Gone
from pykubevirt.client.resources import ResourceRef

log = logging.getLogger("pykubevirt.client.informer")

IndexFunc = Callable[[Object], Iterable[str]]


def object_key(obj: Object) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's MetaNamespaceKeyFunc)."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


@dataclass(frozen=True, slots=True)
class EventHandler:
    on_add: Callable[[Object], None] | None = None
    on_update: Callable[[Object, Object], None] | None = None
    on_delete: Callable[[Object], None] | None = None


class Informer:
    """A cache of one resource kept in step with the API server. Cached objects are shared: copy before editing."""

    def __init__(
        self,
        client: KubeClient,
        resource: ResourceRef,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        watch_timeout_seconds: int = 300,
    ) -> None:
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self._items: dict[str, Object] = {}
        self._indexers: dict[str, IndexFunc] = {}
        self._indices: dict[str, dict[str, set[str]]] = {}
        self._handlers: list[EventHandler] = []
        # key -> (the versions a write of this process's supersedes, the object it returned); see `wrote`.
        self._written: dict[str, tuple[frozenset[str], Object]] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""

    # ------------------------------------------------------------------------------------------------ cache

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        self._indexers[name] = func
        index: dict[str, set[str]] = {}
        for key, obj in self._items.items():
            for value in func(obj):
                index.setdefault(value, set()).add(key)
        self._indices[name] = index

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)
        if self.synced.is_set() and handler.on_add is not None:
            for obj in list(self._items.values()):
                handler.on_add(obj)

    def get(self, key: str) -> Object | None:
        """The cached object, or this process's own newer write of it while its watch event is on the way."""
        obj = self._items.get(key)
        written = self._written.get(key)
        if written is not None and obj is not None and _version(obj) in written[0]:
            return written[1]
        return obj

    def get_by_name(self, namespace: str | None, name: str) -> Object | None:
        return self.get(f"{namespace}/{name}" if namespace else name)

    def wrote(self, written: Object, replaced_version: str) -> None:
        """Serve this process's write of an object from `get` until the cache moves on (client-go's MutationCache).

        A controller woken for an object again before the watch brings its own write back would otherwise work from
        the version that write replaced: its next write fails with a conflict, a request and a retry for nothing.
        """
        _strip_managed_fields(written)
        key = object_key(written)
        cached, served = self._items.get(key), self.get(key)
        if cached is None or served is None or _version(served) != replaced_version:
            return  # based on a read the cache never served: nothing to say about the cache
        # It supersedes the cached version, and each earlier write of this process's the watch has yet to bring.
        earlier = self._written[key][0] if served is not cached else frozenset()
        self._written[key] = (earlier | {_version(cached), replaced_version}, written)

    def items(self) -> list[Object]:
        return list(self._items.values())

    def keys(self) -> list[str]:
        return list(self._items)

    def size(self) -> int:
        """How many objects the cache holds (no copy of its keys)."""
        return len(self._items)

    def by_index(self, name: str, value: str) -> list[Object]:
        keys = self._indices.get(name, {}).get(value, set())
        return [self._items[k] for k in keys if k in self._items]

    def _index(self, key: str, obj: Object | None, *, remove: bool) -> None:
        if obj is None:
            return
        for name, func in self._indexers.items():
            index = self._indices.setdefault(name, {})
            for value in func(obj):
                if remove:
                    keys = index.get(value)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del index[value]
                else:
                    index.setdefault(value, set()).add(key)

    def _store(self, obj: Object) -> tuple[Object | None, Object]:
        key = object_key(obj)
        written = self._written.get(key)
        if written is not None and _version(obj) not in written[0]:
            del self._written[key]
        old = self._items.get(key)
        self._index(key, old, remove=True)
        self._items[key] = obj
        self._index(key, obj, remove=False)
        return old, obj

    def _remove(self, key: str) -> Object | None:
        old = self._items.pop(key, None)
        self._written.pop(key, None)
        self._index(key, old, remove=True)
        return old

    def _notify(self, kind: str, obj: Object, old: Object | None = None) -> None:
        for handler in self._handlers:
            try:
                if kind == "add" and handler.on_add is not None:
                    handler.on_add(obj)
                elif kind == "update" and handler.on_update is not None:
                    handler.on_update(old if old is not None else obj, obj)
                elif kind == "delete" and handler.on_delete is not None:
                    handler.on_delete(obj)
            except Exception:
                log.exception("informer handler for %s failed", self.resource.plural)

    # ------------------------------------------------------------------------------------------------ loop

    async def run(self) -> None:
        """List and watch forever; cancel the task to stop."""
        delay = 0.5
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    delay = 0.5
                await self._watch()
            except Gone:
                log.info(
                    "watch of %s expired at resourceVersion %s; listing again",
                    self.resource.plural,
                    self.resource_version,
                )
                need_list = True
            except (TimeoutError, ApiError, OSError, ValueError) as exc:
                log.warning("watch of %s failed (%s); retrying in %.1fs", self.resource.plural, exc, delay)
                await asyncio.sleep(delay * (1 + random.random() * 0.2))
                delay = min(delay * 2, 30.0)
                # The client may have lost events while disconnected only if the history is gone (then 410).
            except Exception:
                log.exception("informer for %s crashed; restarting it", self.resource.plural)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                need_list = True

    async def _list(self) -> None:
        items, resource_version = await self.client.list_all(
            self.resource, self.namespace, label_selector=self.label_selector, field_selector=self.field_selector
        )
        seen = set()
        for obj in items:
            _strip_managed_fields(obj)
            obj.setdefault("kind", self.resource.kind)
            obj.setdefault("apiVersion", self.resource.api_version)
            key = object_key(obj)
            seen.add(key)
            old, new = self._store(obj)
            if old is None:
                self._notify("add", new)
            elif (old.get("metadata") or {}).get("resourceVersion") != (new.get("metadata") or {}).get(
                "resourceVersion"
            ):
                self._notify("update", new, old)
        for key in [k for k in self._items if k not in seen]:
            gone = self._remove(key)
            if gone is not None:
                self._notify("delete", gone)
        self.resource_version = resource_version
        self.synced.set()

    async def _watch(self) -> None:
        async for event in self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.watch_timeout_seconds,
        ):
            obj = event.object
            revision = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if event.type == "BOOKMARK":
                self.resource_version = revision or self.resource_version
                continue
            _strip_managed_fields(obj)
            obj.setdefault("kind", self.resource.kind)
            obj.setdefault("apiVersion", self.resource.api_version)
            if event.type in ("ADDED", "MODIFIED"):
                old, new = self._store(obj)
                self._notify("add" if old is None else "update", new, old)
            elif event.type == "DELETED":
                gone = self._remove(object_key(obj))
                self._notify("delete", gone if gone is not None else obj)
            self.resource_version = revision or self.resource_version


def _version(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _strip_managed_fields(obj: Object) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)


async def wait_for_sync(informers: Iterable[Informer]) -> None:
    await asyncio.gather(*(i.synced.wait() for i in informers))


def field_index(path: str) -> IndexFunc:
    """An index on a dotted field (`status.nodeName`, `metadata.labels.kubevirt.io/nodeName` style paths)."""
    parts = path.split(".")

    def index(obj: Object) -> list[str]:
        value: Any = obj
        for part in parts:
            if not isinstance(value, dict):
                return []
            value = value.get(part)
        return [str(value)] if value not in (None, "") else []

    return index


def owner_uid_index(obj: Object) -> list[str]:
    return [str(o["uid"]) for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if o.get("uid")]
