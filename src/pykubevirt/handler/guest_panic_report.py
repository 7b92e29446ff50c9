"""virt-handler's report of a guest's panic: KubeVirt's `GuestPanicked` warning event and its
`kubevirt_vmi_guest_os_panic_total` counter, once for each panic the launcher counted."""

from __future__ import annotations

import logging

from prometheus_client import Counter

from pykubevirt.client.api import Object
from pykubevirt.client.events import WARNING, EventRecorder
from pykubevirt.launcher.protocol import Status
from pykubevirt.log import object_fields

log = logging.getLogger("pykubevirt.handler")

# prometheus_client adds `_total` to a counter's name.
GUEST_OS_PANICS = Counter(
    "kubevirt_vmi_guest_os_panic",
    "Total number of guest OS panic events detected, partitioned by VMI and panic type.",
    ["namespace", "name", "type", "bugcheck_code"],
)


class GuestPanicReport:
    """Emits the event and counts the panic when a launcher's panic count grows past what this handler saw."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        # VMI key → (uid, the launcher's panic count already reported). Kept while the VMI exists, not only while its
        # launcher is watched: a failed VMI's launcher still answers, with the same count, until its pod goes.
        self._reported: dict[str, tuple[str, int]] = {}

    def observe(self, vmi: Object, status: Status | None) -> None:
        panic = status.get("guestPanic") if status is not None else None
        if not panic:
            return
        meta = vmi["metadata"]
        key, count = f"{meta['namespace']}/{meta['name']}", int(panic.get("count", 0))
        uid, reported = self._reported.get(key, ("", 0))
        reported = reported if uid == meta["uid"] else 0
        if count <= reported:
            return
        self._reported[key] = (meta["uid"], count)
        message = str(panic.get("message") or "GuestPanicked")
        log.warning("the guest panicked: %s", message, extra=object_fields(vmi))
        self.recorder.event(vmi, WARNING, "GuestPanicked", message)
        labels = (meta["namespace"], meta["name"], str(panic.get("type") or "unknown"))
        GUEST_OS_PANICS.labels(*labels, str(panic.get("bugcheckCode") or "unknown")).inc(count - reported)

    def forget(self, key: str) -> None:
        """The VMI is gone: a later one of the same name starts from no panic."""
        self._reported.pop(key, None)
