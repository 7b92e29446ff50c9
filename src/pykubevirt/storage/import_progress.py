"""Import progress between the importer and the DataVolume controller, as CDI's `kubevirt_cdi_import_progress_total`.

CDI's importer exports the counter on a metrics port the controller scrapes; an importer pod of the embedded cluster
runs as a host process without a port of its own, so it prints the same metric line to its log instead, and the
controller reads the log's tail through `pods/log` with CDI's own regular expression. The importer's last
`Unable to process data: …` line is what a failed attempt reports, as CDI's termination message.
"""

from __future__ import annotations

import re
import sys
import threading
from typing import TextIO

METRIC = "kubevirt_cdi_import_progress_total"
FAILURE_PREFIX = "Unable to process data: "
# A failure CDI does not retry (its importer's checksum check): the DataVolume fails.
CHECKSUM_MISMATCH = "checksum mismatch"
# How often the importer prints a changed value (twice as often as CDI's 1 s ticker: the log is polled, not scraped).
REPORT_INTERVAL_SECONDS = 0.5
# qemu-img convert -p (cdi:pkg/image/qemu.go reportProgress).
QEMU_PROGRESS = re.compile(r"\((\d?\d?\d\.\d\d)/100%\)")


def metric_line(owner_uid: str, percent: float) -> str:
    return f'{METRIC}{{ownerUID="{owner_uid}"}} {percent:.2f}'


def progress_from_log(text: str, owner_uid: str) -> str | None:
    """The last reported progress, formatted as CDI's controller does (`45.12%`), or None when there is none."""
    pattern = re.compile(
        r"(kubevirt_cdi_import_progress_total|kubevirt_cdi_clone_progress_total)\{ownerUID=\""
        + re.escape(owner_uid)
        + r"\"\} (\d{1,3}\.?\d*)"
    )
    found = pattern.findall(text)
    return f"{float(found[-1][1]):.2f}%" if found else None


def upload_server_url(text: str) -> str | None:
    """Where the upload server of this log listens, once it does."""
    found = re.findall(r"Upload server listening on (http://\S+)", text)
    return found[-1] if found else None


def failure_from_log(text: str) -> str | None:
    """The message of the importer's last failed attempt, if its log ends with one."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(FAILURE_PREFIX):
            return line
        if line.startswith(METRIC):
            return None  # a later attempt is under way
    return None


class ProgressReporter:
    """A monotonic 0–100 counter, printed at most once a second when it changed, from a background thread."""

    def __init__(self, owner_uid: str, out: TextIO | None = None) -> None:
        self.owner_uid = owner_uid
        self.out = out if out is not None else sys.stdout
        self.value = 0.0
        self._printed = -1.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="import-progress", daemon=True)

    def __enter__(self) -> ProgressReporter:
        self._print()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._print()

    def set(self, percent: float) -> None:
        """Raise the counter (it never goes down, as a Prometheus counter)."""
        with self._lock:
            self.value = max(self.value, min(percent, 100.0))

    def _print(self) -> None:
        with self._lock:
            value = self.value
        if value != self._printed:
            print(metric_line(self.owner_uid, value), file=self.out, flush=True)
            self._printed = value

    def _loop(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL_SECONDS):
            self._print()
