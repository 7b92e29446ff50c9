"""The guest side of bench/migration.py: a 10 ms ticker on the serial console, an optional memory-dirtying loop, and
the pauses read from the ticker's lines.

Each tick prints its number and the guest's uptime (`/proc/uptime`, 10 ms resolution, read by the shell's own `read`:
no fork per tick). A host thread tails the console logs (source and target) and stamps each line's arrival. Two gaps:
- host: the longest wall-clock gap between consecutive ticks as they reach the host — what a user watching the console
  sees, downtime included, plus TCG's catch-up and the tail's own polling;
- guest: the longest gap in the guest's uptime between consecutive ticks: what the guest's own clock saw, without the
  console path and the host's tail. (Measured here it follows libvirt's downtime within about 0.1 s: TCG's virtual
  clock does not hide the stop-and-copy from the guest.)
libvirt's own `downtime` (job statistics: the source's stop to the target's resume) is the third figure.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

TICK = re.compile(rb"^tick (\d+) ([\d.]+)")
TICK_USLEEP = 10_000


def user_data(dirty_mib: int) -> str:
    """cloud-init user data: the ticker, and (dirty_mib > 0) a loop rewriting that much guest memory (tmpfs pages)."""
    ticker = f"(i=0; while :; do i=$((i+1)); read u r < /proc/uptime; echo tick $i $u; usleep {TICK_USLEEP}; done) &"
    lines = ["#cloud-config", "runcmd:", f"  - {ticker}"]
    if dirty_mib > 0:
        # /run is tmpfs in the demo guest: rewriting one file in place dirties the same pages over and over.
        dirty = f"(while :; do dd if=/dev/zero of=/run/dirty bs=1M count={dirty_mib} conv=notrunc 2>/dev/null; done) &"
        lines.append(f"  - {dirty}")
    return "\n".join(lines) + "\n"


class ConsoleTail(threading.Thread):
    """Host arrival times of tick lines in every console log `paths()` returns (globbed again as they appear)."""

    def __init__(self, paths: Callable[[], list[Path]]) -> None:
        super().__init__(daemon=True)
        self.paths = paths
        # (host wall time, tick number, guest uptime)
        self.ticks: list[tuple[float, int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        offsets: dict[Path, int] = {}
        known: list[Path] = []
        for round_ in itertools.count():
            if self.stop.is_set():
                return
            if round_ % 50 == 0:
                known = self.paths()
            now = time.time()
            for path in known:
                try:
                    with path.open("rb") as log_file:
                        log_file.seek(offsets.get(path, 0))
                        data = log_file.read()
                except OSError:
                    continue
                complete = data[: data.rfind(b"\n") + 1]
                offsets[path] = offsets.get(path, 0) + len(complete)
                for line in complete.splitlines():
                    match = TICK.search(line.strip())
                    if match:
                        self.ticks.append((now, int(match.group(1)), float(match.group(2))))
            time.sleep(0.005)

    def count_since(self, since: float) -> int:
        return sum(1 for t, _, _ in self.ticks if t >= since)

    def gaps(self, since: float, until: float) -> dict[str, float]:
        """The longest host-arrival and guest-uptime gaps between consecutive ticks seen in [since, until]."""
        first: dict[int, tuple[float, float]] = {}
        for host, number, uptime in self.ticks:
            if since <= host <= until and number not in first:
                first[number] = (host, uptime)
        ordered = sorted(first.items())
        host_gap = guest_gap = 0.0
        host_at = guest_at = since
        for (a, (ha, ua)), (b, (hb, ub)) in itertools.pairwise(ordered):
            if b == a + 1 and hb - ha > host_gap:
                host_gap, host_at = hb - ha, ha
            if b == a + 1 and ub - ua > guest_gap:
                guest_gap, guest_at = ub - ua, ha
        return {
            "host_gap_s": round(host_gap, 3),
            "guest_gap_s": round(guest_gap, 3),
            # When (host seconds after `since`) each gap began: at the switch-over, or during the copy.
            "host_gap_at_s": round(host_at - since, 2),
            "guest_gap_at_s": round(guest_at - since, 2),
            "ticks": len(ordered),
        }
