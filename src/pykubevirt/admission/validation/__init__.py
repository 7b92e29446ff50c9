"""KubeVirt's validating admission as pure functions on plain dicts; each returns the causes of a rejection."""

from __future__ import annotations

from pykubevirt.admission.validation.clone import validate_vm_clone
from pykubevirt.admission.validation.common import REQUEST_ERROR
from pykubevirt.admission.validation.datavolume import validate_datavolume
from pykubevirt.admission.validation.instancetype import validate_instancetype, validate_preference
from pykubevirt.admission.validation.migration import validate_migration_create
from pykubevirt.admission.validation.replica_set import validate_vmirs
from pykubevirt.admission.validation.snapshot import validate_vm_restore, validate_vm_snapshot
from pykubevirt.admission.validation.vm import validate_vm
from pykubevirt.admission.validation.vm_pool import validate_vm_pool
from pykubevirt.admission.validation.vmi import validate_vmi_create, validate_vmi_spec, validate_vmi_update

__all__ = [
    "REQUEST_ERROR",
    "validate_datavolume",
    "validate_instancetype",
    "validate_migration_create",
    "validate_preference",
    "validate_vm",
    "validate_vm_clone",
    "validate_vm_pool",
    "validate_vm_restore",
    "validate_vm_snapshot",
    "validate_vmi_create",
    "validate_vmi_spec",
    "validate_vmi_update",
    "validate_vmirs",
]
