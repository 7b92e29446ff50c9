"""The cyclic garbage collector's pace in the long-running components (API server, controllers, node agents).

Their heap is mostly API objects decoded from JSON: acyclic, freed by reference counting, and growing with the
cluster (the store, informer caches). CPython's collector walks every tracked object of a generation, so:
- at its default thresholds a young collection ran every 700 new containers, and decoding one launcher pod makes
  thousands: at 20 VMs/s the collector took 13–18 % of each component's CPU;
- a full collection walks the whole heap. With 8,000 VMs the API server's took 4.1 s, during which it answered
  nothing, and collected 488 objects.

So an object that survives two young collections is moved out of the collector's sight (`gc.freeze`), and the
whole heap is collected only once the frozen objects have doubled since the last full collection, as Go's
collector (GOGC=100) runs when the heap has doubled. A cycle that became garbage after it was frozen waits for that
collection: at most as much garbage as live data, never a leak without bound.
"""

from __future__ import annotations

import gc
from typing import Any

# A young collection every 50,000 new containers and a middle one every 5 of them: the middle one's pause is bounded
# by about 250,000 survivors (about 0.2 s here). The oldest generation is never collected by the count: see _Pacer.
THRESHOLDS = (50_000, 5, 2**30)
# A full collection once the frozen objects have grown this much, and not before there are this many of them.
GROWTH = 2.0
SMALLEST_BASELINE = 100_000


class _Pacer:
    """The gc callback that freezes survivors and asks for a full collection when the frozen heap has doubled."""

    def __init__(self, growth: float, smallest_baseline: int) -> None:
        self.growth = growth
        self.smallest_baseline = smallest_baseline
        self.baseline = max(gc.get_freeze_count(), smallest_baseline)
        self.full_collection_due = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop":
            return
        if info["generation"] == 2:
            gc.freeze()
            self.baseline = max(gc.get_freeze_count(), self.smallest_baseline)
            self.full_collection_due = False
            gc.set_threshold(*THRESHOLDS)
        elif info["generation"] == 1 and not self.full_collection_due:
            gc.freeze()
            if gc.get_freeze_count() > self.growth * self.baseline:
                # gc.collect() is refused inside a callback: give the frozen objects back to the oldest generation and
                # let the next collection the allocator starts be a full one (freezing zeroed the oldest generation's
                # count, which must exceed its threshold).
                gc.unfreeze()
                self.full_collection_due = True
                gc.set_threshold(THRESHOLDS[0], THRESHOLDS[1], -1)


def pace_garbage_collection(*, growth: float = GROWTH, smallest_baseline: int = SMALLEST_BASELINE) -> None:
    """Keep start-up's objects and every long-lived one out of young collections; collect everything rarely."""
    gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, _Pacer)]
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    gc.callbacks.append(_Pacer(growth, smallest_baseline))
