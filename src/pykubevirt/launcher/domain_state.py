"""libvirt domain states and reasons, by the names KubeVirt reports them (virtwrap/api). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from pykubevirt.launcher.protocol import (
    ALIVE_STATES,
    BLOCKED,
    CRASHED,
    NO_STATE,
    PAUSED,
    PM_SUSPENDED,
    RUNNING,
    SHUTOFF,
    SHUTTING_DOWN,
    UNKNOWN_REASON,
    DomainStatus,
)

# virDomainState values.
STATES = {
    0: NO_STATE,
    1: RUNNING,
    2: BLOCKED,
    3: PAUSED,
    4: SHUTTING_DOWN,
    5: SHUTOFF,
    6: CRASHED,
    7: PM_SUSPENDED,
}

# Reasons per state, as virDomain<State>Reason enums number them.
_REASONS: dict[str, dict[int, str]] = {
    "NoState": {0: "Unknown"},
    "Running": {
        0: "Unknown",
        1: "Booted",
        2: "Migrated",
        3: "Restored",
        4: "FromSnapshot",
        5: "Unpaused",
        6: "MigrationCanceled",
        7: "SaveCanceled",
        8: "Wakeup",
        9: "Crashed",
        10: "PostcopyStarted",
    },
    "Blocked": {0: "Unknown"},
    "Paused": {
        0: "Unknown",
        1: "User",
        2: "Migration",
        3: "Save",
        4: "Dump",
        5: "IOError",
        6: "Watchdog",
        7: "FromSnapshot",
        8: "ShuttingDown",
        9: "Snapshot",
        10: "Crashed",
        11: "StartingUp",
        12: "PostcopyPaused",
        13: "PostcopyFailed",
    },
    "ShuttingDown": {0: "Unknown", 1: "User"},
    "Shutoff": {
        0: "Unknown",
        1: "Shutdown",
        2: "Destroyed",
        3: "Crashed",
        4: "Migrated",
        5: "Saved",
        6: "Failed",
        7: "FromSnapshot",
        8: "Daemon",
    },
    "Crashed": {0: "Unknown", 1: "Panicked"},
    "PMSuspended": {0: "Unknown"},
}


@dataclass(frozen=True, slots=True)
class DomainState:
    state: str
    reason: str

    @property
    def alive(self) -> bool:
        """Not shut off, not crashed, not unknown (KubeVirt's domainAlive)."""
        return self.state in ALIVE_STATES

    def to_status(self, *, defined: bool, name: str) -> DomainStatus:
        return {"state": self.state, "reason": self.reason, "defined": defined, "name": name}


def from_libvirt(state: int, reason: int) -> DomainState:
    name = STATES.get(state, NO_STATE)
    return DomainState(name, _REASONS.get(name, {}).get(reason, UNKNOWN_REASON))


# virDomainEventType values and the state each one leaves the domain in, for logging lifecycle events.
EVENTS = {
    0: "Defined",
    1: "Undefined",
    2: "Started",
    3: "Suspended",
    4: "Resumed",
    5: "Stopped",
    6: "Shutdown",
    7: "PMSuspended",
    8: "Crashed",
}
