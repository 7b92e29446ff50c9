"""The cyclic garbage collector's pace in the long-running components (API server, controllers, node agents).

Their heap is mostly API objects decoded from JSON: acyclic, freed by reference counting, and growing with the
cluster (the store, informer caches). At CPython's default thresholds a young collection runs every 700 new
containers, and decoding one launcher pod makes thousands, so under `bench.control_plane` at 20 VMs/s the collector
took 13–18 % of each component's CPU, enough to put the control plane seconds behind. At these thresholds it runs
about a hundred times less often, still in time for the few real cycles (exceptions with their tracebacks, tasks).
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 10)


def pace_garbage_collection() -> None:
    """Keep what start-up made out of every later collection, and collect young objects far less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
