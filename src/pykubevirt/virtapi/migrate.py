"""The `migrate` subresource of a VM: a VirtualMachineInstanceMigration for its running VMI.

Upstream: pkg/virt-api/rest/lifecycle.go (MigrateVMRequestHandler). Body `MigrateOptions{addedNodeSelector, dryRun}`;
a VMI that is not Running is a 409 `VM is not running`; success is 202 with the created migration.
"""

from __future__ import annotations

import json
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.virtapi.lifecycle import VM_NOT_RUNNING, vm_conflict

GENERATE_NAME = "kubevirt-migrate-vm-"


def parse_migrate_options(body: bytes) -> dict[str, Any]:
    """MigrateOptions from the request body (empty means none)."""
    if not body.strip():
        return {}
    try:
        options = json.loads(body)
    except ValueError as exc:
        raise errors.bad_request(f"Can not unmarshal Request body to struct, error: {exc}") from exc
    if not isinstance(options, dict):
        raise errors.bad_request("Can not unmarshal Request body to struct")
    return options


def migration_for(name: str, vmi: dict[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
    """The migration to create for the VM `name`, or the 409 when its VMI is not running."""
    if vmi is None or (vmi.get("status") or {}).get("phase") != c.PHASE_RUNNING:
        raise vm_conflict(name, VM_NOT_RUNNING)
    spec: dict[str, Any] = {"vmiName": name}
    selector = options.get("addedNodeSelector")
    if isinstance(selector, dict) and selector:
        spec["addedNodeSelector"] = {str(k): str(v) for k, v in selector.items()}
    return {
        "apiVersion": c.KUBEVIRT_API_VERSION,
        "kind": c.VMIM_KIND,
        "metadata": {"generateName": GENERATE_NAME},
        "spec": spec,
    }
