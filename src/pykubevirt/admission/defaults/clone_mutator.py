"""KubeVirt's CloneCreateMutator (pkg/virt-api/webhooks/mutating-webhook/mutators/clone-create-mutator.go), CREATE
only: a clone without a target, or with an unnamed one, gets the VirtualMachine `clone-<source>-<random>`."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.constants import KUBEVIRT_GROUP, VM_KIND
from pykubevirt.api.json_lookup import as_list, as_map, as_str

CLONE_MUTATOR_WEBHOOK = "virtualmachineclones-mutator.kubevirt.io"
# k8s.io/apimachinery's rand.String alphabet and the mutator's suffix length.
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5


def random_target_suffix() -> str:
    return "".join(random.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))


def target_name(source_name: str, suffix: str) -> str:
    return f"clone-{source_name}-{suffix}"


def mutate_vm_clone(clone: dict[str, Any], *, operation: str, suffix: str | None = None) -> None:
    """Name the target when it has no name; the spec is then rewritten as Go encodes it, as KubeVirt's patch
    replaces the whole of /spec."""
    if operation != "CREATE":
        return
    spec = clone.get("spec")
    if not isinstance(spec, dict):
        return
    target = spec.get("target")
    if isinstance(target, Mapping) and as_str(target.get("name")):
        return
    name = target_name(as_str(as_map(spec.get("source")).get("name")), suffix or random_target_suffix())
    if isinstance(target, Mapping):
        spec["target"] = {**target, "name": name}
    else:
        spec["target"] = {"apiGroup": KUBEVIRT_GROUP, "kind": VM_KIND, "name": name}
    clone["spec"] = go_encoded_spec(spec)


def _reference(value: Any) -> dict[str, Any] | None:
    """A *TypedLocalObjectReference: apiGroup only when set (a pointer), kind and name always."""
    if not isinstance(value, Mapping):
        return None
    ref: dict[str, Any] = {}
    if value.get("apiGroup") is not None:
        ref["apiGroup"] = as_str(value.get("apiGroup"))
    ref["kind"] = as_str(value.get("kind"))
    ref["name"] = as_str(value.get("name"))
    return ref


def _filters(holder: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key in ("annotationFilters", "labelFilters"):
        items = [as_str(item) for item in as_list(holder.get(key))]
        if items:
            found[key] = items
    return found


def go_encoded_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """VirtualMachineCloneSpec as encoding/json writes it: empty lists and maps left out, `template` always there."""
    encoded: dict[str, Any] = {"source": _reference(spec.get("source"))}
    target = _reference(spec.get("target"))
    if target is not None:
        encoded["target"] = target
    encoded.update(_filters(spec))
    encoded["template"] = _filters(as_map(spec.get("template")))
    macs = {str(k): as_str(v) for k, v in as_map(spec.get("newMacAddresses")).items()}
    if macs:
        encoded["newMacAddresses"] = macs
    for key in ("newSMBiosSerial", "volumeNamePolicy"):
        if spec.get(key) is not None:
            encoded[key] = as_str(spec.get(key))
    patches = [as_str(p) for p in as_list(spec.get("patches"))]
    if patches:
        encoded["patches"] = patches
    return encoded
