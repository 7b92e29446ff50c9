"""Checks of the VMI subresources before virt-api proxies them to virt-handler (pkg/virt-api/rest/).

Upstream: lifecycle.go (pause, unpause, soft reboot), console.go, vnc.go, subresource.go (guest agent), dialers.go.

Each takes the VMI (and VM where upstream reads it) and returns the Status error to answer, or None.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api import errors
from pykubevirt.api.json_lookup import get
from pykubevirt.api.objects import condition, condition_true, vmi_phase
from pykubevirt.virtapi.lifecycle import VM_NOT_RUNNING, VMI_RESOURCE, name_of, vm_conflict, vmi_conflict

PAUSED = "Paused"
AGENT_CONNECTED = "AgentConnected"
VMI_NOT_RUNNING = "VMI is not running"
VMI_NOT_PAUSED = "VMI is not paused"
GUEST_AGENT_MISSING = "VMI does not have guest agent connected"
SNAPSHOT_IN_PROGRESS = "VM snapshot is in progress"


def _devices(vmi: dict[str, Any]) -> dict[str, Any]:
    devices: dict[str, Any] = get(vmi, "spec", "domain", "devices") or {}
    return devices


def _forbidden(name: str, why: str) -> errors.APIError:
    resource = f"{VMI_RESOURCE}.{c.KUBEVIRT_GROUP}"
    return errors.forbidden(
        f'{resource} "{name}" is forbidden: {why}', plural=VMI_RESOURCE, group=c.KUBEVIRT_GROUP, name=name
    )


def check_pause(vmi: dict[str, Any]) -> errors.APIError | None:
    name = name_of(vmi)
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return vmi_conflict(name, VM_NOT_RUNNING)
    probe = (vmi.get("spec") or {}).get("livenessProbe")
    if probe is not None and probe.get("guestAgentPing") is None:
        return _forbidden(name, "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported")
    # Upstream looks for the condition, whatever its status.
    if condition(vmi, PAUSED) is not None:
        return vmi_conflict(name, "VMI is already paused")
    return None


def check_unpause_vm(vm: dict[str, Any] | None) -> errors.APIError | None:
    """Unpausing waits for a VM snapshot to finish (a VMI without a VM may always be unpaused)."""
    if vm is not None and (vm.get("status") or {}).get("snapshotInProgress") is not None:
        return vm_conflict(name_of(vm), SNAPSHOT_IN_PROGRESS)
    return None


def check_unpause(vmi: dict[str, Any]) -> errors.APIError | None:
    name = name_of(vmi)
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return vmi_conflict(name, VMI_NOT_RUNNING)
    if condition(vmi, PAUSED) is None:
        return vmi_conflict(name, VMI_NOT_PAUSED)
    return None


def check_freeze(vmi: dict[str, Any]) -> errors.APIError | None:
    return vmi_conflict(name_of(vmi), VM_NOT_RUNNING) if vmi_phase(vmi) != c.PHASE_RUNNING else None


def check_unfreeze(vmi: dict[str, Any]) -> errors.APIError | None:
    return vmi_conflict(name_of(vmi), VMI_NOT_RUNNING) if vmi_phase(vmi) != c.PHASE_RUNNING else None


def check_soft_reboot(vmi: dict[str, Any]) -> errors.APIError | None:
    name = name_of(vmi)
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return vmi_conflict(name, VM_NOT_RUNNING)
    if condition_true(vmi, PAUSED):
        return vmi_conflict(name, "VMI is paused")
    if condition(vmi, AGENT_CONNECTED) is None:
        acpi = get(vmi, "spec", "domain", "features", "acpi") or {}
        if acpi.get("enabled") is False:
            return vmi_conflict(name, "VMI neither have the agent connected nor the ACPI feature enabled")
    return None


def check_guest_agent(vmi: dict[str, Any]) -> errors.APIError | None:
    """guestosinfo (and userlist, filesystemlist) need a running VMI with its guest agent connected."""
    name = name_of(vmi)
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return vmi_conflict(name, VMI_NOT_RUNNING)
    if condition(vmi, AGENT_CONNECTED) is None:
        return vmi_conflict(name, GUEST_AGENT_MISSING)
    return None


def check_console(vmi: dict[str, Any]) -> errors.APIError | None:
    if _devices(vmi).get("autoattachSerialConsole") is False:
        return errors.bad_request("No serial consoles are present.")
    if vmi_phase(vmi) == c.PHASE_FAILED:
        return vmi_conflict(name_of(vmi), "VMI is in failed status")
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return errors.bad_request(VMI_NOT_RUNNING)
    return None


def check_vnc(vmi: dict[str, Any]) -> errors.APIError | None:
    if _devices(vmi).get("autoattachGraphicsDevice") is False:
        return errors.bad_request("No graphics devices are present.")
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return errors.bad_request(VMI_NOT_RUNNING)
    return None


def check_usbredir(vmi: dict[str, Any]) -> errors.APIError | None:
    if (vmi.get("spec") or {}).get("architecture") == "s390x":
        return vmi_conflict(name_of(vmi), "No USB support on s390x")
    if _devices(vmi).get("clientPassthrough") is None:
        return vmi_conflict(name_of(vmi), "Not configured with USB Redirection")
    if vmi_phase(vmi) != c.PHASE_RUNNING:
        return errors.bad_request(VMI_NOT_RUNNING)
    return None


def check_handler_reachable(vmi: dict[str, Any]) -> errors.APIError | None:
    """virt-handler serves a VMI only while it runs there (upstream getVirtHandlerConnForVMI)."""
    phase = vmi_phase(vmi)
    if phase not in (c.PHASE_RUNNING, c.PHASE_SCHEDULED):
        return errors.bad_request(
            f"Unable to connect to VirtualMachineInstance because phase is {phase} instead of "
            f"{c.PHASE_RUNNING} or {c.PHASE_SCHEDULED}"
        )
    return None


def reset_failure(vmi: dict[str, Any], error: errors.APIError, *, from_handler: bool = False) -> errors.APIError:
    """A failed reset as KubeVirt answers it: the reason a VMI not running gives, and a handler's failure as a 500."""
    message = error.message
    phase = vmi_phase(vmi)
    if phase != c.PHASE_RUNNING:
        message = f"Failed to reset non-running VMI with phase {phase}: {message}"
    if from_handler:
        return errors.internal(message)
    return errors.APIError(error.code, error.reason, message, details=error.details)
