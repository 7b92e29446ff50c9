"""VM `status.printableStatus`: KubeVirt's predicates, evaluated in its order, first match wins.

Upstream: pkg/virt-controller/watch/vm/vm.go: setPrintableStatus and its isVirtualMachineStatus* predicates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pykubevirt.api.constants import (
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SCHEDULED,
    PHASE_SCHEDULING,
    PHASE_UNSET,
    PHASE_WAITING_FOR_SYNC,
    RUN_STRATEGY_ALWAYS,
    RUN_STRATEGY_ONCE,
    RUN_STRATEGY_RERUN_ON_FAILURE,
    RUN_STRATEGY_WAIT_AS_RECEIVER,
)
from pykubevirt.api.objects import (
    as_aware,
    condition,
    condition_has,
    condition_true,
    is_final,
    is_marked_for_deletion,
    vmi_phase,
)
from pykubevirt.api.timestamps import parse_time
from pykubevirt.api.vm_run_strategy import run_strategy_or_none
from pykubevirt.controller.run_strategy import is_set_to_start

STATUS_STOPPED = "Stopped"
STATUS_PROVISIONING = "Provisioning"
STATUS_STARTING = "Starting"
STATUS_RUNNING = "Running"
STATUS_PAUSED = "Paused"
STATUS_STOPPING = "Stopping"
STATUS_TERMINATING = "Terminating"
STATUS_CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
STATUS_MIGRATING = "Migrating"
STATUS_UNKNOWN = "Unknown"
STATUS_UNSCHEDULABLE = "ErrorUnschedulable"
STATUS_ERR_IMAGE_PULL = "ErrImagePull"
STATUS_IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
STATUS_PVC_NOT_FOUND = "ErrorPvcNotFound"
STATUS_DATA_VOLUME_ERROR = "DataVolumeError"
STATUS_WAITING_FOR_VOLUME_BINDING = "WaitingForVolumeBinding"
STATUS_WAITING_FOR_RECEIVER = "WaitingForReceiver"

# VMI condition types and reasons the predicates read.
COND_PAUSED = "Paused"
COND_POD_SCHEDULED = "PodScheduled"
COND_SYNCHRONIZED = "Synchronized"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_FAILED_PVC_NOT_FOUND = "FailedPvcNotFound"
REASON_ERR_IMAGE_PULL = "ErrImagePull"
REASON_IMAGE_PULL_BACK_OFF = "ImagePullBackOff"

# CDI DataVolume phases and conditions.
DV_SUCCEEDED = "Succeeded"
DV_FAILED = "Failed"
DV_PENDING_POPULATION = "PendingPopulation"
DV_WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
DV_COND_BOUND = "Bound"
DV_COND_RUNNING = "Running"
# Reasons of a Running=False condition that mean the importer gave up.
DV_ERROR_REASONS = frozenset({"Error", "ImagePullFailed"})

CRASH_LOOP_STRATEGIES = frozenset({RUN_STRATEGY_ALWAYS, RUN_STRATEGY_RERUN_ON_FAILURE, RUN_STRATEGY_ONCE})
STARTING_PHASES = frozenset({PHASE_UNSET, PHASE_PENDING, PHASE_SCHEDULING, PHASE_SCHEDULED})

Obj = Mapping[str, Any]


def _template_volumes(vm: Obj) -> list[Mapping[str, Any]]:
    template = (vm.get("spec") or {}).get("template") or {}
    return list((template.get("spec") or {}).get("volumes") or [])


def _data_volume_name(volume: Mapping[str, Any]) -> str:
    return str((volume.get("dataVolume") or {}).get("name") or "")


def claim_name(volume: Mapping[str, Any]) -> str:
    """The PVC a VM volume uses: a DataVolume's name, a PVC's or a memory dump's claimName, else ""."""
    # KubeVirt assumes a DataVolume's PVC has the DataVolume's name.
    if volume.get("dataVolume") is not None:
        return _data_volume_name(volume)
    if volume.get("persistentVolumeClaim") is not None:
        return str(volume["persistentVolumeClaim"].get("claimName") or "")
    if volume.get("memoryDump") is not None:
        return str(volume["memoryDump"].get("claimName") or "")
    return ""


def _referenced_data_volumes(vm: Obj, data_volumes: list[dict[str, Any]]) -> list[Mapping[str, Any]]:
    # DataVolumes are looked up by namespace/name, like upstream's informer cache; missing ones are skipped.
    namespace = (vm.get("metadata") or {}).get("namespace")
    by_name: dict[str, Mapping[str, Any]] = {}
    for dv in data_volumes:
        meta = dv.get("metadata") or {}
        if meta.get("namespace") in (None, namespace):
            by_name.setdefault(str(meta.get("name") or ""), dv)
    found: list[Mapping[str, Any]] = []
    for volume in _template_volumes(vm):
        if volume.get("dataVolume") is None:
            continue
        referenced = by_name.get(_data_volume_name(volume))
        if referenced is not None:
            found.append(referenced)
    return found


def data_volume_error(dv: Mapping[str, Any]) -> str | None:
    """Why a DataVolume counts as failed (phase Failed, or Running=False for Error/ImagePullFailed), else None."""
    name = (dv.get("metadata") or {}).get("name") or ""
    if (dv.get("status") or {}).get("phase") == DV_FAILED:
        return f"DataVolume {name} is in Failed phase"
    running = condition(dv, DV_COND_RUNNING)
    if running is not None and running.get("status") == "False" and running.get("reason") in DV_ERROR_REASONS:
        return f"DataVolume {name} importer has stopped running due to an error: {running.get('message') or ''}"
    return None


def data_volume_provisioning(dv: Mapping[str, Any]) -> bool:
    """A DataVolume is still provisioning unless Succeeded, PendingPopulation, or WaitForFirstConsumer and unbound."""
    phase = (dv.get("status") or {}).get("phase") or ""
    if phase in (DV_SUCCEEDED, DV_PENDING_POPULATION):
        return False
    return condition_true(dv, DV_COND_BOUND) or phase != DV_WAIT_FOR_FIRST_CONSUMER


def is_migrating(vmi: Obj | None, now: datetime) -> bool:
    """The VMI's migration started at or before `now` and has not ended by `now`."""
    if vmi is None:
        return False
    state = (vmi.get("status") or {}).get("migrationState") or {}
    now = as_aware(now)
    start = parse_time(state.get("startTimestamp"))
    end = parse_time(state.get("endTimestamp"))
    running = start is not None and now >= start
    if end is not None and now >= end:
        running = False
    return running


def printable_status(
    vm: Obj,
    vmi: Obj | None,
    *,
    creation_expected: bool,
    deletion_expected: bool,
    data_volumes: list[dict[str, Any]],
    pvc_bound: Callable[[str], bool | None],
    now: datetime,
) -> str:
    """The VM's printableStatus; `*_expected` are the controller's pending VMI create/delete expectations."""
    # Upstream logs an unresolvable run strategy and lets the predicates that need it answer false.
    strategy = run_strategy_or_none(vm)
    volumes = _template_volumes(vm)
    phase = vmi_phase(vmi)

    def crash_loop() -> bool:
        if (vmi is not None and not is_final(vmi)) or creation_expected:
            return False
        failure = (vm.get("status") or {}).get("startFailure") or {}
        return int(failure.get("consecutiveFailCount") or 0) > 0 and strategy in CRASH_LOOP_STRATEGIES

    def unbound_pvc() -> bool:
        return any((name := claim_name(v)) and pvc_bound(name) is False for v in volumes)

    checks: list[tuple[str, Callable[[], bool]]] = [
        (STATUS_TERMINATING, lambda: is_marked_for_deletion(vm)),
        (
            STATUS_STOPPING,
            lambda: vmi is not None and not is_final(vmi) and (is_marked_for_deletion(vmi) or deletion_expected),
        ),
        (STATUS_MIGRATING, lambda: is_migrating(vmi, now)),
        (STATUS_PAUSED, lambda: vmi is not None and phase == PHASE_RUNNING and condition_true(vmi, COND_PAUSED)),
        (STATUS_RUNNING, lambda: vmi is not None and phase == PHASE_RUNNING and not condition_true(vmi, COND_PAUSED)),
        (
            STATUS_PVC_NOT_FOUND,
            lambda: condition_has(vmi, COND_SYNCHRONIZED, "False", REASON_FAILED_PVC_NOT_FOUND),
        ),
        (
            STATUS_DATA_VOLUME_ERROR,
            lambda: any(data_volume_error(dv) for dv in _referenced_data_volumes(vm, data_volumes)),
        ),
        (STATUS_UNSCHEDULABLE, lambda: condition_has(vmi, COND_POD_SCHEDULED, "False", REASON_UNSCHEDULABLE)),
        (
            STATUS_PROVISIONING,
            lambda: any(data_volume_provisioning(dv) for dv in _referenced_data_volumes(vm, data_volumes)),
        ),
        (STATUS_WAITING_FOR_VOLUME_BINDING, lambda: is_set_to_start(vm, vmi, strategy) and unbound_pvc()),
        (STATUS_ERR_IMAGE_PULL, lambda: condition_has(vmi, COND_SYNCHRONIZED, "False", REASON_ERR_IMAGE_PULL)),
        (
            STATUS_IMAGE_PULL_BACK_OFF,
            lambda: condition_has(vmi, COND_SYNCHRONIZED, "False", REASON_IMAGE_PULL_BACK_OFF),
        ),
        (STATUS_STARTING, lambda: creation_expected if vmi is None else phase in STARTING_PHASES),
        (STATUS_CRASH_LOOP_BACK_OFF, crash_loop),
        (STATUS_STOPPED, lambda: is_final(vmi) if vmi is not None else not creation_expected),
        (
            STATUS_WAITING_FOR_RECEIVER,
            lambda: (vmi is None or phase == PHASE_WAITING_FOR_SYNC) and strategy == RUN_STRATEGY_WAIT_AS_RECEIVER,
        ),
    ]
    for status, check in checks:
        if check():
            return status
    return STATUS_UNKNOWN
