"""memorydump/removememorydump as KubeVirt's virt-api decides them (pkg/virt-api/rest/memorydump.go). Pure.

A request associates a claim with the VM through its status.memoryDumpRequest, which virt-controller acts on; the
JSON patch tests the request that was read, so that two concurrent calls cannot both win.
"""

from __future__ import annotations

import math
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.api.go_json import go_json_value
from pykubevirt.api.json_lookup import get
from pykubevirt.api.memory_dump_size import expected_dump_size, size_with_overhead
from pykubevirt.api.objects import vmi_phase
from pykubevirt.api.quantity import Quantity, QuantityFormat, parse_quantity
from pykubevirt.api.timestamps import format_time, parse_time
from pykubevirt.virtapi.lifecycle import name_of, vm_conflict, vmi_conflict
from pykubevirt.virtapi.options import decode_body, unmarshal_error
from pykubevirt.virtapi.vmi_checks import VMI_NOT_RUNNING

Patch = list[dict[str, Any]]

TYPE_NAME = "VirtualMachineMemoryDumpRequest"
CLAIM_RESOURCE = "persistentvolumeclaim"
REQUEST_PATH = "/status/memoryDumpRequest"
ASSOCIATING = "Associating"
DISSOCIATING = "Dissociating"
COMPLETED = "Completed"
FAILED = "Failed"

NO_BODY = "Request with no body"
CLAIM_NAME_REQUIRED = "Memory dump requires claim name to be set"
BLOCK_CLAIM = "pvc should be filesystem pvc"
READ_ONLY_CLAIM = "pvc access mode can't be read only"
TOO_SMALL = "pvc size [{size}] should be bigger then [{expected}]"
CLAIM_CHANGED = "can't request memory dump for pvc [{new}] while pvc [{old}] is still associated as the memory dump pvc"
REMOVE_IN_PROGRESS = "can't dump memory for pvc [{claim}] a remove memory dump request is in progress"
DUMP_IN_PROGRESS = "memory dump request for pvc [{claim}] already in progress"
NO_ASSOCIATION = "can't remove memory dump association for vm {vm}, no association found"
REMOVE_EXISTS = "memory dump remove request for pvc [{claim}] already exists"

RFC3339 = "2006-01-02T15:04:05Z07:00"

# The request's fields in Go's order: (name, Go type in decode errors, how Go serialises it).
_FIELDS = (
    ("claimName", "string", "always"),
    ("phase", "v1.MemoryDumpPhase", "always"),
    ("remove", "bool", "nonzero"),
    ("startTimestamp", "string", "time"),
    ("endTimestamp", "string", "time"),
    ("fileName", "string", "pointer"),
    ("message", "string", "nonzero"),
)


def claim_not_found(name: str) -> errors.APIError:
    """Upstream names the claim as v1.Resource does, so in kubevirt.io's group."""
    return errors.not_found(CLAIM_RESOURCE, c.KUBEVIRT_GROUP, name)


def claim_conflict(name: str, why: str) -> errors.APIError:
    return errors.conflict(CLAIM_RESOURCE, c.KUBEVIRT_GROUP, name, why)


def _decoded(name: str, go_type: str, value: Any) -> Any:
    expected: type = bool if go_type == "bool" else str
    if not isinstance(value, expected):
        raise unmarshal_error(
            f"json: cannot unmarshal {go_json_value(value)} into Go struct field {TYPE_NAME}.{name} of type {go_type}"
        )
    return value


def parse_request(body: bytes) -> dict[str, Any]:
    """The body as a VirtualMachineMemoryDumpRequest (Go's zero values filled in), put in the Associating phase."""
    if not body.strip():
        raise errors.bad_request(NO_BODY)
    data = decode_body(body, TYPE_NAME)
    request: dict[str, Any] = {}
    for name, go_type, kind in _FIELDS:
        value = data.get(name)
        if value is not None:
            value = _decoded(name, go_type, value)
        if kind == "always":
            request[name] = value or ""
        elif kind == "nonzero" and value:
            request[name] = value
        elif kind == "pointer" and value is not None:
            request[name] = value
        elif kind == "time" and value is not None:
            parsed = parse_time(value)
            if parsed is None:
                raise unmarshal_error(f'parsing time "{value}" as "{RFC3339}"')
            request[name] = format_time(parsed)
    request["phase"] = ASSOCIATING
    return request


def _existing(vm: dict[str, Any]) -> dict[str, Any] | None:
    existing: dict[str, Any] | None = get(vm, "status", "memoryDumpRequest")
    return existing


def with_claim(vm: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The request with its claim: the one asked for, or the VM's current one when none is; 400/409 otherwise."""
    existing = _existing(vm)
    claim = request.get("claimName") or ""
    if not claim and existing is None:
        raise errors.bad_request(CLAIM_NAME_REQUIRED)
    if existing is None:
        return request
    old = existing.get("claimName") or ""
    if claim and old != claim:
        raise vm_conflict(name_of(vm), CLAIM_CHANGED.format(new=claim, old=old))
    return {**request, "claimName": old}


def check_running(vmi: dict[str, Any]) -> None:
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        raise vmi_conflict(name_of(vmi), VMI_NOT_RUNNING)


def kilo_scaled(size: Quantity) -> Quantity:
    """`NewScaledQuantity(q.ScaledValue(Kilo), Kilo)`: rounded up to whole thousands, printed in DecimalSI."""
    return Quantity(math.ceil(size.value / 1000) * 1000, QuantityFormat.DECIMAL_SI)


def check_claim(vmi: dict[str, Any], claim: dict[str, Any]) -> None:
    """The claim must be a writable filesystem large enough for the VMI's dump; 409 on the claim otherwise."""
    name = name_of(claim)
    spec = claim.get("spec") or {}
    if spec.get("volumeMode") == "Block":
        raise claim_conflict(name, BLOCK_CLAIM)
    if "ReadOnlyMany" in (spec.get("accessModes") or []):
        raise claim_conflict(name, READ_ONLY_CLAIM)
    storage = get(spec, "resources", "requests", "storage")
    requested = parse_quantity(storage) if storage is not None else Quantity(0, QuantityFormat.BINARY_SI)
    scaled = kilo_scaled(requested)
    expected = size_with_overhead(expected_dump_size(vmi))
    if scaled < expected:
        raise claim_conflict(name, TOO_SMALL.format(size=scaled, expected=expected))


def _patch(existing: dict[str, Any] | None, request: dict[str, Any]) -> Patch:
    return [
        {"op": "test", "path": REQUEST_PATH, "value": existing},
        {"op": "add" if existing is None else "replace", "path": REQUEST_PATH, "value": request},
    ]


def dump_patch(vm: dict[str, Any], request: dict[str, Any]) -> Patch:
    """The status patch setting the new request; 409 while another one is still being worked on."""
    existing = _existing(vm)
    claim = request.get("claimName") or ""
    if existing is not None:
        phase = existing.get("phase")
        if phase == DISSOCIATING:
            raise vm_conflict(name_of(vm), REMOVE_IN_PROGRESS.format(claim=claim))
        if phase not in (COMPLETED, FAILED):
            raise vm_conflict(name_of(vm), DUMP_IN_PROGRESS.format(claim=claim))
    return _patch(existing, request)


def remove_patch(vm: dict[str, Any]) -> Patch:
    """The status patch asking virt-controller to dissociate the current claim; 409 when there is none to remove."""
    existing = _existing(vm)
    if existing is None:
        raise vm_conflict(name_of(vm), NO_ASSOCIATION.format(vm=name_of(vm)))
    claim = existing.get("claimName") or ""
    if existing.get("remove"):
        raise vm_conflict(name_of(vm), REMOVE_EXISTS.format(claim=claim))
    return _patch(existing, {"claimName": claim, "phase": DISSOCIATING, "remove": True})
