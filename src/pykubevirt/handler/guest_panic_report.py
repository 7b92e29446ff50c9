"""virt-handler's report of a guest's panic: KubeVirt's `GuestPanicked` warning event and its
`kubevirt_vmi_guest_os_panic_total` counter, once for each panic the launcher counted."""

from __future__ import annotations

from prometheus_client import Counter

from pykubevirt.client.api import Object
from pykubevirt.client.events import WARNING, EventRecorder
from pykubevirt.launcher.protocol import Status

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
        # vmi uid → the launcher's panic count already reported.
        self._reported: dict[str, int] = {}

    def observe(self, vmi: Object, status: Status | None) -> None:
        panic = status.get("guestPanic") if status is not None else None
        if not panic:
            return
        meta = vmi["metadata"]
        count = int(panic.get("count", 0))
        if count <= self._reported.get(meta["uid"], 0):
            return
        self._reported[meta["uid"]] = count
        self.recorder.event(vmi, WARNING, "GuestPanicked", str(panic.get("message") or "GuestPanicked"))
        labels = (meta["namespace"], meta["name"], str(panic.get("type") or "unknown"))
        GUEST_OS_PANICS.labels(*labels, str(panic.get("bugcheckCode") or "unknown")).inc()

    def forget(self, vmi_uid: str) -> None:
        self._reported.pop(vmi_uid, None)
