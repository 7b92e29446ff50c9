"""kube-apiserver's Table printers for the RBAC kinds (pkg/printers/internalversion: printRole, printRoleBinding)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pykubevirt.apiserver.printers import AGE, NAME, Table, age_cell, column, name_cell, printed_table

ROLE_COLUMNS = [NAME, column("Created At", "Time when the role was created.", "date")]
BINDING_COLUMNS = [
    NAME,
    column("Role", "Role of the binding, as Kind/Name."),
    AGE,
    column("Users", "Users in the binding.", priority=1),
    column("Groups", "Groups in the binding.", priority=1),
    column("ServiceAccounts", "ServiceAccounts in the binding, as namespace/name.", priority=1),
]


def role_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get roles|clusterroles: the creation time itself, not an age."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        return [name_cell(obj), str((obj.get("metadata") or {}).get("creationTimestamp") or "")]

    return printed_table(ROLE_COLUMNS, row, objects, now)


def _subjects(obj: dict[str, Any], kind: str) -> str:
    found = []
    for subject in obj.get("subjects") or []:
        if not isinstance(subject, dict) or subject.get("kind") != kind:
            continue
        name = str(subject.get("name", ""))
        found.append(f"{subject.get('namespace') or ''}/{name}" if kind == "ServiceAccount" else name)
    return ", ".join(found)


def binding_table(objects: list[dict[str, Any]], now: datetime | None = None) -> Table:
    """kubectl get rolebindings|clusterrolebindings (-o wide adds the subjects)."""

    def row(obj: dict[str, Any], now: datetime) -> list[Any]:
        ref = obj.get("roleRef") or {}
        return [
            name_cell(obj),
            f"{ref.get('kind', '')}/{ref.get('name', '')}",
            age_cell(obj, now),
            _subjects(obj, "User"),
            _subjects(obj, "Group"),
            _subjects(obj, "ServiceAccount"),
        ]

    return printed_table(BINDING_COLUMNS, row, objects, now)
