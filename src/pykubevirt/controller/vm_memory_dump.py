"""A VM's memory dump request (`status.memoryDumpRequest`), moved along as KubeVirt's pkg/storage/memorydump does.

virt-api's memorydump subresource makes the request `Associating`; the controller adds the claim as a hotpluggable
`memoryDump` volume to the VM's template and to its VMI (`InProgress`); virt-handler mounts it into the launcher,
which dumps the guest's memory into it. Once the VMI's volume status says the dump completed (or failed), the volume
leaves the VMI (`Unmounting`) and the request is `Completed` with the file's name, which the claim also gets in its
`kubevirt.io/memory-dump` annotation. removememorydump (`Dissociating`) takes the volume off the template as well,
and then the request goes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import ApiError, Conflict
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.controller.sync_error import SyncError

log = logging.getLogger("pykubevirt.controller.memory_dump")

ASSOCIATING = "Associating"
IN_PROGRESS = "InProgress"
UNMOUNTING = "Unmounting"
COMPLETED = "Completed"
DISSOCIATING = "Dissociating"
FAILED = "Failed"
# The VMI volume phases virt-handler reports for the dump.
VOLUME_COMPLETED = "MemoryDumpCompleted"
VOLUME_FAILED = "MemoryDumpFailed"
MEMORY_DUMP_ANNOTATION = "kubevirt.io/memory-dump"
ERROR_REASON = "MemoryDumpError"
FAILED_ANNOTATION = "Memory dump failed"


def request_of(vm: Mapping[str, Any]) -> dict[str, Any] | None:
    request = (vm.get("status") or {}).get("memoryDumpRequest")
    return dict(request) if isinstance(request, Mapping) else None


def has_completed(vm: Mapping[str, Any]) -> bool:
    """A request past its dump (a new VMI of the VM then starts without the volume)."""
    request = request_of(vm)
    return request is not None and request.get("phase") not in (ASSOCIATING, IN_PROGRESS)


def without_volume(spec: dict[str, Any], claim: str) -> None:
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") != claim]


def with_volume(spec: dict[str, Any], claim: str) -> None:
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == claim for v in volumes):
        volumes.append({"name": claim, "memoryDump": {"claimName": claim, "hotpluggable": True}})


def _names(volumes: Any) -> set[str]:
    return {str(v.get("name")) for v in volumes or []}


def updated_request(vm: Mapping[str, Any], vmi: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The request as the VM's status should show it now (UpdateRequest); None once a removal is done."""
    request = request_of(vm)
    if request is None:
        return None
    claim = request.get("claimName")
    updated = copy_json(request)
    if request.get("remove"):
        updated["phase"] = DISSOCIATING
    phase = request.get("phase")
    template_volumes = _names((((vm.get("spec") or {}).get("template") or {}).get("spec") or {}).get("volumes"))
    statuses = [s for s in ((vmi or {}).get("status") or {}).get("volumeStatus") or [] if s.get("name") == claim]
    if phase == COMPLETED:
        return request
    if phase == ASSOCIATING and claim in template_volumes:
        updated["phase"] = IN_PROGRESS
    elif phase == IN_PROGRESS:
        for status in statuses:
            dump = status.get("memoryDumpVolume")
            if not isinstance(dump, Mapping):
                continue
            if dump.get("startTimestamp"):
                updated["startTimestamp"] = dump["startTimestamp"]
            if status.get("phase") == VOLUME_COMPLETED:
                updated.update(phase=UNMOUNTING, fileName=dump.get("targetFileName"))
                _set_end(updated, dump)
            elif status.get("phase") == VOLUME_FAILED:
                updated.update(phase=FAILED, message=status.get("message", ""))
                _set_end(updated, dump)
    elif phase == UNMOUNTING:
        if statuses:
            return request
        updated["phase"] = COMPLETED
    elif phase == DISSOCIATING:
        if statuses or claim in template_volumes:
            return request
        return None
    return updated


def _set_end(request: dict[str, Any], dump: Mapping[str, Any]) -> None:
    if dump.get("endTimestamp"):
        request["endTimestamp"] = dump["endTimestamp"]


class MemoryDumps:
    """HandleRequest: the volume into or out of the VM's template and its VMI, and the claim's annotation."""

    def __init__(self, client: KubeClient, pvcs: Informer | None) -> None:
        self.client = client
        self.pvcs = pvcs

    async def handle(self, vm: Object, vmi: Object | None) -> SyncError | None:
        """One step of the request; the VM's spec and resourceVersion follow a template change."""
        request = request_of(vm)
        if request is None:
            return None
        try:
            await self._handle(vm, vmi, request)
        except (ApiError, LookupError, OSError) as exc:
            why = exc.message if isinstance(exc, ApiError) else str(exc)
            return SyncError(f"Error encountered while handling memory dump request: {why}", ERROR_REASON)
        return None

    async def _handle(self, vm: Object, vmi: Object | None, request: dict[str, Any]) -> None:
        claim = str(request.get("claimName") or "")
        phase = request.get("phase")
        in_vmi = vmi is not None and claim in _names((vmi.get("spec") or {}).get("volumes"))
        template = copy_json(((vm.get("spec") or {}).get("template") or {}).get("spec") or {})
        if phase == ASSOCIATING:
            if vmi is None or vmi["metadata"].get("deletionTimestamp") or not _running(vmi):
                return
            with_volume(template, claim)
            await self._save_template(vm, template)
            if not in_vmi:
                await self._patch_vmi(vmi, claim, add=True)
        elif phase in (UNMOUNTING, FAILED):
            await self._annotate_claim(vm, request)
            if in_vmi and vmi is not None:
                await self._patch_vmi(vmi, claim, add=False)
        elif phase == DISSOCIATING:
            if in_vmi and vmi is not None:
                await self._patch_vmi(vmi, claim, add=False)
            without_volume(template, claim)
            await self._save_template(vm, template)

    async def _save_template(self, vm: Object, template: dict[str, Any]) -> None:
        current = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        if (template.get("volumes") or []) == (current.get("volumes") or []):
            return
        meta = vm["metadata"]
        patch = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "spec": {"template": {"spec": {"volumes": template.get("volumes") or []}}},
        }
        try:
            updated = await self.client.patch(VIRTUAL_MACHINES, meta["name"], patch, meta["namespace"])
        except Conflict:
            return  # the newer VM comes back as an event
        vm["spec"] = updated["spec"]
        meta["resourceVersion"] = updated["metadata"]["resourceVersion"]

    async def _patch_vmi(self, vmi: Object, claim: str, *, add: bool) -> None:
        volumes = (vmi.get("spec") or {}).get("volumes") or []
        spec = copy_json(vmi.get("spec") or {})
        if add:
            with_volume(spec, claim)
        else:
            without_volume(spec, claim)
        operations = [
            {"op": "test", "path": "/spec/volumes", "value": volumes or None},
            {"op": "replace" if volumes else "add", "path": "/spec/volumes", "value": spec["volumes"]},
        ]
        meta = vmi["metadata"]
        await self.client.patch(
            VIRTUAL_MACHINE_INSTANCES, meta["name"], operations, meta["namespace"], patch_type=JSON_PATCH
        )

    async def _annotate_claim(self, vm: Object, request: dict[str, Any]) -> None:
        namespace, claim = vm["metadata"]["namespace"], str(request.get("claimName") or "")
        pvc = self.pvcs.get(f"{namespace}/{claim}") if self.pvcs is not None else None
        if pvc is None:
            raise LookupError(f"Error when trying to update memory dump annotation, pvc {claim} not found")
        if request.get("phase") == UNMOUNTING:
            if not request.get("fileName"):
                return
            value = str(request["fileName"])
        else:
            value = FAILED_ANNOTATION
        annotations = pvc["metadata"].get("annotations") or {}
        if annotations.get(MEMORY_DUMP_ANNOTATION) == value:
            return
        patch = {"metadata": {"annotations": {MEMORY_DUMP_ANNOTATION: value}}}
        try:
            await self.client.patch(PERSISTENT_VOLUME_CLAIMS, claim, patch, namespace)
        except ApiError as exc:
            # KubeVirt logs this and goes on: the annotation only repeats what the VM's status says.
            log.error("failed to annotate memory dump PVC %s/%s: %s", namespace, claim, exc.message)


def _running(vmi: Mapping[str, Any]) -> bool:
    return (vmi.get("status") or {}).get("phase") == c.PHASE_RUNNING
