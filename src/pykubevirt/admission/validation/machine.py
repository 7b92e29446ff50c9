"""Machine type: must match one of the cluster's emulated-machine patterns for the architecture."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.validation.common import go_list
from pykubevirt.api.causes import Cause, FieldPath, invalid
from pykubevirt.api.json_lookup import as_str, get

# KubeVirt's per-architecture defaults; the cluster config only carries the amd64 list.
_DEFAULT_EMULATED_MACHINES = {"arm64": ("virt*",), "s390x": ("s390-ccw-virtio*",)}


def emulated_machines(arch: str, ctx: AdmissionContext) -> tuple[str, ...]:
    return _DEFAULT_EMULATED_MACHINES.get(arch, ctx.config.emulated_machines)


def validate_machine(field: FieldPath, spec: Mapping[str, Any], ctx: AdmissionContext) -> list[Cause]:
    machine_type = as_str(get(spec, "domain", "machine", "type"))
    if not machine_type:
        return []
    allowed = emulated_machines(as_str(spec.get("architecture")), ctx)
    if any(fnmatch.fnmatchcase(machine_type, pattern) for pattern in allowed):
        return []
    path = field.child("domain", "machine", "type")
    return [invalid(str(path), f"{path} is not supported: {machine_type} (allowed values: {go_list(allowed)})")]
