"""MigrationPolicy (migrations.kubevirt.io/v1alpha1): per-VMI migration settings chosen by VMI and namespace labels."""

from __future__ import annotations

from pykubevirt.api.kubevirt.migration import MIGRATION_CONFIGURATION
from pykubevirt.api.schema import Schema, obj, string, string_map

MIGRATIONS_GROUP = "migrations.kubevirt.io"
MIGRATIONS_VERSION = "v1alpha1"
MIGRATION_POLICY_KIND = "MigrationPolicy"

# The policy's tunables are a subset of the cluster's MigrationConfiguration, with the same names and types.
_POLICY_FIELDS = (
    "allowAutoConverge",
    "allowPostCopy",
    "allowWorkloadDisruption",
    "bandwidthPerMigration",
    "completionTimeoutPerGiB",
    "experimental",
    "maxDowntimeMs",
)

MIGRATION_POLICY: Schema = obj(
    {
        "apiVersion": string(f"API version: {MIGRATIONS_GROUP}/{MIGRATIONS_VERSION}."),
        "kind": string(f"Kind: {MIGRATION_POLICY_KIND}."),
        "metadata": obj(),
        "spec": obj(
            {
                "selectors": obj(
                    {
                        "namespaceSelector": string_map("Labels the VMI's namespace must carry."),
                        "virtualMachineInstanceSelector": string_map("Labels the VMI must carry."),
                    },
                    "Which VMIs the policy applies to.",
                ),
                **{name: MIGRATION_CONFIGURATION["properties"][name] for name in _POLICY_FIELDS},
            },
            "Migration settings for the selected VMIs.",
            required=("selectors",),
        ),
        "status": obj(preserve_unknown=True),
    },
    "Migration settings that override the cluster's for VMIs selected by labels.",
    required=("spec",),
)
