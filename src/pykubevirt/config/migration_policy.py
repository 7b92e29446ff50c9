"""The migration settings one VMI migrates with: the cluster's, overridden by its best-matching MigrationPolicy.

KubeVirt's virt-controller (`pkg/virt-controller/watch/migration/migrationpolicy.go`) picks the policy at handoff
and stores the result in the VMI's `status.migrationState.migrationConfiguration` and `migrationPolicyName`.
`effective_migration_configuration` is that whole step, for the migration controller to call.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.config.cluster_config import MigrationConfig

Obj = Mapping[str, Any]

# Policy fields copied over the cluster's when the policy sets them (applyMigrationPolicySpec).
_POLICY_OVERRIDES = (
    "allowAutoConverge",
    "bandwidthPerMigration",
    "completionTimeoutPerGiB",
    "maxDowntimeMs",
    "allowPostCopy",
    "allowWorkloadDisruption",
)


@dataclass(frozen=True, slots=True)
class MatchScore:
    """How many of a policy's selector labels matched the VMI's and its namespace's."""

    vmi_labels: int = 0
    namespace_labels: int = 0

    def beats(self, other: MatchScore) -> bool:
        """More matched labels in total wins; on a tie, more matched VMI labels."""
        total, other_total = self.vmi_labels + self.namespace_labels, other.vmi_labels + other.namespace_labels
        if total == other_total:
            return self.vmi_labels > other.vmi_labels
        return total > other_total


def _labels(obj: Obj | None) -> Mapping[str, str] | None:
    # Go's nil map: an object without labels. KubeVirt skips a selector when the labels are nil.
    labels = ((obj or {}).get("metadata") or {}).get("labels")
    return labels if isinstance(labels, Mapping) else None


def _count(selector: Mapping[str, str], labels: Mapping[str, str]) -> int | None:
    """How many selector labels `labels` carries with the same value; None as soon as one is missing."""
    for key, value in selector.items():
        if labels.get(key) != value:
            return None
    return len(selector)


def match_score(
    policy: Obj, vmi_labels: Mapping[str, str] | None, namespace_labels: Mapping[str, str] | None
) -> MatchScore | None:
    """The policy's score for a VMI, or None when the policy does not select it (countMatchingLabels)."""
    selectors = (policy.get("spec") or {}).get("selectors")
    if not isinstance(selectors, Mapping):
        return None
    vmi_selector = selectors.get("virtualMachineInstanceSelector")
    ns_selector = selectors.get("namespaceSelector")
    vmi_count = ns_count = 0
    # KubeVirt's quirk, kept: both selectors are skipped (they match) when the VMI has no labels at all.
    if isinstance(vmi_selector, Mapping) and vmi_labels is not None:
        counted = _count(vmi_selector, vmi_labels)
        if counted is None:
            return None
        vmi_count = counted
    if isinstance(ns_selector, Mapping) and vmi_labels is not None:
        counted = _count(ns_selector, namespace_labels or {})
        if counted is None:
            return None
        ns_count = counted
    return MatchScore(vmi_count, ns_count)


def match_policy(policies: Iterable[Obj], vmi: Obj, namespace: Obj | None) -> Obj | None:
    """The policy for `vmi` (matchPolicy): highest score, then more VMI labels, then the smallest name."""
    vmi_labels, ns_labels = _labels(vmi), _labels(namespace)
    best: list[Obj] = []
    best_score = MatchScore()
    for policy in policies:
        score = match_score(policy, vmi_labels, ns_labels)
        if score is None or best_score.beats(score):
            continue
        if score.beats(best_score):
            best_score, best = score, [policy]
        else:
            best.append(policy)
    if not best:
        return None
    return min(best, key=lambda p: str((p.get("metadata") or {}).get("name") or ""))


def cluster_migration_configuration(config: MigrationConfig) -> dict[str, Any]:
    """The cluster's settings as KubeVirt's MigrationConfiguration JSON, defaults filled in."""
    out: dict[str, Any] = {
        "parallelMigrationsPerCluster": config.parallel_migrations_per_cluster,
        "parallelOutboundMigrationsPerNode": config.parallel_outbound_migrations_per_node,
        "bandwidthPerMigration": config.bandwidth_per_migration,
        "completionTimeoutPerGiB": config.completion_timeout_per_gib,
        "progressTimeout": config.progress_timeout,
        "unsafeMigrationOverride": config.unsafe_migration_override,
        "allowAutoConverge": config.allow_auto_converge,
        "allowPostCopy": config.allow_post_copy,
        "allowWorkloadDisruption": (
            config.allow_post_copy if config.allow_workload_disruption is None else config.allow_workload_disruption
        ),
        "disableTLS": config.disable_tls,
        "maxDowntimeMs": config.max_downtime_ms,
        "utilityVolumesTimeout": config.utility_volumes_timeout,
        "nodeDrainTaintKey": config.node_drain_taint_key,
    }
    if config.network is not None:
        out["network"] = config.network
    if config.match_selinux_level_on_migration is not None:
        out["matchSELinuxLevelOnMigration"] = config.match_selinux_level_on_migration
    return out


def _merge_experimental(base: Any, override: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = copy.deepcopy(dict(base)) if isinstance(base, Mapping) else {}
    for key, value in override.items():
        if isinstance(value, Mapping):
            merged[key] = {**(merged.get(key) or {}), **copy.deepcopy(dict(value))}
        elif value is not None:
            merged[key] = value
    return merged


def apply_policy(base: Mapping[str, Any], policy: Obj) -> dict[str, Any]:
    """`base` with the policy's set fields over it, `base` untouched (applyMigrationPolicySpec)."""
    spec = policy.get("spec") or {}
    result = copy.deepcopy(dict(base))
    # Backward compatibility: a policy allowing post-copy without saying about disruption allows that too.
    if spec.get("allowWorkloadDisruption") is None and spec.get("allowPostCopy") is not None:
        result["allowWorkloadDisruption"] = spec["allowPostCopy"]
    for name in _POLICY_OVERRIDES:
        if spec.get(name) is not None:
            result[name] = spec[name]
    if isinstance(spec.get("experimental"), Mapping):
        result["experimental"] = _merge_experimental(result.get("experimental"), spec["experimental"])
    return result


@dataclass(frozen=True, slots=True)
class EffectiveMigrationConfiguration:
    """What a migration of one VMI runs with, and the policy it came from (None: the cluster's settings)."""

    configuration: dict[str, Any]
    policy_name: str | None


def effective_migration_configuration(
    cluster: MigrationConfig, policies: Iterable[Obj], vmi: Obj, namespace: Obj | None
) -> EffectiveMigrationConfiguration:
    """The settings for migrating `vmi`: the cluster's, with the matching MigrationPolicy applied.

    For `status.migrationState.migrationConfiguration` and `migrationPolicyName` at the migration's handoff.
    """
    base = cluster_migration_configuration(cluster)
    policy = match_policy(policies, vmi, namespace)
    if policy is None:
        return EffectiveMigrationConfiguration(base, None)
    name = str((policy.get("metadata") or {}).get("name") or "")
    return EffectiveMigrationConfiguration(apply_policy(base, policy), name)
