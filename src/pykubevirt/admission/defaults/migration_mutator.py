"""The VirtualMachineInstanceMigration mutating webhook (CREATE only): VMI label and finalizer (§8)."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults.common import as_list, obj
from pykubevirt.api import constants as c
from pykubevirt.api.json_lookup import get


def mutate_migration(vmim: dict[str, Any], ctx: AdmissionContext, *, operation: str) -> None:
    """Label the migration with its VMI's name (overwriting any value) and add the migration finalizer."""
    if operation != "CREATE":
        return
    metadata = obj(vmim, "metadata")
    if metadata is None:
        return
    labels = obj(metadata, "labels")
    if labels is not None:
        labels[c.VMI_NAME_LABEL] = str(get(vmim, "spec", "vmiName") or "")
    finalizers = as_list(metadata.get("finalizers"))
    if c.MIGRATION_FINALIZER not in finalizers:
        finalizers = [*finalizers, c.MIGRATION_FINALIZER]
    metadata["finalizers"] = finalizers
