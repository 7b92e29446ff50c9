"""The cyclic garbage collector's pace in the long-running components (API server, controllers, node agents).

Their heap is mostly API objects decoded from JSON: acyclic, freed by reference counting, and growing with the
cluster (the store, informer caches). At CPython's default thresholds a young collection runs every 700 new
containers, and decoding one launcher pod makes thousands, so under `bench.control_plane` at 20 VMs/s the collector
took 13–18 % of each component's CPU. A collection's pause is what it must look at: the middle generation holds the
survivors of `threshold0 × threshold1` allocations, nearly all of them stored objects. At (50,000, 20) that was a
million objects, 0.2–0.7 s during which the API server answered nothing (the p99 of 8,000 VM starts at 50/s was
0.9–2 s); at (10,000, 10) it is at most 100,000, 15–45 ms, for the same CPU in all. Full collections, whose pause
grows with the whole heap (1.2 s for the API server at 8,000 VMs), still wait for as many allocations as before:
100 middle ones.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 100)


def pace_garbage_collection() -> None:
    """Keep what start-up made out of every later collection, and collect young objects far less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
