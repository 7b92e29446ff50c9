"""The VirtualMachine controller: keeps a VMI running or stopped as the RunStrategy says, and reports status.

Level-triggered like KubeVirt's: each reconcile reads the VM, its VMI and DataVolumes from the caches, acts
through the API (create or delete the VMI, create DataVolumes and the start ControllerRevision), then writes the
VM status (created, ready, conditions, printableStatus, startFailure, stateChangeRequests) if it changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.finalizer_patch import finalizers_patch
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.objects import condition_true, is_final
from pykubevirt.api.timestamps import format_time
from pykubevirt.api.vm_run_strategy import RunStrategyError, run_strategy, run_strategy_or_none
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.controller import Result, controller_owner_key
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.expectations import ControllerExpectations
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.crash_loop import backoff_remaining, sync_start_failure
from pykubevirt.controller.instancetype_sync import InstancetypeSync
from pykubevirt.controller.printable_status import printable_status
from pykubevirt.controller.run_strategy import (
    FAILED_CREATE,
    Act,
    decide,
)
from pykubevirt.controller.status_coalescing import (
    OBSERVABLE_SECONDS,
    HeldWrites,
    only_details_changed,
    running_awaits_ready_sync,
    vm_stopped_awaits_vmi_removal,
)
from pykubevirt.controller.sync_error import SyncError
from pykubevirt.controller.vm_conditions import (
    COND_MANUAL_RECOVERY_REQUIRED,
    status_fields,
    trim_state_change_requests,
    vm_conditions,
)
from pykubevirt.controller.vm_data_volumes import VMDataVolumes
from pykubevirt.controller.vm_hotplug import LiveUpdate
from pykubevirt.controller.vm_memory_dump import MemoryDumps, request_of, updated_request
from pykubevirt.controller.vm_revisions import StartRevisions
from pykubevirt.controller.vm_volume_requests import (
    remaining_requests,
    request_error,
    template_with_requests,
    vmi_patch,
    vmi_requests,
    volume_requests,
)
from pykubevirt.controller.vmi_from_vm import controller_ref, vmi_from_vm
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.controller.vm")

FAILED_DELETE = "FailedDelete"
SUCCESSFUL_CREATE = "SuccessfulCreate"
SUCCESSFUL_DELETE = "SuccessfulDelete"
API_VERSION_VALUE = c.KUBEVIRT_VERSION


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class _Outcome:
    """What one sync produced besides the VM: the sync error and when to look again."""

    sync_error: SyncError | None = None
    requeue_after: float | None = None
    # The VMI this sync created, or the one it deleted as the delete left it (terminating): the VM's status is
    # computed from it at once, not from the cache, which may not have heard of the write yet.
    started: Object | None = None
    stopped: Object | None = None

    def look_again_within(self, seconds: float | None) -> None:
        if seconds is not None:
            self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


class VMController:
    """Reconciles one VirtualMachine key at a time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        vms: Informer,
        vmis: Informer,
        data_volumes: Informer,
        revisions: Informer,
        pvcs: Informer | None,
        recorder: EventRecorder,
        config: ClusterConfig,
        clock: Any = _now,
    ) -> None:
        self.client = client
        self.vms = vms
        self.vmis = vmis
        self.data_volumes = VMDataVolumes(client, data_volumes, pvcs, recorder)
        self.recorder = recorder
        self.config = config
        self.clock = clock
        self.expectations = ControllerExpectations()
        self.held_status = HeldWrites()
        # An observable change's own window starts when it first waits, not when a detail before it began to.
        self.held_observable = HeldWrites()
        self.start_revisions = StartRevisions(client, revisions)
        self.instancetypes = InstancetypeSync(client, revisions)
        self.live_update = LiveUpdate(client, lambda: self.config, self.start_revisions)
        self.memory_dumps = MemoryDumps(client, pvcs)
        # The volumes' snapshot statuses, once the snapshot controllers run (KubeVirt's snapshot controller writes
        # them apart; here they go with the status write the VM gets anyway).
        self.snapshot_statuses: Callable[[Object], list[dict[str, Any]]] | None = None

    # ------------------------------------------------------------------------------------------------ events

    def on_vmi_add(self, vmi: Object) -> None:
        key = controller_owner_key(vmi, c.VM_KIND)
        if key:
            self.expectations.creation_observed(key)

    def on_vmi_update(self, old: Object, new: Object) -> None:
        # A VMI that is terminating counts as deleted for the VM's expectations (as KubeVirt does).
        if new["metadata"].get("deletionTimestamp"):
            self.on_vmi_delete(new)

    def on_vmi_delete(self, vmi: Object) -> None:
        if key := controller_owner_key(vmi, c.VM_KIND):
            self.expectations.deletion_observed(key, object_key(vmi))

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        cached = self.vms.get(key)
        if cached is None:
            self.expectations.delete(key)
            self._release(key)
            return None
        if not await self._ensure_metadata(cached):
            return None
        # The cached VM stays as read (status is compared against it); the copy is what this sync edits.
        vm = copy_json(cached)
        vmi = self._claimed_vmi(vm, key)
        outcome = _Outcome()
        try:
            vm, vmi = await self._sync(vm, vmi, key, outcome)
        except RunStrategyError as exc:
            outcome.sync_error = SyncError(f"Error fetching RunStrategy: {exc}", FAILED_CREATE)
        outcome.look_again_within(await self._update_status(vm, cached, vmi, key, outcome.sync_error))
        if outcome.sync_error is not None:
            log.warning("sync of the VirtualMachine failed: %s", outcome.sync_error.message, extra=object_fields(vm))
            # KubeVirt returns the sync error so the key is retried with backoff.
            raise outcome.sync_error
        return Result(outcome.requeue_after) if outcome.requeue_after else None

    async def _ensure_metadata(self, vm: Object) -> bool:
        """The api-version annotation and the controller finalizer, in one write; False when the VM changed."""
        meta = vm["metadata"]
        annotations = meta.get("annotations") or {}
        needs_annotation = annotations.get(c.LATEST_OBSERVED_API_VERSION_ANNOTATION) != API_VERSION_VALUE
        needs_finalizer = not meta.get("deletionTimestamp") and c.VM_CONTROLLER_FINALIZER not in (
            meta.get("finalizers") or []
        )
        if not needs_annotation and not needs_finalizer:
            return True
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta["resourceVersion"]}}
        if needs_annotation:
            patch["metadata"]["annotations"] = {
                c.LATEST_OBSERVED_API_VERSION_ANNOTATION: API_VERSION_VALUE,
                c.STORAGE_OBSERVED_API_VERSION_ANNOTATION: API_VERSION_VALUE,
            }
        if needs_finalizer:
            patch["metadata"]["finalizers"] = [*(meta.get("finalizers") or []), c.VM_CONTROLLER_FINALIZER]
        try:
            updated = await self.client.patch(VIRTUAL_MACHINES, meta["name"], patch, meta["namespace"])
        except (Conflict, NotFound):
            return False
        self.vms.wrote(updated, meta["resourceVersion"])
        # The write comes back as an event; reconcile again then.
        return False

    def _claimed_vmi(self, vm: Object, key: str) -> Object | None:
        vmi = self.vmis.get(key)
        if vmi is None:
            return None
        owner = next((r for r in vmi["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if owner is not None and owner.get("uid") != vm["metadata"]["uid"]:
            return None
        if owner is None and vm["metadata"].get("deletionTimestamp"):
            # A VM being deleted adopts nothing: an orphaned VMI (released by an Orphan delete) is not its own.
            return None
        # Shared with the cache: the sync only reads it (writes go through the API and come back as events).
        return vmi

    async def _sync(self, vm: Object, vmi: Object | None, key: str, outcome: _Outcome) -> tuple[Object, Object | None]:
        if not self.expectations.satisfied(key):
            return vm, vmi
        if (
            vmi is not None
            and not vmi["metadata"].get("ownerReferences")
            and not vmi["metadata"].get("deletionTimestamp")
        ):
            vmi = await self._adopt(vm, vmi)
        if vm["metadata"].get("deletionTimestamp"):
            if vmi is not None and "orphan" not in (vm["metadata"].get("finalizers") or []):
                vmi = await self._still_controlled(vm, vmi)
            if vmi is None or "orphan" in (vm["metadata"].get("finalizers") or []):
                await self._remove_vm_finalizer(vm)
            else:
                outcome.sync_error, outcome.stopped = await self._stop(vm, vmi, as_read=True)
            return vm, outcome.stopped or vmi
        strategy = run_strategy(vm)
        if vmi is not None:
            vmi = await self.start_revisions.bump_generation_annotation(vm, vmi)
        synced_error = await self.instancetypes.sync(vm)
        if synced_error is not None:
            outcome.sync_error = synced_error
            return vm, vmi
        ready, dv_error = await self.data_volumes.ensure(vm)
        if dv_error is not None:
            outcome.sync_error = dv_error
            return vm, vmi
        if not ready and strategy != c.RUN_STRATEGY_HALTED:
            return vm, vmi
        await self._sync_run_strategy(vm, vmi, strategy, outcome)
        vmi = outcome.started or outcome.stopped or vmi
        # Again: starting or stopping may have changed the VMI the requests apply to.
        if outcome.sync_error is None and self.expectations.satisfied(key) and volume_requests(vm):
            outcome.sync_error = await self._handle_volume_requests(vm, vmi)
        if outcome.sync_error is None and self.expectations.satisfied(key) and request_of(vm) is not None:
            outcome.sync_error = await self.memory_dumps.handle(vm, vmi)
        if outcome.sync_error is None and self.expectations.satisfied(key):
            outcome.sync_error = await self.live_update.apply(vm, vmi)
        return vm, vmi

    async def _handle_volume_requests(self, vm: Object, vmi: Object | None) -> SyncError | None:
        """handleVolumeRequests: the VMI gets what it still lacks, then the template takes every request."""
        for request in vmi_requests(vm, vmi):
            assert vmi is not None
            name = vmi["metadata"]["name"]
            if (vmi.get("status") or {}).get("phase") != c.PHASE_RUNNING:
                # What the VMI's addvolume subresource answers KubeVirt's controller.
                return request_error(f'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "{name}": '
                                     "VMI is not running")  # fmt: skip
            try:
                vmi = await self.client.patch(
                    VIRTUAL_MACHINE_INSTANCES, name, vmi_patch(vmi, request), vmi["metadata"]["namespace"],
                    patch_type=JSON_PATCH,
                )  # fmt: skip
            except ApiError as exc:
                return request_error(exc.message)
        template = vm["spec"]["template"]
        spec = template_with_requests(vm)
        current = template.get("spec") or {}
        disks = (spec.get("domain") or {}).get("devices", {}).get("disks") or []
        if spec.get("volumes") == current.get("volumes") and disks == (
            (current.get("domain") or {}).get("devices") or {}
        ).get("disks"):
            return None
        meta = vm["metadata"]
        changed = {"volumes": spec.get("volumes") or [], "domain": {"devices": {"disks": disks}}}
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": {"template": {"spec": changed}}}
        try:
            updated = await self.client.patch(VIRTUAL_MACHINES, meta["name"], patch, meta["namespace"])
        except Conflict:
            return None  # the newer VM comes back as an event; its requests are handled then
        except ApiError as exc:
            return request_error(exc.message)
        # The status written next goes with the VM as it is now, and trims what the template now shows.
        vm["spec"] = updated["spec"]
        meta["resourceVersion"] = updated["metadata"]["resourceVersion"]
        return None

    async def _still_controlled(self, vm: Object, vmi: Object) -> Object | None:
        """The VMI as the API server has it now, or None when this VM no longer controls it.

        The garbage collector orphans the dependents of an Orphan delete and only then drops the VM's `orphan`
        finalizer, but the VMI informer may not have heard of the release yet: a cached VMI still naming this VM as
        its controller would be stopped although the user asked to keep it. So a deleting VM stops only what a fresh
        read shows it still controls, and the delete is guarded by that read's resourceVersion.
        """
        meta = vmi["metadata"]
        fresh = await self.client.get_or_none(VIRTUAL_MACHINE_INSTANCES, meta["name"], meta["namespace"])
        if fresh is None:
            return None
        owner = next((r for r in fresh["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if owner is None or owner.get("uid") != vm["metadata"]["uid"]:
            return None
        return fresh

    async def _adopt(self, vm: Object, vmi: Object) -> Object:
        patch = {
            "metadata": {"ownerReferences": [controller_ref(vm)], "resourceVersion": vmi["metadata"]["resourceVersion"]}
        }
        meta = vmi["metadata"]
        result: Object = await self.client.patch(VIRTUAL_MACHINE_INSTANCES, meta["name"], patch, meta["namespace"])
        return result

    # ------------------------------------------------------------------------------------------------ run strategy

    async def _sync_run_strategy(self, vm: Object, vmi: Object | None, strategy: str, outcome: _Outcome) -> None:
        """Carry out what the RunStrategy table decides."""
        action = decide(vm, vmi, strategy, backoff_left=backoff_remaining(vm, self.clock()))
        if action.act is Act.START:
            outcome.sync_error, outcome.started = await self._start(vm)
        elif action.act is Act.WAIT_FOR_BACKOFF:
            log.info(
                "delaying the start of the VM for %.0fs due to the start failure backoff (runStrategy %s)",
                action.wait_seconds,
                strategy,
                extra=object_fields(vm),
            )
            outcome.requeue_after = action.wait_seconds
        elif action.act in (Act.STOP, Act.STOP_THEN_REQUEST_START) and vmi is not None:
            outcome.sync_error, outcome.stopped = await self._stop(vm, vmi)
            if action.act is Act.STOP_THEN_REQUEST_START and outcome.sync_error is None:
                await self._add_start_request(vm)
        elif action.act is Act.SWITCH_HALTED_TO_ALWAYS:
            outcome.sync_error = await self._switch_halted_to_always(vm)
        elif action.act is Act.ERROR:
            outcome.sync_error = SyncError(action.message, action.reason)

    async def _switch_halted_to_always(self, vm: Object) -> SyncError:
        spec_patch: dict[str, Any] = {"metadata": {"resourceVersion": vm["metadata"]["resourceVersion"]}}
        if vm["spec"].get("runStrategy") is not None:
            spec_patch["spec"] = {"runStrategy": c.RUN_STRATEGY_ALWAYS}
        else:
            spec_patch["spec"] = {"running": True}
        error: str = "<nil>"
        try:
            await self.client.patch(VIRTUAL_MACHINES, vm["metadata"]["name"], spec_patch, vm["metadata"]["namespace"])
        except ApiError as exc:
            error = exc.message
        # KubeVirt reports this step as a sync error whatever happens; the next loop starts the VMI.
        return SyncError(f"Failure while starting VMI: {error}", FAILED_CREATE)

    async def _add_start_request(self, vm: Object) -> None:
        requests = [*((vm.get("status") or {}).get("stateChangeRequests") or []), {"action": "Start"}]
        patch: list[dict[str, Any]] = [{"op": "add", "path": "/status/stateChangeRequests", "value": requests}]
        if "status" not in vm:
            patch = [{"op": "add", "path": "/status", "value": {"stateChangeRequests": requests}}]
        updated = await self.client.patch(
            VIRTUAL_MACHINES,
            vm["metadata"]["name"],
            patch,
            vm["metadata"]["namespace"],
            patch_type=JSON_PATCH,
            subresource="status",
        )
        vm["status"] = updated.get("status") or {}
        vm["metadata"]["resourceVersion"] = updated["metadata"]["resourceVersion"]

    async def _start(self, vm: Object) -> tuple[SyncError | None, Object | None]:
        """Create the VMI (KubeVirt's startVMI); the created VMI is returned and arrives through the informer too."""
        key = object_key(vm)
        if condition_true(vm, COND_MANUAL_RECOVERY_REQUIRED):
            return None, None
        try:
            vmi = vmi_from_vm(vm, self.config)
            vmi["status"] = {"virtualMachineRevisionName": await self.start_revisions.ensure(vm)}
            self.instancetypes.apply_to_vmi(vm, vmi)
        except ApiError as exc:
            return SyncError(f"Failure while starting VMI: {exc.message}", FAILED_CREATE), None
        except SyncError as exc:
            self.recorder.event(vm, WARNING, FAILED_CREATE, f"Error creating virtual machine instance: {exc.message}")
            return SyncError(f"Failure while starting VMI: {exc.message}", FAILED_CREATE), None
        try:
            with self.expectations.creating(key):
                created = await self.client.create(VIRTUAL_MACHINE_INSTANCES, vmi, vm["metadata"]["namespace"])
        except ApiError as exc:
            self.recorder.event(vm, WARNING, FAILED_CREATE, f"Error creating virtual machine instance: {exc.message}")
            if isinstance(exc, AlreadyExists):
                return None, None
            return SyncError(f"Failure while starting VMI: {exc.message}", FAILED_CREATE), None
        log.info("started the VM by creating VMI %s", created["metadata"]["name"], extra=object_fields(vm))
        self.recorder.event(
            vm,
            NORMAL,
            SUCCESSFUL_CREATE,
            f"Started the virtual machine by creating the new virtual machine instance {created['metadata']['name']}",
        )
        return None, created

    async def _stop(self, vm: Object, vmi: Object, *, as_read: bool = False) -> tuple[SyncError | None, Object | None]:
        """Delete the VMI (KubeVirt's stopVMI); no-op while it is already terminating. Returns the VMI terminating.

        `as_read` guards the delete with the VMI's resourceVersion too: only the VMI exactly as read is deleted.
        """
        if vmi["metadata"].get("deletionTimestamp"):
            return None, None
        key = object_key(vm)
        preconditions = {"uid": vmi["metadata"]["uid"]}
        if as_read:
            preconditions["resourceVersion"] = vmi["metadata"]["resourceVersion"]
        try:
            with self.expectations.deleting(key, object_key(vmi)):
                answer = await self.client.delete(
                    VIRTUAL_MACHINE_INSTANCES,
                    vmi["metadata"]["name"],
                    vmi["metadata"]["namespace"],
                    preconditions=preconditions,
                )
        except NotFound:
            return None, None
        except ApiError as exc:
            if as_read and isinstance(exc, Conflict):
                # Changed since the fresh read (perhaps released by an Orphan delete): decide again on fresh data.
                return SyncError("the VirtualMachineInstance changed while it was being stopped", FAILED_DELETE), None
            self.recorder.event(
                vm,
                WARNING,
                FAILED_DELETE,
                f"Error deleting virtual machine instance {vmi['metadata']['name']}: {exc.message}",
            )
            return SyncError(f"Failure attempting to delete VMI: {exc.message}", FAILED_DELETE), None
        log.info(
            "stopped the VM by deleting VMI %s (phase %s)",
            vmi["metadata"]["name"],
            (vmi.get("status") or {}).get("phase", ""),
            extra=object_fields(vm),
        )
        self.recorder.event(
            vm,
            NORMAL,
            SUCCESSFUL_DELETE,
            f"Stopped the virtual machine by deleting the virtual machine instance {vmi['metadata']['uid']}",
        )
        # Its finalizers keep it, now marked for deletion. The VMI informer may deliver that before this answer and
        # settle the deletion expectation, so the cached VMI alone would say Running, not Stopping.
        terminating = answer.get("kind") == c.VMI_KIND and bool((answer.get("metadata") or {}).get("deletionTimestamp"))
        return None, answer if terminating else None

    async def _remove_vm_finalizer(self, vm: Object) -> None:
        finalizers = [f for f in vm["metadata"].get("finalizers") or [] if f != c.VM_CONTROLLER_FINALIZER]
        if finalizers == (vm["metadata"].get("finalizers") or []):
            return
        patch = {"metadata": {"finalizers": finalizers or None, "resourceVersion": vm["metadata"]["resourceVersion"]}}
        try:
            updated = await self.client.patch(
                VIRTUAL_MACHINES, vm["metadata"]["name"], patch, vm["metadata"]["namespace"]
            )
        except NotFound:
            return
        vm["metadata"] = updated["metadata"]

    # ------------------------------------------------------------------------------------------------ status

    async def _update_status(
        self, vm: Object, original: Object, vmi: Object | None, key: str, sync_error: SyncError | None
    ) -> float | None:
        """Write the status if it changed; returns when to look again for a change held back (status_coalescing)."""
        if vmi is None and self.expectations.pending_creations(key):
            # The VMI this controller created is not in the cache yet (the VM's informer ran ahead of the VMI's):
            # a status computed now would say created: false for the VMI's add event to set it back, two writes
            # for nothing. That event brings the VM back here.
            return None
        status = vm.setdefault("status", {})
        now = self.clock()
        status.update(status_fields(vm, vmi))
        status["stateChangeRequests"] = trim_state_change_requests(vm, vmi)
        if not status["stateChangeRequests"]:
            del status["stateChangeRequests"]
        status["volumeRequests"] = remaining_requests(vm)
        if not status["volumeRequests"]:
            del status["volumeRequests"]
        status["memoryDumpRequest"] = updated_request(vm, vmi)
        if status["memoryDumpRequest"] is None:
            del status["memoryDumpRequest"]
        strategy = run_strategy_or_none(vm)
        start_failure = sync_start_failure(vm, vmi, strategy, now)
        if start_failure is None:
            status.pop("startFailure", None)
        else:
            status["startFailure"] = start_failure
        status["conditions"] = vm_conditions(
            vm,
            vmi,
            sync_error=(sync_error.reason, sync_error.message) if sync_error is not None else None,
            now=format_time(now),
            # A non-live-updatable change (True), or a live update hotplug cannot serve (its message).
            restart_required=self.live_update.restart_required(vm, vmi),
        )
        if not status["conditions"]:
            del status["conditions"]
        if self.snapshot_statuses is not None:
            status["volumeSnapshotStatuses"] = self.snapshot_statuses(vm)
            if not status["volumeSnapshotStatuses"]:
                del status["volumeSnapshotStatuses"]
        status["printableStatus"] = printable_status(
            vm,
            vmi,
            creation_expected=self.expectations.pending_creations(key),
            deletion_expected=self.expectations.pending_deletions(key),
            data_volumes=self.data_volumes.of(vm),
            pvc_bound=lambda claim: self.data_volumes.pvc_bound(vm["metadata"]["namespace"], claim),
            now=now,
        )
        releasing = vmi is not None and (is_final(vmi) or self._receiver_deleted(vmi))
        if releasing:
            held = self._hold_until_gone(key, vm, original.get("status") or {}, status, vmi)
        else:
            held = self._hold(key, original.get("status") or {}, status, vmi)
        if held is None and status != (original.get("status") or {}):
            try:
                replaced = vm["metadata"]["resourceVersion"]
                self.vms.wrote(await self.client.update_status(VIRTUAL_MACHINES, vm), replaced)
            except NotFound:
                return None
            except Conflict:
                # The cache is behind: the newer VM is on its way as an event and will be reconciled then.
                log.debug("VM status update conflicted; waiting for the newer version", extra=object_fields(vm))
                return None
        if held is None:
            self._release(key)
        if releasing and vmi is not None:
            await self._remove_vmi_finalizer(vmi)
        return held

    def _release(self, key: str) -> None:
        self.held_status.release(key)
        self.held_observable.release(key)

    def _hold(self, key: str, before: Object, after: Object, vmi: Object | None) -> float | None:
        """How long the status write may wait to be merged with the next one (status_coalescing), None: write now.

        Held: a change only to a condition's reason or message (Ready: VMIConditionMissing → GuestNotRunning while
        the VMI is scheduled), and a Running status while virt-controller has yet to copy the pod's readiness onto
        the VMI that has just turned Running (Running and ready arrive in one write instead of two).
        """
        if after == before:
            return None
        if only_details_changed(before, after):
            return self.held_status.hold(key)
        if running_awaits_ready_sync(after, vmi):
            # Counted from when the VMI turned Running: a detail held since it was Scheduling (its Ready reason)
            # must not cut this wait short, or Running and ready cost two writes whenever scheduling took a second.
            return self.held_observable.hold(key, OBSERVABLE_SECONDS)
        return None

    def _hold_until_gone(self, key: str, vm: Object, before: Object, after: Object, vmi: Object | None) -> float | None:
        """A VM stopping for good: Stopped waits for its deleted VMI to go (vm_stopped_awaits_vmi_removal)."""
        if after != before and vm_stopped_awaits_vmi_removal(vm, after, vmi):
            return self.held_observable.hold(key, OBSERVABLE_SECONDS)
        return None

    @staticmethod
    def _receiver_deleted(vmi: Object) -> bool:
        phase = (vmi.get("status") or {}).get("phase")
        return phase == c.PHASE_WAITING_FOR_SYNC and bool(vmi["metadata"].get("deletionTimestamp"))

    async def _remove_vmi_finalizer(self, vmi: Object) -> None:
        finalizers = vmi["metadata"].get("finalizers") or []
        if c.VM_CONTROLLER_FINALIZER not in finalizers:
            return
        remaining = [f for f in finalizers if f != c.VM_CONTROLLER_FINALIZER]
        patch = finalizers_patch(finalizers, remaining)
        try:
            await self.client.patch(
                VIRTUAL_MACHINE_INSTANCES,
                vmi["metadata"]["name"],
                patch,
                vmi["metadata"]["namespace"],
                patch_type=JSON_PATCH,
            )
        except (NotFound, Conflict):
            return
        except ApiError as exc:
            if exc.code != 422:
                raise
