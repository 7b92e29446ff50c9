"""The resources the API server serves: built-in Kubernetes kinds plus every installed CRD."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pykubevirt.api.scale import ScaleSubresource
from pykubevirt.api.schema import Schema

DEFAULT_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# A built-in kind's printer: objects and the time ages are measured at → (columnDefinitions, cells per object).
TableRows = Callable[[list[dict[str, Any]], datetime], tuple[list[dict[str, Any]], list[list[Any]]]]


@dataclass(frozen=True, slots=True)
class Resource:
    """One served resource (group/version/plural) and how to treat it."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    schema: Schema | None = None
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    printer_columns: tuple[dict[str, Any], ...] = ()
    subresources: frozenset[str] = frozenset()
    verbs: tuple[str, ...] = DEFAULT_VERBS
    builtin: bool = False
    # Built-in kinds print their own tables (kube-apiserver's internal printers); CRDs use printer_columns.
    table: TableRows | None = None
    # Objects expire this many seconds after their last write (Events).
    ttl_seconds: int = 0
    # Extra fields a fieldSelector may use besides metadata.name/metadata.namespace.
    selectable_fields: tuple[str, ...] = ()
    # Where the /scale subresource reads and writes replicas (a CRD's `subresources.scale`).
    scale: ScaleSubresource | None = None
    # A CRD's version its objects are stored in; objects read or written through another served version differ only
    # in apiVersion (conversion strategy None). Empty for built-in kinds.
    storage_version: str = ""
    # Sent as a Warning with every response for this version (a CRD version marked deprecated).
    deprecation_warning: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def collection(self) -> str:
        """The store collection name, as kube-apiserver names etcd prefixes."""
        return f"{self.group or 'core'}/{self.plural}"

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def key(self, namespace: str | None, name: str) -> str:
        return f"{namespace}/{name}" if self.namespaced else name

    def namespace_prefix(self, namespace: str | None) -> str:
        return f"{namespace}/" if self.namespaced and namespace else ""


class Registry:
    """Resources by group/version/plural; `generation` moves whenever the set changes (CRDs come and go)."""

    def __init__(self) -> None:
        self._by_path: dict[tuple[str, str, str], Resource] = {}
        self.generation = 0

    def add(self, resource: Resource) -> None:
        self._by_path[(resource.group, resource.version, resource.plural)] = resource
        self.generation += 1

    def remove(self, group: str, version: str, plural: str) -> None:
        if self._by_path.pop((group, version, plural), None) is not None:
            self.generation += 1

    def get(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_path.get((group, version, plural))

    def builtin(self, group: str, version: str, plural: str) -> Resource:
        """A resource every server serves (pods, nodes, RBAC…); its absence is a bug, not a request's error."""
        resource = self._by_path.get((group, version, plural))
        if resource is None:
            raise LookupError(f"built-in resource {plural} of {group or 'core'}/{version} is not registered")
        return resource

    def all(self) -> list[Resource]:
        return list(self._by_path.values())

    def groups(self) -> dict[str, list[str]]:
        """group → versions served (core group "" included)."""
        found: dict[str, list[str]] = {}
        for resource in self._by_path.values():
            versions = found.setdefault(resource.group, [])
            if resource.version not in versions:
                versions.append(resource.version)
        return found

    def in_group_version(self, group: str, version: str) -> list[Resource]:
        return sorted(
            (r for r in self._by_path.values() if r.group == group and r.version == version), key=lambda r: r.plural
        )

    def extend(self, resources: Iterable[Resource]) -> None:
        for resource in resources:
            self._by_path[(resource.group, resource.version, resource.plural)] = resource
        self.generation += 1
