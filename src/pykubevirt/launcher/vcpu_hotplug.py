"""vCPU hotplug on the running domain: as many vCPUs enabled as the VMI's sockets × cores × threads.

Upstream: pkg/virt-launcher/virtwrap/manager.go (UpdateVCPUs). The domain was defined with `maxSockets` sockets and
only the requested vCPUs enabled (converter/cpu.py); after a hotplug migration the target's virt-handler asks for
the new count and libvirt plugs the missing vCPUs (QEMU's device_add of a CPU, announced to the guest by ACPI).
"""

from __future__ import annotations

from typing import Any

import libvirt

from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.domain_manager import DomainManager


def requested_vcpus(vmi: v.Obj) -> int:
    """The vCPUs the VMI asks for now (its topology; the maximum is fixed by maxSockets at start)."""
    return v.topology(vmi).vcpus


def _flags(domain: Any) -> int:
    # KubeVirt changes the live guest and its persistent definition; a transient domain has only the live one.
    return int(libvirt.VIR_DOMAIN_AFFECT_LIVE | (libvirt.VIR_DOMAIN_AFFECT_CONFIG if domain.isPersistent() else 0))


async def sync_vcpus(domain: DomainManager, vmi: v.Obj) -> int:
    """Enable the requested vCPUs in the running domain; returns the count asked for."""
    count = requested_vcpus(vmi)
    if not await domain.act(lambda d: d.setVcpusFlags(count, _flags(d))):
        raise RuntimeError("the domain is not running; no vCPU can be plugged")
    return count
