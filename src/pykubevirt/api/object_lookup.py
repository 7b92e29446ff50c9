"""Read-only access to other objects by kind, for pure code that must consult them (admission, instancetypes)."""

from __future__ import annotations

from typing import Any, Protocol


class ObjectLookup(Protocol):
    """Read-only access to other objects (instancetypes, preferences, VMIs, migrations) (admission reads them)."""

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None: ...

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]: ...


class NoLookup:
    """A lookup that knows no objects (offline validation of manifests)."""

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return None

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return []
