"""virt-controller's VirtualMachineInstanceReplicaSet controller: keeps `spec.replicas` VMIs of a template running.

It adopts orphan VMIs its selector matches, releases its own that stop matching, replaces final ones, and writes
`status.replicas`, `readyReplicas` and `labelSelector` (what `kubectl scale` and `kubectl get vmirs` show), with
KubeVirt's events and its ReplicaFailure and ReplicaPaused conditions.
"""

from __future__ import annotations

import asyncio
import logging

from pykubevirt.api import constants as c
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.kubevirt.replica_set import REPLICA_PAUSED
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.api.objects import labels_of
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller import replica_set_plan as plan
from pykubevirt.controller.owned_objects import NAMESPACE_INDEX, OwnedExpectations, any_controller, owner_selector
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vmi_from_vm import controller_ref
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.replicaset")


class ReplicaSetController:
    """Reconciles one VirtualMachineInstanceReplicaSet key at a time."""

    def __init__(self, client: KubeClient, *, replica_sets: Informer, vmis: Informer, recorder: EventRecorder) -> None:
        self.client = client
        self.replica_sets = replica_sets
        self.vmis = vmis
        self.recorder = recorder
        # Expectations see VMI events before the set's key is reconciled (virt-controller registers them first).
        self.owned = OwnedExpectations(replica_sets, c.VMIRS_KIND)
        self.expectations = self.owned.expectations

    def keys_for_vmi(self, vmi: Object) -> list[str]:
        """Its controller if a replica set controls it; an orphan wakes every set whose selector it matches."""
        if any_controller(vmi) is not None:
            key = self.owned.owner_key(vmi)
            return [key] if key else []
        namespace = vmi["metadata"].get("namespace", "")
        keys = []
        for rs in self.replica_sets.by_index(NAMESPACE_INDEX, namespace):
            selector = owner_selector(rs)
            if selector is not None and selector.matches(labels_of(vmi)):
                keys.append(object_key(rs))
        return keys

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        rs = self.replica_sets.get(key)
        if rs is None:
            self.expectations.delete(key)
            return None
        selector = owner_selector(rs)
        if selector is None or not plan.matches_template(selector, rs):
            # Admission refuses both; one stored before cannot be acted on, and a retry changes nothing.
            log.error("the replica set's selector is invalid or does not match its template", extra=object_fields(rs))
            return None
        needs_sync = self.expectations.satisfied(key)
        namespace = rs["metadata"]["namespace"]
        vmis = await self._claim(rs, selector, self.vmis.by_index(NAMESPACE_INDEX, namespace))
        counted = plan.active(vmis)
        scale_error: str | None = None
        if needs_sync and not (rs.get("spec") or {}).get("paused") and not rs["metadata"].get("deletionTimestamp"):
            scale_error = await self._scale(rs, counted)
            done = plan.finished(vmis)
            if done and scale_error is None:
                scale_error = await self._clean_finished(rs, done)
        await self._update_status(rs, counted, str(selector), scale_error)
        if scale_error is not None:
            raise SyncError(scale_error, "FailedCreate")
        return None

    async def _claim(self, rs: Object, selector: LabelSelector, vmis: list[Object]) -> list[Object]:
        """The VMIs the set controls after adopting matching orphans and releasing its own that stopped matching."""
        uid = rs["metadata"]["uid"]
        being_deleted = bool(rs["metadata"].get("deletionTimestamp"))
        claimed = []
        for vmi in vmis:
            owner = any_controller(vmi)
            matching = selector.matches(labels_of(vmi))
            if owner is not None:
                if owner.get("uid") != uid:
                    continue  # another controller's
                if matching:
                    claimed.append(vmi)
                elif not being_deleted:
                    await self._release(rs, vmi)
                continue
            if being_deleted or not matching or vmi["metadata"].get("deletionTimestamp"):
                continue
            adopted = await self._adopt(rs, vmi)
            if adopted is not None:
                claimed.append(adopted)
        return claimed

    async def _adopt(self, rs: Object, vmi: Object) -> Object | None:
        meta = vmi["metadata"]
        # An uncached read first, as kube's RecheckDeletionTimestamp does: a set deleted meanwhile adopts nothing.
        fresh = await self.client.get_or_none(
            VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, rs["metadata"]["name"], meta["namespace"]
        )
        if (
            fresh is None
            or fresh["metadata"].get("uid") != rs["metadata"]["uid"]
            or fresh["metadata"].get("deletionTimestamp")
        ):
            return None
        patch = {"metadata": {"ownerReferences": [controller_ref(rs)], "uid": meta["uid"]}}
        try:
            adopted: Object = await self.client.patch(VIRTUAL_MACHINE_INSTANCES, meta["name"], patch, meta["namespace"])
        except NotFound:
            return None
        log.info("adopted VMI %s", meta["name"], extra=object_fields(rs))
        return adopted

    async def _release(self, rs: Object, vmi: Object) -> None:
        meta = vmi["metadata"]
        refs = meta.get("ownerReferences") or []
        kept = [ref for ref in refs if ref.get("uid") != rs["metadata"]["uid"]]
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": kept},
        ]
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES, meta["name"], patch, meta["namespace"], patch_type=JSON_PATCH
            )
        except NotFound:
            return
        log.info("released VMI %s, whose labels no longer match", meta["name"], extra=object_fields(rs))

    async def _scale(self, rs: Object, counted: list[Object]) -> str | None:
        """Create or delete VMIs toward `spec.replicas`, at most BURST_REPLICAS at once; the first error, if any."""
        diff = len(counted) - plan.wanted_replicas(rs)
        if diff == 0:
            return None
        batch = min(abs(diff), plan.BURST_REPLICAS)
        if diff < 0:
            return _first_error(await asyncio.gather(*(self._create(rs) for _ in range(batch))))
        doomed = plan.deletion_order(counted)[:batch]
        return _first_error(await asyncio.gather(*(self._delete(rs, vmi, finished=False) for vmi in doomed)))

    async def _create(self, rs: Object) -> str | None:
        key = object_key(rs)
        try:
            with self.expectations.creating(key):
                vmi = await self.client.create(
                    VIRTUAL_MACHINE_INSTANCES, plan.new_vmi(rs, controller_ref(rs)), rs["metadata"]["namespace"]
                )
        except ApiError as exc:
            self.recorder.event(rs, WARNING, "FailedCreate", f"Error creating virtual machine instance: {exc.message}")
            return exc.message
        name = vmi["metadata"]["name"]
        self.recorder.event(
            rs,
            NORMAL,
            "SuccessfulCreate",
            f"Started the virtual machine by creating the new virtual machine instance {name}",
        )
        return None

    async def _delete(self, rs: Object, vmi: Object, *, finished: bool) -> str | None:
        meta = vmi["metadata"]
        try:
            with self.expectations.deleting(object_key(rs), object_key(vmi)):
                await self.client.delete(VIRTUAL_MACHINE_INSTANCES, meta["name"], meta["namespace"])
        except NotFound:
            return None
        except ApiError as exc:
            what = "finished virtual machine" if finished else "virtual machine instance"
            self.recorder.event(rs, WARNING, "FailedDelete", f"Error deleting {what} {meta['name']}: {exc.message}")
            return exc.message
        message = (
            f"Deleted finished virtual machine: {meta['uid']}"
            if finished
            else f"Stopped the virtual machine by deleting the virtual machine instance {meta['uid']}"
        )
        self.recorder.event(rs, NORMAL, "SuccessfulDelete", message)
        return None

    async def _clean_finished(self, rs: Object, done: list[Object]) -> str | None:
        batch = done[: plan.BURST_REPLICAS]
        return _first_error(await asyncio.gather(*(self._delete(rs, vmi, finished=True) for vmi in batch)))

    async def _update_status(self, rs: Object, counted: list[Object], selector_text: str, error: str | None) -> None:
        status = plan.status_of(rs, counted, selector_text, error, now_rfc3339())
        if status is None:
            return
        body = copy_json(rs)
        body["status"] = status
        was_paused = any(
            cond.get("type") == REPLICA_PAUSED for cond in (rs.get("status") or {}).get("conditions") or []
        )
        try:
            written = await self.client.update_status(VIRTUAL_MACHINE_INSTANCE_REPLICA_SETS, body)
        except (Conflict, NotFound):
            return  # a newer version is on its way and wakes the key again
        self.replica_sets.wrote(written, rs["metadata"]["resourceVersion"])
        paused = bool((rs.get("spec") or {}).get("paused"))
        if paused != was_paused:
            if paused:
                self.recorder.event(rs, NORMAL, "SuccessfulPaused", "Paused")
            else:
                self.recorder.event(rs, NORMAL, "SuccessfulResumed", "Resumed")


def _first_error(results: list[str | None]) -> str | None:
    return next((r for r in results if r is not None), None)
