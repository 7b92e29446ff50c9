"""An admission ObjectLookup over a fixed dict of objects, for admission tests that need instancetypes or VMIs."""

from __future__ import annotations

from typing import Any

ObjectKey = tuple[str, str | None, str]


class DictLookup:
    """Objects by (kind, namespace, name); list() filters by kind and namespace."""

    def __init__(self, objects: dict[ObjectKey, dict[str, Any]]) -> None:
        self.objects = objects

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        return [o for (k, ns, _), o in self.objects.items() if k == kind and ns == namespace]
