"""What KubeVirt's webhooks refuse before any check of their own: a spec of the wrong JSON types for its schema, and a
number Go cannot decode into the unsigned field it fills.

Each webhook first validates the raw object's spec against KubeVirt's OpenAPI schema (422), then decodes it into the
Go types (400 with encoding/json's error), so `cores: "2"` and `cores: 1.5` are type errors and `cores: -1` is a
decoding error; none of them reaches the defaults.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.causes import AdmissionRejected, RequestDenied
from pykubevirt.api.causes import Cause
from pykubevirt.api.json_equal import ABSENT, same_json
from pykubevirt.api.kinds import kind_for
from pykubevirt.api.structural import validate

_TYPE_ERROR_PREFIX = "Invalid value: "

# The unsigned integers of a VMI's spec: path below the spec (lists by their field name) → (Go struct, Go type).
_UNSIGNED = {
    ("domain", "cpu", "cores"): ("CPU", "uint32"),
    ("domain", "cpu", "sockets"): ("CPU", "uint32"),
    ("domain", "cpu", "maxSockets"): ("CPU", "uint32"),
    ("domain", "cpu", "threads"): ("CPU", "uint32"),
    ("domain", "devices", "disks", "bootOrder"): ("Disk", "uint"),
    ("domain", "devices", "disks", "blockSize", "custom", "logical"): ("CustomBlockSize", "uint"),
    ("domain", "devices", "disks", "blockSize", "custom", "physical"): ("CustomBlockSize", "uint"),
    ("domain", "devices", "disks", "blockSize", "custom", "discardGranularity"): ("CustomBlockSize", "uint"),
    ("domain", "devices", "interfaces", "bootOrder"): ("Interface", "uint"),
    ("domain", "features", "hyperv", "spinlocks", "spinlocks"): ("FeatureSpinlocks", "uint32"),
    ("domain", "ioThreads", "supplementalPoolThreadCount"): ("DiskIOThreads", "uint32"),
}
_BITS = {"uint32": 32, "uint": 64}
# Where a kind keeps a VMI spec.
_VMI_SPEC = {"VirtualMachineInstance": ("spec",), "VirtualMachine": ("spec", "template", "spec")}


def check_decodable(obj: dict[str, Any], webhook: str, old: dict[str, Any] | None = None) -> None:
    """Raise the webhook's refusal when `obj` would not reach its checks; nothing for a kind without a schema, or for
    an update that leaves the spec as it was (a status write)."""
    spec = kind_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if spec is None or (old is not None and same_json(obj.get("spec"), old.get("spec"))):
        return
    causes = [
        Cause("", error.detail.split(": ", 2)[-1] if error.detail.startswith(_TYPE_ERROR_PREFIX) else error.detail, "")
        for error in validate(obj, spec.schema, old=ABSENT if old is None else old)
        if error.reason == "FieldValueTypeInvalid" and error.field.startswith("spec")
    ]
    if causes:
        raise AdmissionRejected(causes, webhook)
    prefix = _VMI_SPEC.get(str(obj.get("kind")))
    if prefix is not None:
        message = _unsigned_error(_at(obj, prefix), prefix)
        if message:
            raise RequestDenied(message, webhook)


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _unsigned_error(spec: Any, prefix: tuple[str, ...]) -> str:
    for path, (struct, go_type) in _UNSIGNED.items():
        for value in _values(spec, path):
            if not _fits(value, go_type):
                field = ".".join((*prefix, *path))
                number = _literal(value)
                return f"json: cannot unmarshal number {number} into Go struct field {struct}.{field} of type {go_type}"
    return ""


def _values(value: Any, path: tuple[str, ...]) -> list[Any]:
    """Every value at `path`, through lists on the way (Go names a list's items by the list's field)."""
    found = [value]
    for key in path:
        step: list[Any] = []
        for item in found:
            for node in item if isinstance(item, list) else [item]:
                if isinstance(node, dict) and node.get(key) is not None:
                    step.append(node[key])
        found = step
    # Only numbers: any other type is the schema check's.
    return [v for v in found if isinstance(v, (int, float)) and not isinstance(v, bool)]


def _fits(value: int | float, go_type: str) -> bool:
    return isinstance(value, int) and 0 <= value < 2 ** _BITS[go_type]


def _literal(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(value)
