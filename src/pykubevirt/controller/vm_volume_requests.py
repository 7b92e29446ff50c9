"""A VM's `status.volumeRequests`: what `virtctl addvolume/removevolume --persist` queues with the HotplugVolumes gate.

KubeVirt's VM controller (`pkg/virt-controller/watch/vm.go` handleVolumeRequests and the trim in updateStatus): each
request is applied to the VM's template, and to its VMI unless that is gone or going (an add the VMI already has,
or a remove it no longer has, is skipped); a request leaves the list once the template shows it (for an add both
the volume and its disk are there, for a remove neither is). Pure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pykubevirt.admission.validation.volume_requests import apply_volume_request
from pykubevirt.controller.sync_error import SyncError

HOTPLUG_VOLUME_ERROR = "HotPlugVolumeError"


def request_error(why: str) -> SyncError:
    return SyncError(f"Error encountered while handling volume hotplug requests: {why}", HOTPLUG_VOLUME_ERROR)


def volume_requests(vm: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(r) for r in (vm.get("status") or {}).get("volumeRequests") or [] if isinstance(r, Mapping)]


def _name(request: Mapping[str, Any]) -> tuple[str, bool]:
    """The request's volume and whether it adds it."""
    add = request.get("addVolumeOptions")
    if isinstance(add, Mapping):
        return str(add.get("name") or ""), True
    return str((request.get("removeVolumeOptions") or {}).get("name") or ""), False


def template_with_requests(vm: Mapping[str, Any]) -> dict[str, Any]:
    """The VM's template spec with every queued request applied (ApplyVolumeRequestOnVMISpec, in order)."""
    spec = copy.deepcopy(dict(((vm.get("spec") or {}).get("template") or {}).get("spec") or {}))
    for request in volume_requests(vm):
        apply_volume_request(spec, request)
    return spec


def vmi_requests(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The requests the VMI still needs: adds of volumes it lacks, removes of volumes it has."""
    if vmi is None or (vmi.get("metadata") or {}).get("deletionTimestamp"):
        return []
    present = {v.get("name") for v in (vmi.get("spec") or {}).get("volumes") or []}
    wanted = []
    for request in volume_requests(vm):
        name, adding = _name(request)
        if (name in present) != adding:
            wanted.append(request)
    return wanted


def remaining_requests(vm: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The requests the VM's template does not show yet."""
    spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    disks = {d.get("name") for d in ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []}
    left = []
    for request in volume_requests(vm):
        name, adding = _name(request)
        done = (name in volumes and name in disks) if adding else (name not in volumes and name not in disks)
        if not done:
            left.append(request)
    return left


def vmi_patch(vmi: Mapping[str, Any], request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VMI addvolume/removevolume patch: test the volumes and disks as read, then set both."""
    spec = vmi.get("spec") or {}
    volumes = spec.get("volumes") or []
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    changed = copy.deepcopy(dict(spec))
    apply_volume_request(changed, request)
    return [
        {"op": "test", "path": "/spec/volumes", "value": volumes or None},
        {"op": "test", "path": "/spec/domain/devices/disks", "value": disks or None},
        {"op": "replace" if volumes else "add", "path": "/spec/volumes", "value": changed.get("volumes") or []},
        {
            "op": "replace" if disks else "add",
            "path": "/spec/domain/devices/disks",
            "value": changed["domain"]["devices"].get("disks") or [],
        },
    ]
