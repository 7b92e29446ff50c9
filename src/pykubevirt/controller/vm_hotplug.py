"""CPU and memory hotplug of a running VM under the LiveUpdate rollout strategy: what a template change asks for.

Upstream: pkg/virt-controller/watch/vm/vm.go (syncRestartRequired, handleCPUChangeRequest, VMICPUsPatch,
handleMemoryHotplugRequest). A change of `cpu.sockets` or `memory.guest` in the VM's template is copied onto the
running VMI (with its requests and limits grown to match); the VMI controller then marks the VMI HotVCPUChange or
HotMemoryChange, the workload updater migrates it to a launcher pod sized for the new resources, and the target's
virt-handler plugs the vCPUs or resizes the virtio-mem device. A change hotplug cannot serve sets RestartRequired
with KubeVirt's message for that case. Pure: `live_update_action` decides, `LiveUpdate` patches the VMI.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from pykubevirt.admission.validation.compute import live_update_memory_error
from pykubevirt.api.guarded_patch import guarded_replace
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_lookup import get, parse_quantity
from pykubevirt.api.objects import condition
from pykubevirt.api.quantity import Quantity, QuantityFormat
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import VIRTUAL_MACHINE_INSTANCES
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.eviction_strategy import is_migratable
from pykubevirt.controller.compute_resources import topology_vcpus
from pykubevirt.controller.hotplug_conditions import HOT_MEMORY_CHANGE, HOT_VCPU_CHANGE
from pykubevirt.controller.sync_error import SyncError

if TYPE_CHECKING:
    from pykubevirt.controller.vm_revisions import StartRevisions

LIVE_UPDATE = "LiveUpdate"
HOTPLUG_CPU_ERROR = "HotPlugCPUError"
HOTPLUG_MEMORY_ERROR = "HotPlugMemoryError"
# The live-updatable fields syncRestartRequired ignores besides sockets and guest memory.
LIVE_UPDATABLE_SCHEDULING = ("nodeSelector", "affinity", "tolerations")


@dataclass(frozen=True, slots=True)
class Action:
    """One hotplug decision: a RestartRequired message, a JSON patch for the VMI, or an error to retry on."""

    restart: str | None = None
    patch: list[dict[str, Any]] | None = None
    error: SyncError | None = None


def is_live_update(config: ClusterConfig) -> bool:
    return (config.vm_rollout_strategy or LIVE_UPDATE) == LIVE_UPDATE


def without_live_updatable(before: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, Any]:
    """The started template spec with the live-updatable fields of the current one copied in (syncRestartRequired)."""
    result = copy_json(dict(before))
    before_cpu, now_cpu = get(result, "domain", "cpu"), get(now, "domain", "cpu")
    if isinstance(before_cpu, dict) and isinstance(now_cpu, dict):
        _copy_key(before_cpu, now_cpu, "sockets")
    now_guest = get(now, "domain", "memory", "guest")
    if now_guest is not None:
        result.setdefault("domain", {}).setdefault("memory", {})["guest"] = now_guest
    for key in LIVE_UPDATABLE_SCHEDULING:
        _copy_key(result, now, key)
    return result


def _copy_key(target: dict[str, Any], source: Mapping[str, Any], key: str) -> None:
    if key in source:
        target[key] = source[key]
    else:
        target.pop(key, None)


def _migrating(vmi: Mapping[str, Any]) -> bool:
    """migrations.IsMigrating: a migration has started and not ended."""
    state = (vmi.get("status") or {}).get("migrationState") or {}
    return bool(state.get("startTimestamp")) and not state.get("endTimestamp")


def _grow(resources: Mapping[str, Any], kind: str, name: str, delta: Quantity) -> list[dict[str, Any]]:
    """JSON patch growing the VMI's resources.<kind>.<name> by `delta` (Quantity.Add: a zero takes delta's format)."""
    path = f"/spec/domain/resources/{kind}/{name}"
    old = get(resources, kind, name)
    parsed = parse_quantity(old)
    if parsed is None or parsed.is_zero():
        grown = Quantity((parsed.value if parsed else 0) + delta.value, delta.format)
    else:
        grown = parsed + delta
    if old is None:
        # Nothing to test against: the VMI has no such resource yet.
        return [{"op": "add", "path": path, "value": str(grown)}]
    return guarded_replace(path, old, str(grown))


def cpu_action(template: Mapping[str, Any], vmi: Mapping[str, Any], config: ClusterConfig) -> Action | None:
    """handleCPUChangeRequest: None when the sockets agree; else patch the VMI, wait, or require a restart."""
    new_cpu, vmi_cpu = get(template, "domain", "cpu"), get(vmi, "spec", "domain", "cpu")
    if not isinstance(new_cpu, dict) or not isinstance(vmi_cpu, dict):
        return None
    sockets, vmi_sockets = int(new_cpu.get("sockets") or 0), int(vmi_cpu.get("sockets") or 0)
    if sockets == vmi_sockets:
        return None
    if (condition(vmi, HOT_VCPU_CHANGE) or {}).get("status") == "True":
        return Action(error=SyncError("another CPU hotplug is in progress", HOTPLUG_CPU_ERROR))
    if _migrating(vmi):
        return Action(error=SyncError("CPU hotplug is not allowed while VMI is migrating", HOTPLUG_CPU_ERROR))
    # maxSockets is fixed for the VMI's life: more sockets than it has need a new domain.
    if sockets > int(vmi_cpu.get("maxSockets") or 0):
        return Action(restart="CPU sockets updated in template spec to a value higher than what's available")
    if sockets < vmi_sockets:
        return Action(restart="Reduction of CPU socket count requires a restart")
    if template.get("architecture") == "arm64":
        return Action(restart="ARM doesn't support CPU hotplug")
    patch = guarded_replace("/spec/domain/cpu/sockets", vmi_sockets, sockets)
    delta_vcpus = topology_vcpus(new_cpu) - topology_vcpus(vmi_cpu)
    # Each vCPU adds 1000/cpuAllocationRatio millicores (integer division, as upstream).
    delta = Quantity(Fraction(delta_vcpus * (1000 // max(1, config.cpu_allocation_ratio)), 1000))
    vmi_resources = get(vmi, "spec", "domain", "resources") or {}
    for kind in ("requests", "limits"):
        if _nonzero(get(template, "domain", "resources", kind, "cpu")):
            patch += _grow(vmi_resources, kind, "cpu", delta)
    return Action(patch=patch)


def _nonzero(value: Any) -> bool:
    parsed = parse_quantity(value)
    return parsed is not None and not parsed.is_zero()


def memory_action(template: Mapping[str, Any], vmi: Mapping[str, Any]) -> Action | None:
    """handleMemoryHotplugRequest: None when nothing changes; else patch the VMI, wait, or require a restart."""
    guest = parse_quantity(get(template, "domain", "memory", "guest"))
    vmi_guest_text = get(vmi, "spec", "domain", "memory", "guest")
    vmi_guest = parse_quantity(vmi_guest_text)
    memory_status = (vmi.get("status") or {}).get("memory") or {}
    current = parse_quantity(memory_status.get("guestCurrent"))
    if guest is None or vmi_guest is None or current is None:
        return None
    change = condition(vmi, HOT_MEMORY_CHANGE) or {}
    if change.get("status") == "False":
        return Action(
            restart="memory updated in template spec. "
            "Memory-hotplug failed and is not available for this VM configuration"
        )
    if guest == vmi_guest:
        return None
    if not is_migratable(vmi):
        return Action(restart="memory updated in template spec. Memory-hotplug is only available for migratable VMs")
    max_guest = parse_quantity(get(vmi, "spec", "domain", "memory", "maxGuest"))
    if max_guest is None:
        return Action(
            restart="memory updated in template spec. Memory-hotplug is not available for this VM configuration"
        )
    if change.get("status") == "True":
        return Action(error=SyncError("another memory hotplug is in progress", HOTPLUG_MEMORY_ERROR))
    if _migrating(vmi):
        return Action(error=SyncError("memory hotplug is not allowed while VMI is migrating", HOTPLUG_MEMORY_ERROR))
    error = live_update_memory_error(template, max_guest)
    if error is not None:
        return Action(restart=f"memory hotplug not supported, {error}")
    at_boot = parse_quantity(memory_status.get("guestAtBoot"))
    if at_boot is not None and guest < at_boot:
        return Action(restart="memory updated in template spec to a value lower than what the VM started with")
    if max_guest < guest:
        return Action(restart="memory updated in template spec to a value higher than what's available")
    delta = Quantity(guest.value - current.value, QuantityFormat.BINARY_SI)
    patch = guarded_replace("/spec/domain/memory/guest", vmi_guest_text, str(guest))
    vmi_resources = get(vmi, "spec", "domain", "resources") or {}
    if _nonzero(get(vmi_resources, "requests", "memory")):
        old_request = get(vmi_resources, "requests", "memory")
        request = Quantity.parse(old_request) + delta
        # After an unplug not all memory may come back: the request never falls below the guest memory.
        if request < guest:
            request = Quantity(guest.value, request.format)
            delta = Quantity(guest.value - request.value, QuantityFormat.BINARY_SI)
        patch += guarded_replace("/spec/domain/resources/requests/memory", old_request, str(request))
    if _nonzero(get(template, "domain", "resources", "limits", "memory")):
        patch += _grow(vmi_resources, "limits", "memory", delta)
    return Action(patch=patch)


class LiveUpdate:
    """Applies the hotplug a VM's template asks of its running VMI (after syncRestartRequired found none needed)."""

    def __init__(self, client: KubeClient, config: Callable[[], ClusterConfig], revisions: StartRevisions) -> None:
        self.client = client
        self.config = config
        self.revisions = revisions

    def _changed(self, vm: Object, vmi: Object | None) -> bool:
        """syncRestartRequired: a field changed since start that cannot be updated live."""
        return self.revisions.restart_required(vm, vmi, live_update=is_live_update(self.config()))

    def restart_required(self, vm: Object, vmi: Object | None) -> bool | str:
        """RestartRequired: True (KubeVirt's generic message), the message of a hotplug that cannot be, or False."""
        if self._changed(vm, vmi):
            return True
        config = self.config()
        if vmi is None or vmi["metadata"].get("deletionTimestamp") or not is_live_update(config):
            return False
        template = get(vm, "spec", "template", "spec") or {}
        for action in (cpu_action(template, vmi, config), memory_action(template, vmi)):
            if action is not None and action.restart is not None:
                return action.restart
        return False

    async def apply(self, vm: Object, vmi: Object | None) -> SyncError | None:
        """Copy the template's new sockets or guest memory onto the running VMI; a SyncError to retry on."""
        config = self.config()
        if vmi is None or vmi["metadata"].get("deletionTimestamp") or not is_live_update(config):
            return None
        if self._changed(vm, vmi):
            return None
        template = get(vm, "spec", "template", "spec") or {}
        for action, prefix, reason in (
            (
                cpu_action(template, vmi, config),
                "Error encountered while handling CPU change request",
                HOTPLUG_CPU_ERROR,
            ),
            (
                memory_action(template, vmi),
                "error encountered while handling memory hotplug requests",
                HOTPLUG_MEMORY_ERROR,
            ),
        ):
            if action is None or action.restart is not None:
                continue
            if action.error is not None:
                return SyncError(f"{prefix}: {action.error.message}", action.error.reason)
            if action.patch:
                meta = vmi["metadata"]
                try:
                    vmi = await self.client.patch(
                        VIRTUAL_MACHINE_INSTANCES, meta["name"], action.patch, meta["namespace"], patch_type=JSON_PATCH
                    )
                except NotFound:
                    return None
                except ApiError as exc:
                    return SyncError(f"{prefix}: {exc.message}", reason)
        return None
