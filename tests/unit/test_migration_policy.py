"""MigrationPolicy selection and the effective migration settings, as KubeVirt's migrationpolicy.go."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.config.cluster_config import MigrationConfig
from pykubevirt.config.migration_policy import (
    apply_policy,
    cluster_migration_configuration,
    effective_migration_configuration,
    match_policy,
)

Obj = dict[str, Any]


def policy(name: str, vmi: dict[str, str] | None = None, ns: dict[str, str] | None = None, **spec: Any) -> Obj:
    selectors: Obj = {}
    if vmi is not None:
        selectors["virtualMachineInstanceSelector"] = vmi
    if ns is not None:
        selectors["namespaceSelector"] = ns
    return {"metadata": {"name": name}, "spec": {"selectors": selectors, **spec}}


def labelled(labels: dict[str, str] | None) -> Obj:
    return {"metadata": {"labels": labels}} if labels is not None else {"metadata": {}}


def name_of(chosen: Obj | None) -> str | None:
    return None if chosen is None else str(chosen["metadata"]["name"])


VMI = labelled({"app": "db", "tier": "gold"})
NS = labelled({"team": "a", "env": "prod"})


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        ([], None),
        ([policy("p", {"app": "web"})], None),
        ([policy("p", {"app": "db"})], "p"),
        ([policy("p", ns={"team": "b"})], None),
        ([policy("p", ns={"team": "a"})], "p"),
        # A label matched on both sides must all be there: one mismatch drops the policy.
        ([policy("p", {"app": "db"}, {"team": "b"})], None),
        # More matched labels wins, whichever side they are on.
        ([policy("one", {"app": "db"}), policy("two", {"app": "db"}, {"team": "a"})], "two"),
        ([policy("two-ns", ns={"team": "a", "env": "prod"}), policy("one-vmi", {"app": "db"})], "two-ns"),
        # Same total: the policy with more VMI labels wins.
        ([policy("ns", ns={"team": "a"}), policy("vmi", {"app": "db"})], "vmi"),
        ([policy("ns2", ns={"team": "a", "env": "prod"}), policy("mixed", {"app": "db"}, {"team": "a"})], "mixed"),
        # Fully tied: the lexicographically smallest name.
        ([policy("b", {"app": "db"}), policy("a", {"tier": "gold"}), policy("c", {"app": "db"})], "a"),
        # Empty selectors match everything with score zero; any label match beats them.
        ([policy("empty"), policy("z", {"app": "db"})], "z"),
        ([policy("empty")], "empty"),
    ],
)
def test_policy_selection_precedence(policies: list[Obj], expected: str | None) -> None:
    assert name_of(match_policy(policies, VMI, NS)) == expected


def test_a_policy_without_selectors_never_matches() -> None:
    assert match_policy([{"metadata": {"name": "p"}, "spec": {}}], VMI, NS) is None


def test_a_vmi_without_labels_skips_both_selectors() -> None:
    # KubeVirt's quirk: nil VMI labels skip the namespace selector too, so every policy matches with score zero.
    chosen = match_policy([policy("b", {"app": "db"}), policy("a", ns={"team": "x"})], labelled(None), NS)
    assert name_of(chosen) == "a"
    assert name_of(match_policy([policy("p", ns={"team": "a"})], labelled({}), NS)) == "p"
    assert match_policy([policy("p", ns={"team": "a"})], labelled({}), labelled(None)) is None


def test_cluster_defaults_are_kubevirts() -> None:
    assert cluster_migration_configuration(MigrationConfig()) == {
        "parallelMigrationsPerCluster": 5,
        "parallelOutboundMigrationsPerNode": 2,
        "bandwidthPerMigration": "0Mi",
        "completionTimeoutPerGiB": 150,
        "progressTimeout": 150,
        "unsafeMigrationOverride": False,
        "allowAutoConverge": False,
        "allowPostCopy": False,
        "allowWorkloadDisruption": False,
        "disableTLS": False,
        "maxDowntimeMs": 900,
        "utilityVolumesTimeout": 150,
        "nodeDrainTaintKey": "kubevirt.io/drain",
    }
    # allowWorkloadDisruption follows allowPostCopy unless set.
    assert cluster_migration_configuration(MigrationConfig(allow_post_copy=True))["allowWorkloadDisruption"] is True
    explicit = MigrationConfig(allow_post_copy=True, allow_workload_disruption=False)
    assert cluster_migration_configuration(explicit)["allowWorkloadDisruption"] is False


def test_policy_fields_override_without_touching_the_base() -> None:
    base = cluster_migration_configuration(MigrationConfig())
    before = dict(base)
    spec = {
        "allowAutoConverge": True,
        "bandwidthPerMigration": "64Mi",
        "completionTimeoutPerGiB": 300,
        "maxDowntimeMs": 100,
        "allowWorkloadDisruption": True,
        "experimental": {"compression": "zstd", "stallDetector": {"stallMargin": 5}},
    }
    result = apply_policy(base, policy("p", {"app": "db"}, **spec))
    assert base == before
    for key, value in spec.items():
        assert result[key] == value
    assert result["allowPostCopy"] is False
    assert result["progressTimeout"] == 150


@pytest.mark.parametrize("post_copy", [True, False])
def test_policy_post_copy_implies_workload_disruption(post_copy: bool) -> None:
    base = cluster_migration_configuration(MigrationConfig(allow_workload_disruption=not post_copy))
    result = apply_policy(base, policy("p", allowPostCopy=post_copy))
    assert result["allowPostCopy"] is post_copy
    assert result["allowWorkloadDisruption"] is post_copy


def test_effective_configuration_names_the_policy() -> None:
    cluster = MigrationConfig(bandwidth_per_migration="1Gi")
    none = effective_migration_configuration(cluster, [policy("p", {"app": "web"})], VMI, NS)
    assert none.policy_name is None
    assert none.configuration["bandwidthPerMigration"] == "1Gi"
    chosen = effective_migration_configuration(
        cluster, [policy("p", {"app": "db"}, completionTimeoutPerGiB=9)], VMI, NS
    )
    assert chosen.policy_name == "p"
    assert chosen.configuration["completionTimeoutPerGiB"] == 9
    assert chosen.configuration["bandwidthPerMigration"] == "1Gi"
