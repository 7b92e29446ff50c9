"""A guest's panic, as libvirt notes it in QEMU's log and as KubeVirt's launcher reports it to virt-handler.

When QEMU reports GUEST_PANICKED with details (a Windows bugcheck through Hyper-V's crash MSRs, s390's), libvirt
appends "…: panic hyper-v: arg1='0x7e', arg2='0x…', …" to the domain's log. A Linux guest's pvpanic gives no details,
so there is no such line and the report says so.
"""

from __future__ import annotations

import re
from typing import Any

_PANIC_LINE = re.compile(r"panic\s+(\S+):\s*(.*)")
_ARG = re.compile(r"""arg(\d+)=['"]?(0x[0-9a-fA-F]+)['"]?""")
HYPERV = "hyper-v"
# virDomainEventCrashedDetailType: a panic that stops the guest, and one kdump recovers from (the guest reboots).
PANICKED, CRASHLOADED = 0, 1


def panic_info(line: str) -> dict[str, Any] | None:
    """The panic's type and arguments (`arg1`…`arg5`, numbers) from one line of QEMU's log, or None."""
    matched = _PANIC_LINE.search(line)
    if matched is None:
        return None
    info: dict[str, Any] = {"type": matched.group(1)}
    for number, value in _ARG.findall(matched.group(2)):
        if 1 <= int(number) <= 5:
            info[f"arg{number}"] = int(value, 16)
    return info


def panic_message(info: dict[str, Any] | None) -> str:
    """KubeVirt's GuestPanicked event message (FormatGuestPanicInfo, or "details unavailable")."""
    if not info or not info.get("type"):
        return "GuestPanicked (details unavailable)"
    if info["type"] == HYPERV:
        return "GuestPanicked: " + ", ".join(f"'{hex(info.get(f'arg{n}', 0))}'" for n in range(1, 6))
    return f"GuestPanicked: type={info['type']}"


class GuestPanics:
    """The panics of this launcher's guest: how many, and what the last one's log line said."""

    def __init__(self) -> None:
        self.count = 0
        self.info: dict[str, Any] | None = None
        self._panicked = False

    def record(self, detail: int, info: dict[str, Any] | None) -> bool:
        """Count one crash event; False once a PANICKED one was counted (KubeVirt's GuestPanicHandled). Each
        CRASHLOADED one before counts: a guest kdump recovers reboots and may panic again."""
        if self._panicked:
            return False
        self._panicked = detail != CRASHLOADED
        self.count += 1
        self.info = info
        return True

    def status(self) -> dict[str, Any]:
        """For virt-handler's event and metric: count, message, type ("unknown" without details), bugcheck code."""
        info = self.info or {}
        arg1 = int(info.get("arg1", 0))
        return {
            "count": self.count,
            "message": panic_message(info),
            "type": info.get("type") or "unknown",
            "bugcheckCode": hex(arg1) if arg1 else "unknown",
        }
