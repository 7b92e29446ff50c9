"""The VMI status virt-handler derives from the guest agent: AgentConnected, AgentVersionNotSupported,
AccessCredentialsSynchronized, `guestOSInfo` and `fsFreezeStatus`. Pure. (The agent's NICs reach status.interfaces
through the launcher's interface join, launcher/interface_status.py.)

Upstream: pkg/virt-handler/vm.go (updateGuestAgentConditions, updateAccessCredentialConditions, the guestOSInfo
copy) and guestagent.go (isGuestAgentSupported). The launcher's status carries the agent channel's state and what
its poller learnt; nothing here talks to the agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

AGENT_CONNECTED: Final = "AgentConnected"
AGENT_UNSUPPORTED: Final = "AgentVersionNotSupported"
ACCESS_CREDENTIALS_SYNCHRONIZED: Final = "AccessCredentialsSynchronized"
ACCESS_CREDENTIALS_SYNC_SUCCESS: Final = "AccessCredentialsSyncSuccess"
ACCESS_CREDENTIALS_SYNC_FAILED: Final = "AccessCredentialsSyncFailed"

REQUIRED_COMMANDS: Final = (
    "guest-ping",
    "guest-get-time",
    "guest-info",
    "guest-shutdown",
    "guest-network-get-interfaces",
    "guest-get-fsinfo",
    "guest-get-host-name",
    "guest-get-users",
    "guest-get-timezone",
    "guest-get-osinfo",
)
SSH_COMMANDS: Final = (
    "guest-ssh-get-authorized-keys",
    "guest-ssh-add-authorized-keys",
    "guest-ssh-remove-authorized-keys",
)
PASSWORD_COMMANDS: Final = ("guest-set-user-password",)
EXEC_PROBE_COMMANDS: Final = ("guest-exec-status", "guest-exec")


@dataclass
class AgentStatus:
    """The status fields to write, those that end up as they are (not to be written), and the events to record."""

    changes: dict[str, Any] = field(default_factory=dict)
    unchanged: set[str] = field(default_factory=set)
    events: list[tuple[str, str, str]] = field(default_factory=list)


def unsupported_reason(vmi: Mapping[str, Any], commands: Sequence[Mapping[str, Any]]) -> str:
    """Why this agent cannot serve the VMI (isGuestAgentSupported); empty when it can."""
    enabled = {str(c.get("name")) for c in commands if c.get("enabled")}
    spec = vmi.get("spec") or {}
    if not set(REQUIRED_COMMANDS) <= enabled:
        return "This guest agent doesn't support required basic commands"
    credentials = spec.get("accessCredentials") or []
    needs_ssh = any(
        ((c.get("sshPublicKey") or {}).get("propagationMethod") or {}).get("qemuGuestAgent") is not None
        for c in credentials
    )
    needs_password = any(
        ((c.get("userPassword") or {}).get("propagationMethod") or {}).get("qemuGuestAgent") is not None
        for c in credentials
    )
    if needs_ssh and not set(SSH_COMMANDS) <= enabled:
        return "This guest agent doesn't support required public key commands"
    if needs_password and not set(PASSWORD_COMMANDS) <= enabled:
        return "This guest agent doesn't support required password commands"
    probes = (spec.get("readinessProbe") or {}, spec.get("livenessProbe") or {})
    if any(p.get("exec") is not None for p in probes) and not set(EXEC_PROBE_COMMANDS) <= enabled:
        return "This guest agent doesn't support required exec probe commands"
    return ""


def _without(conditions: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for c in conditions if c.get("type") != kind]


def _has(conditions: list[dict[str, Any]], kind: str) -> bool:
    return any(c.get("type") == kind for c in conditions)


def _agent_conditions(
    vmi: Mapping[str, Any], conditions: list[dict[str, Any]], agent: Mapping[str, Any], now: str
) -> list[dict[str, Any]]:
    if not agent.get("connected"):
        return _without(conditions, AGENT_CONNECTED)
    if not _has(conditions, AGENT_CONNECTED):
        conditions = [
            *conditions,
            {"type": AGENT_CONNECTED, "status": "True", "lastProbeTime": now, "lastTransitionTime": None},
        ]
    commands = agent.get("supportedCommands") or []
    # Until the poller has asked guest-info there is nothing to judge the agent by.
    if not commands:
        return conditions
    reason = unsupported_reason(vmi, commands)
    if not reason:
        return _without(conditions, AGENT_UNSUPPORTED)
    if _has(conditions, AGENT_UNSUPPORTED):
        return conditions
    unsupported = {
        "type": AGENT_UNSUPPORTED,
        "status": "True",
        "reason": reason,
        "lastProbeTime": now,
        "lastTransitionTime": None,
    }
    return [*conditions, unsupported]


def _credential_conditions(
    conditions: list[dict[str, Any]], result: Mapping[str, Any], now: str, events: list[tuple[str, str, str]]
) -> list[dict[str, Any]]:
    status = "True" if result.get("succeeded") else "False"
    message = str(result.get("message") or "")
    existing = next((c for c in conditions if c.get("type") == ACCESS_CREDENTIALS_SYNCHRONIZED), None)
    if existing is not None and existing.get("status") == status and (existing.get("message") or "") == message:
        return conditions
    condition: dict[str, Any] = {
        "type": ACCESS_CREDENTIALS_SYNCHRONIZED,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if message:
        condition["message"] = message
    if status == "True":
        text = f"Access credentials sync successful: {message}" if message else "Access credentials sync successful."
        events.append(("Normal", ACCESS_CREDENTIALS_SYNC_SUCCESS, text))
    else:
        events.append(("Warning", ACCESS_CREDENTIALS_SYNC_FAILED, f"Access credentials sync failed: {message}"))
    return [*_without(conditions, ACCESS_CREDENTIALS_SYNCHRONIZED), condition]


def agent_status(
    vmi: Mapping[str, Any], changes: Mapping[str, Any], launcher: Mapping[str, Any] | None, now: str
) -> AgentStatus:
    """The agent-derived fields on top of `changes` (the other status fields this sync writes).

    `launcher` is the launcher's status; None when it could not be asked, which leaves everything as it is.
    """
    result = AgentStatus()
    if launcher is None:
        return result
    current = vmi.get("status") or {}
    base = list(changes.get("conditions", current.get("conditions") or []))
    agent: Mapping[str, Any] = launcher.get("guestAgent") or {}
    conditions = _agent_conditions(vmi, base, agent, now)
    if launcher.get("accessCredential") is not None:
        conditions = _credential_conditions(conditions, launcher["accessCredential"], now, result.events)
    _set(result, current, "conditions", conditions, current.get("conditions") or [])
    os_info = agent.get("osInfo") or {}
    if os_info.get("name") and (current.get("guestOSInfo") or {}).get("name") != os_info["name"]:
        result.changes["guestOSInfo"] = dict(os_info)
    # "frozen" while the launcher holds the guest's filesystems frozen; thawed is no field (updateFSFreezeStatus).
    frozen = str(agent.get("fsFreezeStatus") or "")
    if frozen != str(current.get("fsFreezeStatus") or ""):
        result.changes["fsFreezeStatus"] = frozen or None
    return result


def _set(result: AgentStatus, current: Mapping[str, Any], key: str, value: Any, existing: Any) -> None:
    if value != existing:
        result.changes[key] = value
    else:
        result.unchanged.add(key)
