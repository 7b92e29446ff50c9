"""virt-controller's VirtualMachinePool controller: `spec.replicas` numbered VMs of a template, kept up to date.

As KubeVirt's (pkg/virt-controller/watch/pool): it scales out with the lowest free indexes and in by the scale-in
policy, updates VMs whose template changed and restarts their VMIs within `maxUnavailable`, lets a VM deleted by
hand go (its finalizer) so it is made again, and on the pool's deletion releases every VM to the garbage collector.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from pykubevirt.api import constants as c
from pykubevirt.api.finalizer_patch import finalizers_patch
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.api.objects import condition_true, labels_of
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, Invalid, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import (
    CONTROLLER_REVISIONS,
    DATA_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINE_POOLS,
    VIRTUAL_MACHINES,
    ResourceRef,
)
from pykubevirt.controller import vm_pool_plan as plan
from pykubevirt.controller.owned_objects import NAMESPACE_INDEX, OwnedExpectations, any_controller, owner_selector
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vm_revisions import OWNER_INDEX
from pykubevirt.controller.vmi_from_vm import controller_ref
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.pool")

BURST_REPLICAS = 250
# KubeVirt's defaultRetryDelay: a proactive update held back by maxUnavailable looks again after this.
RETRY_DELAY_SECONDS = 3.0


class VMPoolController:
    """Reconciles one VirtualMachinePool key at a time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        pools: Informer,
        vms: Informer,
        vmis: Informer,
        revisions: Informer,
        recorder: EventRecorder,
    ) -> None:
        self.client = client
        self.pools = pools
        self.vms = vms
        self.vmis = vmis
        self.revisions = revisions
        self.recorder = recorder
        self.owned = OwnedExpectations(pools, c.VM_POOL_KIND)
        self.expectations = self.owned.expectations

    # ------------------------------------------------------------------------------------------------ events

    def keys_for_vm(self, vm: Object) -> list[str]:
        key = self.owned.owner_key(vm)
        return [key] if key else []

    def keys_for_vmi(self, vmi: Object) -> list[str]:
        """A pool VM's VMI wakes its pool when it runs another revision than its VM (an update to roll out)."""
        vm = self.vms.get(object_key(vmi))
        if vm is None or vmi["metadata"].get("deletionTimestamp"):
            return []
        wanted = ((vm["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        if wanted.get(c.VM_POOL_REVISION_LABEL) == labels_of(vmi).get(c.VM_POOL_REVISION_LABEL):
            return []
        return self.keys_for_vm(vm)

    def on_revision_add(self, revision: Object) -> None:
        if key := self.owned.owner_key(revision):
            self.expectations.creation_observed(key)

    def keys_for_revision(self, revision: Object) -> list[str]:
        key = self.owned.owner_key(revision)
        return [key] if key else []

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        pool = self.pools.get(key)
        if pool is None:
            self.expectations.delete(key)
            return None
        selector = owner_selector(pool)
        template_labels = ((pool["spec"].get("virtualMachineTemplate") or {}).get("metadata") or {}).get("labels")
        if selector is None or not selector.matches(template_labels or {}):
            log.error("the pool's selector is invalid or does not match its template", extra=object_fields(pool))
            return None
        vms = await self._owned(pool, selector)
        if not pool["metadata"].get("deletionTimestamp"):
            pool = await self._add_finalizer(pool)
        # A step that fails is reported on the pool (ReplicaFailure, an event) and retried with backoff.
        failure: SyncError | None = None
        requeue: float | None = None
        try:
            if isinstance(autohealing := pool["spec"].get("autohealing"), dict):
                # Replaced by deleting: the scale-out makes the VM again, afresh, under its name.
                now = datetime.now(UTC)
                failing = plan.failing_vms(vms, autohealing, now)
                await self._scale_in(pool, failing, len(failing))
                requeue = plan.autohealing_recheck(vms, autohealing, now)
            if self._synced(key) and not pool["spec"].get("paused") and not pool["metadata"].get("deletionTimestamp"):
                stable = await self._scale(pool, vms)
                if stable and self._synced(key):
                    stable, held = await self._update(pool, vms)
                    requeue = _sooner(requeue, held)
                    if stable and self._synced(key):
                        await self._prune_revisions(pool, vms)
            elif pool["metadata"].get("deletionTimestamp"):
                await self._release_all(pool, selector)
        except SyncError as exc:
            failure = exc
        await self._update_status(pool, vms, str(selector), failure)
        if failure is not None:
            raise failure
        return Result(requeue) if requeue is not None else None

    def _synced(self, key: str) -> bool:
        return self.expectations.satisfied(key)

    async def _owned(self, pool: Object, selector: LabelSelector) -> list[Object]:
        """The pool's VMs; one whose labels stopped matching is released (the pool adopts none)."""
        uid = pool["metadata"]["uid"]
        owned = []
        for vm in self.vms.by_index(NAMESPACE_INDEX, pool["metadata"]["namespace"]):
            owner = any_controller(vm)
            if owner is None or owner.get("uid") != uid:
                continue
            if selector.matches(labels_of(vm)):
                owned.append(vm)
            elif not pool["metadata"].get("deletionTimestamp"):
                await self._release(vm, uid)
        return owned

    async def _release(self, vm: Object, uid: str) -> None:
        meta = vm["metadata"]
        kept = [ref for ref in meta.get("ownerReferences") or [] if ref.get("uid") != uid]
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": kept},
        ]
        try:
            await self.client.patch(VIRTUAL_MACHINES, meta["name"], patch, meta["namespace"], patch_type=JSON_PATCH)
        except NotFound:
            return
        await self._remove_vm_finalizer(vm)

    async def _keep_disks(self, vm: Object) -> None:
        """statePreservation: the VM stops owning its DataVolumes and claims, so they outlive it for its successor
        of the same name (whose DataVolume templates name them again, and which adopts them)."""
        data_volumes, claims = plan.preserved_disks(vm)
        for resource, names, what in (
            (DATA_VOLUMES, data_volumes, "DataVolume"),
            (PERSISTENT_VOLUME_CLAIMS, claims, "PVC"),
        ):
            for name in names:
                try:
                    await self._disown(resource, name, vm)
                except ApiError as exc:
                    meta = vm["metadata"]
                    message = f"Error removing {what} owner references for VM {meta['namespace']}/{meta['name']}"
                    self.recorder.event(vm, WARNING, "FailedUpdate", f"{message}: {exc.message}")
                    raise SyncError(f"{message}: {exc.message}", "FailedScaleIn") from exc

    async def _disown(self, resource: ResourceRef, name: str, vm: Object) -> None:
        namespace, uid = vm["metadata"]["namespace"], vm["metadata"]["uid"]
        try:
            obj = await self.client.get(resource, name, namespace)
        except NotFound:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        controller = any_controller(obj)
        if controller is None or controller.get("uid") != uid:
            return
        patch = [
            {"op": "test", "path": "/metadata/ownerReferences", "value": refs},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": [r for r in refs if r.get("uid") != uid]},
        ]
        await self.client.patch(resource, name, patch, namespace, patch_type=JSON_PATCH)
        log.info("%s %s kept for the VM's successor", resource.kind, name, extra=object_fields(vm))

    async def _add_finalizer(self, pool: Object) -> Object:
        finalizers = pool["metadata"].get("finalizers") or []
        if c.VM_POOL_FINALIZER in finalizers:
            return pool
        patch = finalizers_patch(finalizers, [*finalizers, c.VM_POOL_FINALIZER])
        meta = pool["metadata"]
        try:
            written: Object = await self.client.patch(
                VIRTUAL_MACHINE_POOLS, meta["name"], patch, meta["namespace"], patch_type=JSON_PATCH
            )
        except (NotFound, Conflict):
            return pool
        self.pools.wrote(written, meta["resourceVersion"])
        return written

    async def _remove_vm_finalizer(self, vm: Object) -> None:
        meta = vm["metadata"]
        try:
            for attempt in range(3):
                finalizers = _finalizers(vm)
                if c.VM_POOL_FINALIZER not in finalizers:
                    return
                kept = [f for f in finalizers if f != c.VM_POOL_FINALIZER]
                try:
                    await self.client.patch(
                        VIRTUAL_MACHINES,
                        meta["name"],
                        finalizers_patch(finalizers, kept),
                        meta["namespace"],
                        patch_type=JSON_PATCH,
                    )
                    return
                except Invalid:
                    # The list changed meanwhile (virt-controller's VM finalizer goes at the same time): read again.
                    if attempt == 2:
                        raise
                    vm = await self.client.get(VIRTUAL_MACHINES, meta["name"], meta["namespace"])
                    if vm["metadata"].get("uid") != meta["uid"]:
                        return
        except NotFound:
            return
        except ApiError as exc:
            self.recorder.event(
                vm,
                WARNING,
                "FailedUpdate",
                f"Error removing finalizer for VM {meta['namespace']}/{meta['name']}: {exc}",
            )
            raise SyncError(f"error removing the finalizer of {meta['name']}: {exc.message}", "FailedScaleIn") from exc

    # ------------------------------------------------------------------------------------------------ scale

    async def _scale(self, pool: Object, vms: list[Object]) -> bool:
        """Toward `spec.replicas`; True when there was nothing to create or delete."""
        diff = len(vms) - plan.wanted_replicas(pool)
        strategy = pool["spec"].get("scaleInStrategy") or {}
        if strategy.get("unmanaged") is None:
            # A VM going: deleted by someone else (let go, so that it is made again) or by a scale-in whose letting
            # go failed (a later scale-in counts it as gone already and would never look at it again).
            preserve = plan.preserves_state(pool, "proactive" if diff > 0 else "opportunistic")
            for vm in vms:
                if vm["metadata"].get("deletionTimestamp") and c.VM_POOL_FINALIZER in _finalizers(vm):
                    if preserve:
                        await self._keep_disks(vm)
                    await self._remove_vm_finalizer(vm)
        if diff == 0:
            return True
        count = min(abs(diff), BURST_REPLICAS)
        if diff < 0:
            try:
                await self._scale_out(pool, count)
            except SyncError as exc:
                raise SyncError(f"error during scale out: {exc.message}", "FailedScaleOut") from exc
        elif strategy.get("unmanaged") is None and strategy.get("opportunistic") is None:
            await self._scale_in(pool, vms, count)
        return False

    async def _scale_out(self, pool: Object, count: int) -> None:
        namespace = pool["metadata"]["namespace"]
        taken = {vm["metadata"]["name"] for vm in self.vms.by_index(NAMESPACE_INDEX, namespace)}
        names = plan.new_names(count, pool["metadata"]["name"], taken)
        revision = await self._ensure_revision(pool)
        owner = controller_ref(pool)
        key = object_key(pool)

        async def create(name: str) -> str | None:
            try:
                with self.expectations.creating(key):
                    await self.client.create(VIRTUAL_MACHINES, plan.new_vm(pool, name, revision, owner), namespace)
            except ApiError as exc:
                log.error("failed to add VM %s to the pool: %s", name, exc.message, extra=object_fields(pool))
                return exc.message
            self.recorder.event(pool, NORMAL, "SuccessfulCreate", f"Created VM {namespace}/{name}")
            return None

        errors = [e for e in await asyncio.gather(*(create(name) for name in names)) if e]
        if errors:
            self.recorder.event(pool, WARNING, "FailedCreate", f"Error creating VM: {errors[0]}")
            raise SyncError(errors[0], "FailedScaleOut")

    async def _scale_in(self, pool: Object, vms: list[Object], count: int) -> None:
        live = [vm for vm in vms if not vm["metadata"].get("deletionTimestamp")]
        # VMs already going count toward the scale-in.
        count = min(count - (len(vms) - len(live)), len(live))
        if count <= 0:
            return
        strategy = pool["spec"].get("scaleInStrategy")
        chosen = plan.selected_vms(plan.sorted_vms(live, plan.sort_policy(strategy)), strategy)[:count]
        key = object_key(pool)

        async def delete(vm: Object) -> str | None:
            meta = vm["metadata"]
            try:
                with self.expectations.deleting(key, object_key(vm)):
                    await self.client.delete(VIRTUAL_MACHINES, meta["name"], meta["namespace"])
            except NotFound:
                return None
            except ApiError as exc:
                message = f"Error deleting virtual machine {meta['namespace']}/{meta['name']}: {exc.message}"
                self.recorder.event(pool, WARNING, "FailedDelete", message)
                return exc.message
            if plan.preserves_state(pool, "proactive"):
                await self._keep_disks(vm)
            await self._remove_vm_finalizer(vm)
            self.recorder.event(
                pool,
                NORMAL,
                "SuccessfulDelete",
                f"Deleted VM {meta['namespace']}/{meta['name']} with uid {meta['uid']} from pool",
            )
            return None

        errors = [e for e in await asyncio.gather(*(delete(vm) for vm in chosen)) if e]
        if errors:
            raise SyncError(f"error during scale in: {errors[0]}", "FailedScaleIn")

    async def _ensure_revision(self, pool: Object) -> str:
        name = plan.revision_name(pool)
        namespace = pool["metadata"]["namespace"]
        if self.revisions.get(f"{namespace}/{name}") is not None:
            return name
        revision = {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [controller_ref(pool)]},
            "data": copy_json(pool["spec"]),
            "revision": pool["metadata"].get("generation", 1),
        }
        try:
            with self.expectations.creating(object_key(pool)):
                await self.client.create(CONTROLLER_REVISIONS, revision, namespace)
        except AlreadyExists:
            pass
        except ApiError as exc:
            raise SyncError(exc.message, "FailedScaleOut") from exc
        return name

    def _revision(self, namespace: str) -> plan.RevisionLookup:
        return lambda name: self.revisions.get(f"{namespace}/{name}")

    # ------------------------------------------------------------------------------------------------ update

    async def _update(self, pool: Object, vms: list[Object]) -> tuple[bool, float | None]:
        """Opportunistic (VM) and proactive (VMI) updates; (no VM was outdated, when to look again)."""
        strategy = pool["spec"].get("updateStrategy") or {}
        if strategy.get("unmanaged") is not None:
            return True, None
        lookup = self._revision(pool["metadata"]["namespace"])
        candidates = plan.selected_vms(vms, strategy)
        outdated: list[Object] = []
        current: list[Object] = []
        for vm in candidates:
            (outdated if plan.vm_outdated(pool, vm, lookup) else current).append(vm)
        try:
            if outdated:
                revision = await self._ensure_revision(pool)
                await asyncio.gather(*(self._update_vm(pool, vm, revision) for vm in outdated))
            requeue = None
            if strategy.get("opportunistic") is None:
                requeue = await self._proactive(pool, current, strategy)
        except ApiError as exc:
            raise SyncError(f"error during VM update: {exc.message}", "FailedUpdate") from exc
        return not outdated, requeue

    async def _update_vm(self, pool: Object, vm: Object, revision: str) -> None:
        meta = vm["metadata"]
        try:
            await self.client.update(VIRTUAL_MACHINES, plan.updated_vm(pool, vm, revision))
        except ApiError as exc:
            message = f"Error updating virtual machine {meta['name']}/{meta['namespace']}: {exc.message}"
            self.recorder.event(pool, WARNING, "FailedUpdate", message)
            raise
        self.recorder.event(pool, NORMAL, "SuccessfulUpdate", f"Updated VM {meta['namespace']}/{meta['name']}")

    async def _proactive(self, pool: Object, vms: list[Object], strategy: Object) -> float | None:
        """Restart (or relabel) VMIs of an older revision, unready ones first, within maxUnavailable."""
        lookup = self._revision(pool["metadata"]["namespace"])
        vmis = {object_key(vm): self.vmis.get(object_key(vm)) for vm in vms}
        # Unhealthy VMIs first: an update that failed before is rolled over whatever the budget says.
        for vm in vms:
            vmi = vmis[object_key(vm)]
            if vmi is not None and not condition_true(vm, "Ready") and not vmi["metadata"].get("deletionTimestamp"):
                await self._roll(pool, vm, vmi, plan.vmi_update(vm, vmi, lookup))
        budget = plan.max_unavailable(pool) - sum(1 for vm in vms if not plan.vmi_ready(vmis[object_key(vm)]))
        order = plan.sorted_vms(vms, plan.sort_policy(strategy)) if strategy.get("proactive") else vms
        for vm in order:
            vmi = vmis[object_key(vm)]
            if vmi is None:
                continue
            action = plan.vmi_update(vm, vmi, lookup)
            if action == plan.UPDATE_NONE:
                continue
            if budget <= 0:
                return RETRY_DELAY_SECONDS
            await self._roll(pool, vm, vmi, action)
            budget -= 1
        return None

    async def _roll(self, pool: Object, vm: Object, vmi: Object, action: str) -> None:
        meta = vm["metadata"]
        if action == plan.UPDATE_NONE:
            return
        try:
            if action == plan.UPDATE_RESTART:
                await self.client.delete(VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], meta["namespace"])
            elif action == plan.UPDATE_DELETE_VM:
                await self.client.delete(
                    VIRTUAL_MACHINES, meta["name"], meta["namespace"], propagation_policy="Foreground"
                )
            else:
                labels = dict(labels_of(vmi))
                labels[c.VM_POOL_REVISION_LABEL] = labels_of(vm).get(c.VM_POOL_REVISION_LABEL, "")
                test = {"op": "test", "path": "/metadata/labels", "value": vmi["metadata"].get("labels")}
                patch = [test, {"op": "replace", "path": "/metadata/labels", "value": labels}]
                if vmi["metadata"].get("labels") is None:
                    patch = [{"op": "add", "path": "/metadata/labels", "value": labels}]
                await self.client.patch(
                    VIRTUAL_MACHINE_INSTANCES, vmi["metadata"]["name"], patch, meta["namespace"], patch_type=JSON_PATCH
                )
        except NotFound:
            return
        except ApiError as exc:
            message = f"Error updating resource {meta['namespace']}/{meta['name']}: {exc.message}"
            self.recorder.event(pool, WARNING, "FailedUpdate", message)
            raise
        self.recorder.event(
            pool, NORMAL, "SuccessfulDelete", f"Successfully updated resource {meta['namespace']}/{meta['name']}"
        )

    async def _prune_revisions(self, pool: Object, vms: list[Object]) -> None:
        """Delete the pool's revisions no VM or VMI of it uses any more."""
        used = set()
        for vm in vms:
            used.add(labels_of(vm).get(c.VM_POOL_REVISION_LABEL))
            vmi = self.vmis.get(object_key(vm))
            if vmi is not None:
                used.add(labels_of(vmi).get(c.VM_POOL_REVISION_LABEL))
        for revision in self.revisions.by_index(OWNER_INDEX, pool["metadata"]["uid"]):
            name = revision["metadata"]["name"]
            if name in used:
                continue
            try:
                await self.client.delete(CONTROLLER_REVISIONS, name, revision["metadata"]["namespace"])
            except NotFound:
                continue
            except ApiError as exc:
                raise SyncError(
                    f"error while pruning vmpool revisions: {exc.message}", "FailedRevisionPruning"
                ) from exc

    # ------------------------------------------------------------------------------------------------ deletion

    async def _release_all(self, pool: Object, selector: LabelSelector) -> None:
        """The pool is going: its VMs lose the pool's finalizer (the garbage collector deletes them), then it does."""
        for vm in self.vms.by_index(NAMESPACE_INDEX, pool["metadata"]["namespace"]):
            if selector.matches(labels_of(vm)):
                await self._remove_vm_finalizer(vm)
        finalizers = pool["metadata"].get("finalizers") or []
        if c.VM_POOL_FINALIZER not in finalizers:
            return
        meta = pool["metadata"]
        patch = finalizers_patch(finalizers, [f for f in finalizers if f != c.VM_POOL_FINALIZER])
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_POOLS, meta["name"], patch, meta["namespace"], patch_type=JSON_PATCH
            )
        except NotFound:
            return

    # ------------------------------------------------------------------------------------------------ status

    async def _update_status(
        self, pool: Object, vms: list[Object], selector_text: str, failure: SyncError | None
    ) -> None:
        reason = (failure.reason, failure.message) if failure is not None else None
        status = plan.status_of(pool, vms, selector_text, reason, now_rfc3339())
        old = pool.get("status") or {}
        conditions = {cond.get("type") for cond in old.get("conditions") or []}
        if failure is not None and "ReplicaFailure" not in conditions:
            self.recorder.event(pool, WARNING, failure.reason, failure.message)
        paused = bool(pool["spec"].get("paused"))
        if paused and "ReplicaPaused" not in conditions:
            self.recorder.event(pool, NORMAL, "SuccessfulPaused", "Pool is paused")
        elif not paused and "ReplicaPaused" in conditions:
            self.recorder.event(pool, NORMAL, "SuccessfulResume", "Pool is unpaused")
        if status == old:
            return
        body = copy_json(pool)
        body["status"] = status
        try:
            written = await self.client.update_status(VIRTUAL_MACHINE_POOLS, body)
        except (Conflict, NotFound):
            return
        self.pools.wrote(written, pool["metadata"]["resourceVersion"])


def _sooner(first: float | None, second: float | None) -> float | None:
    """The earlier of two "look again in" delays, either of which may be None."""
    return second if first is None else first if second is None else min(first, second)


def _finalizers(obj: Object) -> list[str]:
    return list(obj["metadata"].get("finalizers") or [])
