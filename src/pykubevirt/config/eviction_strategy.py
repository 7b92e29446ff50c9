"""A VMI's eviction strategy and migratability, as KubeVirt's `migrations.VMIEvictionStrategy` and `IsMigratable`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykubevirt.config.cluster_config import ClusterConfig

NONE = "None"
LIVE_MIGRATE = "LiveMigrate"
LIVE_MIGRATE_IF_POSSIBLE = "LiveMigrateIfPossible"
EXTERNAL = "External"


def eviction_strategy(vmi: Mapping[str, Any], config: ClusterConfig) -> str:
    """The VMI's own strategy, else the cluster's (KubeVirt CR spec.configuration.evictionStrategy), else None."""
    own = (vmi.get("spec") or {}).get("evictionStrategy")
    return str(own or config.eviction_strategy or NONE)


def is_migratable(vmi: Mapping[str, Any]) -> bool:
    """The VMI's LiveMigratable condition is True."""
    conditions = (vmi.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "LiveMigratable" and c.get("status") == "True" for c in conditions)
