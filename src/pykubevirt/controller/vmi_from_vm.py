"""Building a VMI from its VM's template (KubeVirt's SetupVMIFromVM and friends). Pure."""

from __future__ import annotations

import uuid
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller import vm_memory_dump as memory_dump
from pykubevirt.controller.run_strategy import has_start_paused_request

START_STRATEGY_PAUSED = "Paused"


def legacy_firmware_uuid(name: str) -> str:
    """The stable firmware UUID KubeVirt derives from the VMI name when the template sets none."""
    return str(uuid.uuid5(uuid.UUID(c.FIRMWARE_UUID_NAMESPACE), name))


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", c.KUBEVIRT_API_VERSION),
        "kind": owner.get("kind", c.VM_KIND),
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def set_default_volume_disks(spec: dict[str, Any]) -> None:
    """Every volume that no disk or filesystem uses gets a disk of its name."""
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    used = {d.get("name") for d in devices.get("disks") or []} | {
        f.get("name") for f in devices.get("filesystems") or []
    }
    for volume in spec.get("volumes") or []:
        if volume.get("name") not in used:
            devices.setdefault("disks", []).append({"name": volume["name"]})


def auto_attach_input_device(spec: dict[str, Any]) -> None:
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    if devices.get("autoattachInputDevice") and not devices.get("inputs"):
        devices["inputs"] = [{"name": "default-0"}]


def set_default_network_interface(spec: dict[str, Any], config: ClusterConfig) -> None:
    """The pod network and its interface when the template names none (the binding from the cluster config)."""
    devices = spec.setdefault("domain", {}).setdefault("devices", {})
    if devices.get("autoattachPodInterface") is False:
        return
    if devices.get("interfaces") or spec.get("networks"):
        return
    binding = "masquerade" if config.network_interface == "masquerade" else "bridge"
    devices["interfaces"] = [{"name": "default", binding: {}}]
    spec["networks"] = [{"name": "default", "pod": {}}]


def vmi_from_vm(vm: dict[str, Any], config: ClusterConfig) -> dict[str, Any]:
    """The VMI the VM controller creates: template metadata and spec, owner, finalizer, generation annotation."""
    template = vm["spec"].get("template") or {}
    meta = copy_json(template.get("metadata") or {})
    vm_meta = vm["metadata"]
    meta.pop("generateName", None)
    meta["name"] = vm_meta["name"]
    meta["namespace"] = vm_meta["namespace"]
    # Only the template's labels are the VMI's: the VM's own labels and annotations stay on the VM.
    meta["labels"] = copy_json((template.get("metadata") or {}).get("labels") or {}) or None
    if meta["labels"] is None:
        del meta["labels"]
    meta["ownerReferences"] = [controller_ref(vm)]
    annotations = meta.setdefault("annotations", {})
    annotations[c.VM_GENERATION_ANNOTATION] = str(vm_meta.get("generation", 1))
    if vm["spec"].get("runStrategy") == c.RUN_STRATEGY_WAIT_AS_RECEIVER:
        annotations[c.CREATE_MIGRATION_TARGET_ANNOTATION] = "true"
    meta["finalizers"] = [*meta.get("finalizers", []), c.VM_CONTROLLER_FINALIZER]
    spec = copy_json(template.get("spec") or {})
    if has_start_paused_request(vm):
        spec["startStrategy"] = START_STRATEGY_PAUSED
    firmware = spec.setdefault("domain", {}).setdefault("firmware", {})
    if not firmware.get("uuid"):
        firmware["uuid"] = legacy_firmware_uuid(meta["name"])
    if memory_dump.has_completed(vm):
        # A dump already taken is not taken again by the VM's next VMI.
        memory_dump.without_volume(spec, str((memory_dump.request_of(vm) or {}).get("claimName") or ""))
    set_default_volume_disks(spec)
    auto_attach_input_device(spec)
    set_default_network_interface(spec, config)
    return {"apiVersion": c.KUBEVIRT_API_VERSION, "kind": c.VMI_KIND, "metadata": meta, "spec": spec}
