"""How large a claim must be to hold a VMI's memory dump: KubeVirt's CalcExpectedMemoryDumpSize and CDI's
GetSizeIncludingGivenOverhead, shared by virt-api's check and virtctl's `--create-claim`. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.quantity import MI, Quantity, QuantityFormat, parse_quantity

# Room for the dump's headers beyond the guest's memory.
DUMP_OVERHEAD = 100 * MI
# CDI's default filesystem overhead (storagetypes.DefaultFSOverhead), for a cluster without a CDIConfig.
DEFAULT_FS_OVERHEAD = "0.055"


def expected_dump_size(vmi: Mapping[str, Any]) -> Quantity:
    """The VMI's memory request plus 100Mi, in the request's format."""
    memory = (((vmi.get("spec") or {}).get("domain") or {}).get("resources") or {}).get("requests", {}).get("memory")
    # An absent request is ResourceList.Memory()'s zero quantity, which is BinarySI.
    requested = parse_quantity(memory) if memory is not None else Quantity(0, QuantityFormat.BINARY_SI)
    return Quantity(DUMP_OVERHEAD, requested.format) + requested


def size_with_overhead(size: Quantity, overhead: str = DEFAULT_FS_OVERHEAD) -> Quantity:
    """The size grown by the filesystem overhead, in float64 as Go computes it, rounded up to whole MiB (at least
    one); ValueError when the overhead is no number."""
    total = (1 + float(overhead)) * float(size.value)
    aligned = MI if total < MI else math.ceil(total / MI) * MI
    return Quantity(aligned, size.format)
