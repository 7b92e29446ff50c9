"""Which kind an instancetype or preference matcher names, read from its `kind` as all of upstream's finders do."""

from __future__ import annotations

from pykubevirt.api.constants import (
    CLUSTER_INSTANCETYPE_KIND,
    CLUSTER_PREFERENCE_KIND,
    INSTANCETYPE_KIND,
    PREFERENCE_KIND,
)

# matcher field → (its namespaced kind, its cluster-wide kind)
MATCHER_KINDS: dict[str, tuple[str, str]] = {
    "instancetype": (INSTANCETYPE_KIND, CLUSTER_INSTANCETYPE_KIND),
    "preference": (PREFERENCE_KIND, CLUSTER_PREFERENCE_KIND),
}


def named_kind(matcher_key: str, kind: str) -> str | None:
    """The kind a matcher's `kind` names, singular or plural in any case; an empty one names the cluster-wide kind.

    None for anything else: upstream's finders answer "got unexpected kind in …Matcher" there."""
    namespaced, cluster = MATCHER_KINDS[matcher_key]
    lowered = kind.lower()
    if lowered in (namespaced.lower(), namespaced.lower() + "s"):
        return namespaced
    if lowered in ("", cluster.lower(), cluster.lower() + "s"):
        return cluster
    return None


def is_namespaced(kind: str) -> bool:
    """Whether a kind named_kind returned lives in the VM's namespace."""
    return kind in (INSTANCETYPE_KIND, PREFERENCE_KIND)
