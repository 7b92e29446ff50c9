"""What a CDI DataSource stands for as a DataVolume source, read the same way by CDI's webhook, its DataVolume
controller and KubeVirt's GetResolvedCloneSource. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def data_source_target(
    data_source: Mapping[str, Any], namespace: str | None = None
) -> dict[str, dict[str, str]] | None:
    """`{"pvc"|"snapshot": {"name", "namespace"}}`: its own source, or the status's when it names another DataSource;
    a source without a namespace is in the DataSource's (`namespace`, where it was found, else its metadata's). None
    while it names none."""
    source = (data_source.get("spec") or {}).get("source") or {}
    if source.get("dataSource") is not None:
        source = (data_source.get("status") or {}).get("source") or {}
    namespace = namespace or str((data_source.get("metadata") or {}).get("namespace") or "")
    for kind in ("pvc", "snapshot"):
        target = source.get(kind)
        if isinstance(target, Mapping):
            name, own_namespace = str(target.get("name") or ""), str(target.get("namespace") or "")
            return {kind: {"name": name, "namespace": own_namespace or namespace}}
    return None
