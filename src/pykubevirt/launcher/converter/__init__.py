"""VMI → libvirt domain XML, KubeVirt's converter as a pure function (no I/O, no libvirt import).

The VMI is a plain dict already through `pykubevirt.admission.defaults.mutate_vmi`; everything about the host
(directories, prepared disks, emulation, network mode) comes in through a ConverterContext.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.launcher.converter.context import SMBIOS, ConversionError, ConverterContext, NetworkMode
from pykubevirt.launcher.converter.domain import build_domain, domain_name
from pykubevirt.launcher.converter.xml import to_string

__all__ = ["SMBIOS", "ConversionError", "ConverterContext", "NetworkMode", "convert", "domain_name"]


def convert(vmi: dict[str, Any], ctx: ConverterContext) -> str:
    """The domain XML for `vmi`; raises ConversionError when the VMI asks for something that cannot be expressed."""
    return to_string(build_domain(vmi, ctx))
