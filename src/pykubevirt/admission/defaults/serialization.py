"""What KubeVirt's mutators change just by re-serialising the object they decoded into Go structs.

The mutators answer with `replace /spec` (and /metadata, /status) built from the typed object, so quantities come
back in canonical form (`1024Mi` → `1Gi`, `2` → `"2"`) and a few non-pointer structs always appear.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.defaults.common import canonical_or_same, dicts
from pykubevirt.api.json_lookup import get


def _canonical_map(values: Any) -> None:
    if isinstance(values, dict):
        for key, value in values.items():
            values[key] = canonical_or_same(value)


def _canonical_key(parent: Any, key: str) -> None:
    if isinstance(parent, dict) and parent.get(key) is not None:
        parent[key] = canonical_or_same(parent[key])


def _canonical_resources(resources: Any) -> None:
    if isinstance(resources, dict):
        _canonical_map(resources.get("requests"))
        _canonical_map(resources.get("limits"))


def canonicalize_vmi_spec(spec: dict[str, Any]) -> None:
    """Rewrite the quantity fields of a VMI spec in the form the Go types print them."""
    domain = spec.get("domain")
    if isinstance(domain, dict):
        _canonical_resources(domain.get("resources"))
        memory = domain.get("memory")
        _canonical_key(memory, "guest")
        _canonical_key(memory, "maxGuest")
        _canonical_key(get(memory, "reservedOverhead"), "addedOverhead")
    for volume in dicts(spec.get("volumes")):
        _canonical_key(volume.get("emptyDisk"), "capacity")
        _canonical_key(volume.get("hostDisk"), "capacity")


def canonicalize_vmi_status(status: Any) -> None:
    memory = get(status, "memory")
    for key in ("guestAtBoot", "guestCurrent", "guestRequested", "memoryOverhead"):
        _canonical_key(memory, key)


def canonicalize_data_volume_templates(vm_spec: dict[str, Any]) -> None:
    for template in dicts(vm_spec.get("dataVolumeTemplates")):
        for kind in ("pvc", "storage"):
            _canonical_resources(get(template, "spec", kind, "resources"))


def add_struct_artefacts(spec: dict[str, Any]) -> None:
    """`domain.devices` and `domain.resources` are value structs in Go and are always printed."""
    domain = spec.get("domain")
    if domain is None:
        domain = spec["domain"] = {}
    if isinstance(domain, dict):
        for key in ("resources", "devices"):
            if domain.get(key) is None:
                domain[key] = {}
