"""PriorityClasses as kube-apiserver serves them: the two system classes it creates at start and will not delete,
their validation, `kubectl get priorityclasses`' table, and the Priority admission plugin that gives a pod the
priority of its class (`api.pod_priority`)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.api import pod_priority as pp
from pykubevirt.apiserver.builtin import OPEN_SCHEMA
from pykubevirt.apiserver.printers import AGE, NAME, Table, age_cell, column, name_cell, printed_table
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.object_api import ObjectAPI
    from pykubevirt.apiserver.request_context import RequestContext
    from pykubevirt.apiserver.store import Store

GROUP = "scheduling.k8s.io"
COLLECTION = f"{GROUP}/priorityclasses"
PRIORITY_CLASS_COLUMNS = [
    NAME,
    column("Value", "value represents the integer value of this priority class.", "integer"),
    column("Global-Default", "globalDefault specifies whether this PriorityClass should be the default.", "boolean"),
    AGE,
    column("PreemptionPolicy", "preemptionPolicy is the Policy for preempting pods with lower priority."),
]


def priority_class_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get priorityclasses."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [
            name_cell(obj),
            obj.get("value") or 0,
            obj.get("globalDefault") is True,
            age_cell(obj, now),
            obj.get("preemptionPolicy") or "",
        ]

    return printed_table(PRIORITY_CLASS_COLUMNS, row, objects, now)


PRIORITY_CLASSES = Resource(
    GROUP,
    "v1",
    "PriorityClass",
    "priorityclasses",
    "priorityclass",
    False,
    OPEN_SCHEMA,
    short_names=("pc",),
    builtin=True,
    table=priority_class_table,
)


def _is_priority_class(resource: Resource) -> bool:
    return resource.group == GROUP and resource.kind == "PriorityClass"


class PriorityAdmission:
    """The Priority plugin for pods, and PriorityClasses' defaults and validation; reads classes from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and (_is_priority_class(resource) or (not resource.group and resource.kind == "Pod"))

    def _classes(self) -> list[dict[str, Any]]:
        return [record.value for record in self.store.records(COLLECTION)]

    def _find(self, name: str) -> dict[str, Any] | None:
        record = self.store.get(COLLECTION, name)
        return record.value if record is not None else None

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        if _is_priority_class(resource):
            pp.default_priority_class(obj)
            return obj
        spec = obj.get("spec")
        if not isinstance(spec, dict) or ctx.subresource:
            return obj
        if old is not None:
            pp.keep_priority(spec, old.get("spec") or {})
            return obj
        refused = pp.admit_new_pod(spec, self._find, self._classes)
        if refused:
            name = str((obj.get("metadata") or {}).get("name") or "")
            raise errors.forbidden(f'pods "{name}" is forbidden: {refused}', plural="pods", name=name)
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        if not _is_priority_class(resource):
            return []
        name = str((obj.get("metadata") or {}).get("name") or "")
        found = pp.priority_class_causes(obj, old)
        if found:
            raise errors.invalid(resource.kind, resource.group, name, [cause.to_dict() for cause in found])
        refused = pp.already_default(obj, self._classes(), creating=old is None)
        if refused:
            message = f'priorityclasses.{GROUP} "{name}" is forbidden: {refused}'
            raise errors.forbidden(message, plural="priorityclasses", group=GROUP, name=name)
        return []

    def admit_delete(self, resource: Resource, current: dict[str, Any], ctx: RequestContext) -> None:
        """The system classes stay: kube-apiserver refuses to delete them."""
        name = str((current.get("metadata") or {}).get("name") or "")
        if _is_priority_class(resource) and any(name == system[0] for system in pp.SYSTEM_PRIORITY_CLASSES):
            raise errors.forbidden(
                f'priorityclasses.{GROUP} "{name}" is forbidden: {pp.SYSTEM_CLASS_UNDELETABLE}',
                plural="priorityclasses",
                group=GROUP,
                name=name,
            )


def ensure_system_priority_classes(api: ObjectAPI, ctx: RequestContext) -> None:
    """Create the system classes that are missing, as kube-apiserver's start-up hook does."""
    for pc in pp.system_priority_classes():
        if api.find(PRIORITY_CLASSES, None, pc["metadata"]["name"]) is None:
            api.create(PRIORITY_CLASSES, None, pc, ctx)
