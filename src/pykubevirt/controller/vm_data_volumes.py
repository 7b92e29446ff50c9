"""A VM's DataVolumes: created from its dataVolumeTemplates, awaited before its VMI starts, read for printableStatus.

KubeVirt's handleDataVolumes and GenerateDataVolumeFromTemplate (`pkg/virt-controller/watch/vm/vm.go`,
`pkg/storage/types/dv.go`), and the claims the VM's printable status looks at.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import DATA_VOLUMES
from pykubevirt.controller.data_volume_clone import (
    SOURCE_PVC_NOT_AVAILABLE,
    UNAUTHORIZED_DATA_VOLUME_CREATE,
    CloneAuthorization,
    CloneNotAllowed,
    resolve_clone_source,
)
from pykubevirt.controller.owned_objects import any_controller
from pykubevirt.controller.run_strategy import FAILED_CREATE
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vmi_from_vm import controller_ref

SUCCESSFUL_DATA_VOLUME_CREATE = "SuccessfulDataVolumeCreate"
ALLOW_CLAIM_ADOPTION = "cdi.kubevirt.io/allowClaimAdoption"
# A VMI may start once its DataVolumes are populated, or wait for it as their first consumer (KubeVirt's
# dataVolumeReady / IsSucceededOrPendingPopulation).
DATA_VOLUME_READY_PHASES = ("Succeeded", "WaitForFirstConsumer", "PendingPopulation")


def template_name(template: dict[str, Any]) -> str:
    return str((template.get("metadata") or {}).get("name"))


def data_volume_from_template(vm: Object, template: dict[str, Any]) -> Object:
    """GenerateDataVolumeFromTemplate: the DV may adopt a claim of its name; it records the VM that made it."""
    namespace = vm["metadata"]["namespace"]
    metadata = copy_json(template.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), ALLOW_CLAIM_ADOPTION: "true"}
    metadata["labels"] = {**(metadata.get("labels") or {}), c.CREATED_BY_LABEL: vm["metadata"]["uid"]}
    return {
        "apiVersion": c.CDI_API_VERSION,
        "kind": c.DATA_VOLUME_KIND,
        "metadata": {**metadata, "namespace": namespace, "ownerReferences": [controller_ref(vm)]},
        "spec": copy_json(template.get("spec") or {}),
    }


def data_volume_ready(dv: Object) -> bool:
    return (dv.get("status") or {}).get("phase") in DATA_VOLUME_READY_PHASES


class VMDataVolumes:
    """The DataVolumes of VMs' templates, through the API and the DataVolume (and claim) caches."""

    def __init__(
        self, client: KubeClient, data_volumes: Informer, pvcs: Informer | None, recorder: EventRecorder
    ) -> None:
        self.client = client
        self.data_volumes = data_volumes
        self.pvcs = pvcs
        self.recorder = recorder
        self.clones = CloneAuthorization(client, pvcs)

    def of(self, vm: Object) -> list[Object]:
        """The template DataVolumes that exist."""
        namespace = vm["metadata"]["namespace"]
        found = []
        for template in vm["spec"].get("dataVolumeTemplates") or []:
            dv = self.data_volumes.get_by_name(namespace, template_name(template))
            if dv is not None:
                found.append(dv)
        return found

    async def ensure(self, vm: Object) -> tuple[bool, SyncError | None]:
        """Create missing DataVolumes from the templates; ready when all are populated (or await their consumer)."""
        ready = True
        namespace = vm["metadata"]["namespace"]
        for template in vm["spec"].get("dataVolumeTemplates") or []:
            name = template_name(template)
            dv = self.data_volumes.get_by_name(namespace, name)
            if dv is None:
                new = data_volume_from_template(vm, template)
                try:
                    await resolve_clone_source(self.client, namespace, new["spec"])
                except NotFound as missing:
                    return False, _creating_error(f"unable to create DataVolume manifest: {missing.message}")
                refusal = await self._clone_refusal(vm, new)
                if refusal is not None:
                    return False, refusal
                try:
                    await self.client.create(DATA_VOLUMES, new, namespace)
                except AlreadyExists:
                    pass
                except ApiError as exc:
                    return False, _creating_error(exc.message)
                self.recorder.event(vm, NORMAL, SUCCESSFUL_DATA_VOLUME_CREATE, f"Created DataVolume {name}")
                ready = False
            else:
                if any_controller(dv) is None:
                    # ClaimMatchedDataVolumes: an orphan of a template's name is the VM's (a pool's VM made again
                    # after its predecessor let go of it under statePreservation, or a DV created beforehand).
                    dv = await self._adopt(vm, dv)
                    if dv is None:
                        return False, None
                if not data_volume_ready(dv):
                    ready = False
        return ready, None

    async def _adopt(self, vm: Object, dv: Object) -> Object | None:
        """Make the VM the DataVolume's controller; None when it changed meanwhile (the next sync looks again)."""
        meta = dv["metadata"]
        refs = [*(meta.get("ownerReferences") or []), controller_ref(vm)]
        patch = {"metadata": {"ownerReferences": refs, "resourceVersion": meta["resourceVersion"]}}
        try:
            adopted: Object = await self.client.patch(DATA_VOLUMES, meta["name"], patch, meta["namespace"])
        except (Conflict, NotFound):
            return None
        return adopted

    async def _clone_refusal(self, vm: Object, dv: Object) -> SyncError | None:
        """handleCloneDataVolume: an event while the source claim is missing; the VM's right to clone the source."""
        name = str(dv["metadata"].get("name"))
        source_claim = self.clones.source_claim_missing(dv)
        if source_claim is not None:
            message = (
                f"Source PVC {source_claim} not available: Target PVC {name} will remain unpopulated until source "
                "is created"
            )
            self.recorder.event(vm, WARNING, SOURCE_PVC_NOT_AVAILABLE, message)
        try:
            await self.clones.check(vm, dv)
        except CloneNotAllowed as refused:
            message = f"Not authorized to create DataVolume {name}: {refused}"
            self.recorder.event(vm, WARNING, UNAUTHORIZED_DATA_VOLUME_CREATE, message)
            return _creating_error(f"not authorized to create DataVolume: {refused}")
        return None

    def pvc_bound(self, namespace: str, claim: str) -> bool | None:
        """Whether a PersistentVolumeClaim is bound; None when it does not exist (or PVCs are not watched)."""
        if self.pvcs is None:
            return None
        pvc = self.pvcs.get_by_name(namespace, claim)
        if pvc is None:
            return None
        return (pvc.get("status") or {}).get("phase") == "Bound"


def _creating_error(reason: str) -> SyncError:
    return SyncError(f"Error encountered while creating DataVolumes: {reason}", FAILED_CREATE)
