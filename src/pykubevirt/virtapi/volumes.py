"""addvolume/removevolume as KubeVirt's virt-api decides them (pkg/virt-api/rest/volumes.go). Pure.

The options are checked and the request is verified against the volumes it changes; the answer is a JSON patch of
the spec's volumes and disks, guarded by `test` operations on both lists so that two concurrent requests cannot
both win (the loser gets a conflict and virtctl retries).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pykubevirt.admission.validation.volume_requests import apply_volume_request
from pykubevirt.api import errors
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi.options import decode_body, dry_run_values, unmarshal_error

Patch = list[dict[str, Any]]
NO_BODY = "Request with no body, a new name is expected as the request body"
VMI_NOT_RUNNING = "VMI is not running"
HOTPLUG_NOT_ENABLED = "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API."


@dataclass(frozen=True, slots=True)
class VolumeRequest:
    """A VirtualMachineVolumeRequest: exactly one of `add` (AddVolumeOptions) and `remove` (RemoveVolumeOptions)."""

    add: dict[str, Any] | None = None
    remove: dict[str, Any] | None = None
    dry_run: bool = False

    @property
    def name(self) -> str:
        return str((self.add or self.remove or {}).get("name") or "")

    def as_request(self) -> dict[str, Any]:
        return {"addVolumeOptions": self.add} if self.add is not None else {"removeVolumeOptions": self.remove}


def hotplug_enabled(config: ClusterConfig) -> bool:
    """The API is served while either gate is on (DeclarativeHotplugVolumes is Beta, so on unless disabled)."""
    return config.gate_enabled("DeclarativeHotplugVolumes") or config.gate_enabled("HotplugVolumes")


def _options(body: bytes, type_name: str) -> dict[str, Any]:
    if not body.strip():
        raise errors.bad_request(NO_BODY)
    data = decode_body(body, type_name)
    if data.get("name") is not None and not isinstance(data["name"], str):
        raise unmarshal_error(f"json: cannot unmarshal number into Go struct field {type_name}.name of type string")
    return data


def parse_add(body: bytes) -> VolumeRequest:
    """AddVolumeOptions: name, disk and volumeSource required; the disk takes the name, the source is hotpluggable."""
    opts = _options(body, "AddVolumeOptions")
    dry_run = bool(dry_run_values(opts, "AddVolumeOptions"))
    if not opts.get("name"):
        raise errors.bad_request("AddVolumeOptions requires name to be set")
    if not isinstance(opts.get("disk"), dict):
        raise errors.bad_request("AddVolumeOptions requires disk to not be nil")
    if not isinstance(opts.get("volumeSource"), dict):
        raise errors.bad_request("AddVolumeOptions requires VolumeSource to not be nil")
    opts = copy.deepcopy(opts)
    opts["disk"]["name"] = opts["name"]
    source = opts["volumeSource"]
    for key in ("dataVolume", "persistentVolumeClaim"):
        if isinstance(source.get(key), dict):
            source[key]["hotpluggable"] = True
            break
    opts.pop("dryRun", None)
    return VolumeRequest(add=opts, dry_run=dry_run)


def parse_remove(body: bytes) -> VolumeRequest:
    opts = _options(body, "RemoveVolumeOptions")
    dry_run = bool(dry_run_values(opts, "RemoveVolumeOptions"))
    if not opts.get("name"):
        raise errors.bad_request("RemoveVolumeOptions requires name to be set")
    opts = copy.deepcopy(opts)
    opts.pop("dryRun", None)
    return VolumeRequest(remove=opts, dry_run=dry_run)


def _source_name(volume: dict[str, Any]) -> str:
    if isinstance(volume.get("dataVolume"), dict):
        return str(volume["dataVolume"].get("name") or "")
    if isinstance(volume.get("persistentVolumeClaim"), dict):
        return str(volume["persistentVolumeClaim"].get("claimName") or "")
    return ""


def _hotpluggable(volume: dict[str, Any]) -> bool:
    return any(bool((volume.get(key) or {}).get("hotpluggable")) for key in ("dataVolume", "persistentVolumeClaim"))


def verify(volumes: list[dict[str, Any]], request: VolumeRequest) -> str | None:
    """verifyVolumeOption: why the request cannot apply to `volumes`, or None."""
    if request.add is not None:
        wanted = _source_name(request.add.get("volumeSource") or {})
        for volume in volumes:
            if volume.get("name") == request.name:
                return f"Unable to add volume [{request.name}] because volume with that name already exists"
            if wanted and _source_name(volume) == wanted:
                return f"Unable to add volume source [{wanted}] because it already exists"
        return None
    for volume in volumes:
        if volume.get("name") == request.name or (_source_name(volume) and _source_name(volume) == request.name):
            if not _hotpluggable(volume):
                return f"Unable to remove volume [{volume.get('name')}] because it is not hotpluggable"
            return None
    return f"Unable to remove volume [{request.name}] because it does not exist"


def spec_patch(prefix: str, spec: dict[str, Any], request: VolumeRequest) -> Patch:
    """generateVolumeRequestPatch: test the volumes and disks as read, then replace (or add) both lists."""
    volumes_path, disks_path = f"{prefix}/spec/volumes", f"{prefix}/spec/domain/devices/disks"
    volumes = spec.get("volumes") or []
    disks = ((spec.get("domain") or {}).get("devices") or {}).get("disks") or []
    changed = copy.deepcopy(spec)
    apply_volume_request(changed, request.as_request())
    new_volumes = changed.get("volumes") or []
    new_disks = changed["domain"]["devices"].get("disks") or []
    return [
        {"op": "test", "path": volumes_path, "value": volumes or None},
        {"op": "test", "path": disks_path, "value": disks or None},
        {"op": "replace" if volumes else "add", "path": volumes_path, "value": new_volumes},
        {"op": "replace" if disks else "add", "path": disks_path, "value": new_disks},
    ]


def request_present(spec: dict[str, Any], request: VolumeRequest) -> bool:
    """Whether `spec` already shows the request's effect (the volume there for an add, gone for a remove)."""
    names = {v.get("name") for v in spec.get("volumes") or []}
    return (request.name in names) == (request.add is not None)


def ephemeral_hotplug_supported(config: ClusterConfig) -> bool:
    """With the HotplugVolumes gate, a VM's addvolume becomes a status.volumeRequests entry (KubeVirt's legacy path);
    without it the VM's template is patched at once (DeclarativeHotplugVolumes)."""
    return config.gate_enabled("HotplugVolumes")


def _names(request: dict[str, Any]) -> tuple[str | None, str | None]:
    add, remove = request.get("addVolumeOptions"), request.get("removeVolumeOptions")
    return (add or {}).get("name") if isinstance(add, dict) else None, (
        (remove or {}).get("name") if isinstance(remove, dict) else None
    )


def queued_requests(requests: list[dict[str, Any]], request: VolumeRequest) -> list[dict[str, Any]]:
    """addAddVolumeRequests/addRemoveVolumeRequests: the VM's volumeRequests with this one appended (a removal drops
    the pending add of its volume); a ValueError says why it cannot be queued."""
    name = request.name
    if request.add is not None:
        for queued in requests:
            added, removed = _names(queued)
            if added == name:
                raise ValueError(f"add volume request for volume [{name}] already exists")
            if removed == name:
                raise ValueError(
                    f"unable to add volume since a remove volume request for volume [{name}] already exists and is "
                    "still being processed"
                )
        return [*requests, request.as_request()]
    kept = []
    for queued in requests:
        added, removed = _names(queued)
        if added == name:
            continue
        if removed == name:
            raise ValueError(f"a remove volume request for volume [{name}] already exists and is still being processed")
        kept.append(queued)
    return [*kept, request.as_request()]


def status_patch(requests: list[dict[str, Any]], queued: list[dict[str, Any]]) -> Patch:
    """generateVMVolumeRequestPatch: test the requests as read, then add or replace them."""
    return [
        {"op": "test", "path": "/status/volumeRequests", "value": requests or None},
        {"op": "replace" if requests else "add", "path": "/status/volumeRequests", "value": queued},
    ]
