"""The `vmi.kubevirt.io/id` label value of a VMI's launcher pod (pkg/apimachinery CalculateVirtualMachineInstanceID):
what `virtctl expose` selects on, so it must stay a valid label value for any VMI name."""

from __future__ import annotations

import hashlib

MAX_LABEL_VALUE = 63


def vmi_id(name: str) -> str:
    """The name, or its first 54 characters + "-" + 8 hex of its SHA-1 when it is over 63."""
    if len(name) <= MAX_LABEL_VALUE:
        return name
    return f"{name[:54]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
