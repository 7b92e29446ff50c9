"""The VM a snapshot is taken of: its state, its lock (`status.snapshotInProgress`, a finalizer), its claims, its spec.

After KubeVirt's `pkg/storage/snapshot/source.go`. Locking keeps the VM's volumes and run state still while the
content is made; the VM admitter refuses changes to them while `snapshotInProgress` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.finalizer_patch import finalizers_patch
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.objects import condition, condition_true, is_marked_for_deletion
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import VIRTUAL_MACHINES
from pykubevirt.controller.backend_storage import NoBackendClaim, vm_backend_volume
from pykubevirt.controller.vm_revisions import revision_data_spec
from pykubevirt.controller.vm_snapshot_status import LOCKED, NOT_LOCKED, SOURCE_FINALIZER
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.snapshot")


def volume_claims(vm: Mapping[str, Any]) -> dict[str, str]:
    """Volume name → claim name of the VM's snapshottable volumes (claims, DataVolumes, memory dumps)."""
    claims: dict[str, str] = {}
    for volume in ((vm.get("spec") or {}).get("template") or {}).get("spec", {}).get("volumes") or []:
        if (pvc := volume.get("persistentVolumeClaim")) and pvc.get("claimName"):
            claims[volume["name"]] = str(pvc["claimName"])
        elif (dv := volume.get("dataVolume")) and dv.get("name"):
            claims[volume["name"]] = str(dv["name"])
        elif (dump := volume.get("memoryDump")) and dump.get("claimName"):
            claims[volume["name"]] = str(dump["claimName"])
    return claims


def all_volume_claims(vm: Mapping[str, Any], claims: Informer) -> dict[str, str]:
    """The VM's snapshottable volumes and its backend-storage claim (GetVolumes WithAllVolumes): volume → claim.

    Raises NoBackendClaim while the VM needs a backend-storage claim it has not got.
    """
    found = volume_claims(vm)
    backend = vm_backend_volume(claims, dict(vm))
    if backend is not None:
        found[backend["name"]] = backend["persistentVolumeClaim"]["claimName"]
    return found


def simplified_metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: copy_json(v) for k, v in meta.items() if k != "managedFields"}


def claim_problem(pvc: Object | None, data_volume: Object | None, name: str) -> str:
    """Why a claim cannot be snapshotted now, in KubeVirt's words; "" when it can."""
    if pvc is None:
        return f"volume doesnt exist: {name}"
    if is_marked_for_deletion(pvc):
        return f"volume is being deleted: {name}"
    if (pvc.get("status") or {}).get("phase") != "Bound":
        return f"volume not bound: {name}"
    if data_volume is not None and (data_volume.get("status") or {}).get("phase") != "Succeeded":
        return f"volume not populated: {name}"
    return ""


@dataclass(slots=True)
class SnapshotSource:
    """One VM as one snapshot sees it (vmSnapshotSource)."""

    vm: Object
    snapshot_name: str
    vmi: Object | None
    locked: bool
    lock_message: str

    @property
    def online(self) -> bool:
        return self.vmi is not None

    @property
    def paused(self) -> bool:
        return self.vmi is not None and condition_true(self.vmi, "Paused")

    @property
    def guest_agent(self) -> bool:
        return self.vmi is not None and condition(self.vmi, "AgentConnected") is not None

    @property
    def frozen(self) -> bool:
        return self.vmi is not None and (self.vmi.get("status") or {}).get("fsFreezeStatus") == "frozen"

    @property
    def uid(self) -> str:
        return str(self.vm["metadata"].get("uid", ""))


def source_of(vm: Object, snapshot: Mapping[str, Any], vmis: Informer) -> SnapshotSource:
    name = str(snapshot["metadata"]["name"])
    meta = vm["metadata"]
    locked = (vm.get("status") or {}).get("snapshotInProgress") == name and SOURCE_FINALIZER in (
        meta.get("finalizers") or []
    )
    return SnapshotSource(
        vm=vm,
        snapshot_name=name,
        vmi=vmis.get(f"{meta.get('namespace')}/{meta.get('name')}"),
        locked=locked,
        lock_message=LOCKED if locked else NOT_LOCKED,
    )


class SourceLocks:
    """Locks and unlocks snapshot sources through the API."""

    def __init__(
        self,
        client: KubeClient,
        *,
        pvcs: Informer,
        data_volumes: Informer,
        pods: Informer,
        revisions: Informer,
    ) -> None:
        self.client = client
        self.pvcs = pvcs
        self.data_volumes = data_volumes
        self.pods = pods
        self.revisions = revisions

    async def lock(self, source: SnapshotSource) -> bool:
        """Take the lock if nothing stands in the way; otherwise say why in the source's lock message."""
        if source.locked:
            return True
        vm = source.vm
        namespace, vm_name = vm["metadata"].get("namespace", ""), vm["metadata"].get("name", "")
        try:
            claims = sorted(set(all_volume_claims(vm, self.pvcs).values()))
        except NoBackendClaim:
            return False  # its first start makes the claim; upstream waits for it with the message unchanged
        for claim in claims:
            key = f"{namespace}/{claim}"
            problem = claim_problem(self.pvcs.get(key), self.data_volumes.get(key), claim)
            if problem:
                source.lock_message += f" source {namespace}/{vm_name} {problem}"
                return False
        if not source.online:
            users = self._pods_using(namespace, set(claims))
            if users:
                # Go's %+v of the claim names.
                source.lock_message += f" source is offline but {users} pods using PVCs [{' '.join(claims)}]"
                return False
        current = (vm.get("status") or {}).get("snapshotInProgress")
        if current is not None and current != source.snapshot_name:
            source.lock_message += f' snapshot "{current}" in progress'
            return False
        if current is None:
            vm = copy_json(vm)
            vm.setdefault("status", {})["snapshotInProgress"] = source.snapshot_name
            vm = await self.client.update_status(VIRTUAL_MACHINES, vm)
        finalizers = list(vm["metadata"].get("finalizers") or [])
        if SOURCE_FINALIZER not in finalizers:
            log.info("adding the snapshot source finalizer", extra=object_fields(vm))
            vm = await self._replace_finalizers(vm, finalizers, [*finalizers, SOURCE_FINALIZER])
        source.vm = vm
        source.locked = True
        source.lock_message = LOCKED
        return True

    async def unlock(self, source: SnapshotSource) -> bool:
        vm = source.vm
        if (vm.get("status") or {}).get("snapshotInProgress") != source.snapshot_name:
            return False
        finalizers = list(vm["metadata"].get("finalizers") or [])
        if SOURCE_FINALIZER in finalizers:
            vm = await self._replace_finalizers(vm, finalizers, [f for f in finalizers if f != SOURCE_FINALIZER])
        vm = copy_json(vm)
        vm.setdefault("status", {}).pop("snapshotInProgress", None)
        source.vm = await self.client.update_status(VIRTUAL_MACHINES, vm)
        source.locked = False
        return True

    async def freeze(self, source: SnapshotSource, timeout_seconds: float) -> None:
        """Quiesce a running guest through its agent before its claims are snapshotted (a no-op without an agent)."""
        if not source.locked:
            raise RuntimeError("attempting to freeze unlocked VM")
        if source.frozen:
            return
        if source.paused:
            log.warning("the VM is paused: snapshot without a filesystem freeze", extra=object_fields(source.vm))
            return
        if not source.guest_agent:
            if source.online:
                log.warning("no guest agent: snapshot without a filesystem freeze", extra=object_fields(source.vm))
            return
        # A Go duration, as KubeVirt's client sends the snapshot's failure deadline.
        await self._vmi_subresource(source, "freeze", {"unfreezeTimeout": f"{int(timeout_seconds)}s"})
        log.info("guest filesystems frozen for the snapshot", extra=object_fields(source.vm))

    async def unfreeze(self, source: SnapshotSource) -> None:
        if not source.locked or not source.guest_agent or source.paused:
            return
        await self._vmi_subresource(source, "unfreeze", {})

    async def _vmi_subresource(self, source: SnapshotSource, action: str, body: dict[str, Any]) -> None:
        meta = source.vm["metadata"]
        path = f"/apis/{c.SUBRESOURCES_GROUP}/v1/namespaces/{meta['namespace']}/virtualmachineinstances/{meta['name']}"
        await self.client.request("PUT", f"{path}/{action}", body=body)

    async def _replace_finalizers(self, vm: Object, before: list[str], after: list[str]) -> Object:
        meta = vm["metadata"]
        return await self.client.patch(
            VIRTUAL_MACHINES,
            meta["name"],
            finalizers_patch(before, after),
            meta.get("namespace"),
            patch_type=JSON_PATCH,
        )

    def _pods_using(self, namespace: str, claims: set[str]) -> int:
        count = 0
        for pod in self.pods.items():
            if pod["metadata"].get("namespace") != namespace:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            volumes = (pod.get("spec") or {}).get("volumes") or []
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") in claims for v in volumes):
                count += 1
        return count

    def source_vm(self, source: SnapshotSource) -> dict[str, Any]:
        """The VM the content records: as it was started when running (its start revision), else as it is."""
        vm = source.vm
        spec = copy_json(vm.get("spec") or {})
        revision_name = ((source.vmi or {}).get("status") or {}).get("virtualMachineRevisionName")
        if source.online and revision_name:
            revision = self.revisions.get(f"{vm['metadata'].get('namespace')}/{revision_name}")
            if revision is not None:
                started = revision_data_spec(revision)
                template = started.setdefault("template", {}).setdefault("spec", {})
                current = (spec.get("template") or {}).get("spec") or {}
                template["volumes"] = copy_json(current.get("volumes") or [])
                devices = template.setdefault("domain", {}).setdefault("devices", {})
                devices["disks"] = copy_json(((current.get("domain") or {}).get("devices") or {}).get("disks") or [])
                if spec.get("dataVolumeTemplates") is not None:
                    started["dataVolumeTemplates"] = copy_json(spec["dataVolumeTemplates"])
                else:
                    started.pop("dataVolumeTemplates", None)
                spec = started
        return {
            "apiVersion": c.KUBEVIRT_API_VERSION,
            "kind": c.VM_KIND,
            "metadata": simplified_metadata(vm["metadata"]),
            "spec": spec,
            "status": {},
        }
