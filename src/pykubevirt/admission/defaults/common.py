"""Small helpers the defaulting modules share: creating nested dicts, quantities, clock and UUIDs.

Reading nested fields and parsing quantities are validation.common's `get` and `parse_quantity`.
"""

from __future__ import annotations

import uuid
from typing import Any

from pykubevirt.admission.causes import RequestDenied
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.json_lookup import parse_quantity
from pykubevirt.api.timestamps import now_rfc3339

# Webhook names, as KubeVirt registers its mutating webhooks.
VM_MUTATOR_WEBHOOK = "virtualmachines-mutator.kubevirt.io"
VMI_MUTATOR_WEBHOOK = "virtualmachineinstances-mutator.kubevirt.io"

# Kinds looked up through ctx.lookup that api/constants.py does not name.
PVC_KIND = "PersistentVolumeClaim"
DATA_SOURCE_KIND = "DataSource"
VOLUME_SNAPSHOT_KIND = "VolumeSnapshot"
CONTROLLER_REVISION_KIND = "ControllerRevision"
VMI_PRESET_KIND = "VirtualMachineInstancePreset"

ARCH_AMD64 = "amd64"
ARCH_ARM64 = "arm64"
ARCH_S390X = "s390x"


# Mutators refuse with a plain 400 `Status`, as KubeVirt's mutating webhooks do.
MutationDenied = RequestDenied


def obj(parent: dict[str, Any], key: str) -> dict[str, Any] | None:
    """`parent[key]` as a dict, created when missing or null; None when it holds something else."""
    value = parent.get(key)
    if value is None:
        value = {}
        parent[key] = value
    return value if isinstance(value, dict) else None


def as_dict(value: Any) -> dict[str, Any]:
    """The value when it is a dict, else an empty (detached) dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """The value when it is a list, else an empty (detached) list."""
    return value if isinstance(value, list) else []


def dicts(value: Any) -> list[dict[str, Any]]:
    """The dict items of a list (a null or non-list value has none)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def is_zero(value: Any) -> bool:
    """True for an absent, malformed or zero quantity, as `ResourceList.Memory().IsZero()` sees it."""
    q = parse_quantity(value)
    return q is None or q.is_zero()


def canonical_or_same(value: Any) -> Any:
    """The canonical string of a quantity, or the value unchanged when it does not parse."""
    q = parse_quantity(value)
    return str(q) if q is not None else value


def now(ctx: AdmissionContext) -> str:
    """The current time as metav1.Time serialises it (RFC 3339, seconds, Z)."""
    if ctx.now is not None:
        return ctx.now()
    return now_rfc3339()


def random_uuid(ctx: AdmissionContext) -> str:
    if ctx.random_uuid is not None:
        return ctx.random_uuid()
    return str(uuid.uuid4())


def truthy_state(state: Any) -> bool:
    """A FeatureState-like dict whose `enabled` is true."""
    return isinstance(state, dict) and state.get("enabled") is True
