"""Small helpers the validators share: reading plain dicts the way Go reads typed structs, and k8s name checks."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pykubevirt.api.json_lookup import as_int, as_map, get, parse_quantity
from pykubevirt.api.quantity import Quantity

# Type of a cause that upstream answers with a plain error (HTTP 400, message only) instead of a 422 with causes.
REQUEST_ERROR = "BadRequest"

_PORT_NAME_CHARSET_RE = re.compile(r"^[-a-z0-9]+$")
_PCI_ADDRESS_RE = re.compile(r"^([\da-fA-F]{4}):([\da-fA-F]{2}):([\da-fA-F]{2})\.([0-7])$")
_HEX = set("0123456789abcdefABCDEF")


def is_true(value: Any) -> bool:
    return value is True


def go_list(values: Iterable[Any]) -> str:
    """Go's `%v` of a slice: `[a b c]`."""
    return "[" + " ".join(str(v) for v in values) + "]"


def zero() -> Quantity:
    return Quantity(0)


def resource(spec: Mapping[str, Any], kind: str, name: str) -> Quantity:
    """`spec.domain.resources.<kind>.<name>` as Go's `ResourceList.Memory()`/`Cpu()`: zero when absent."""
    return parse_quantity(get(spec, "domain", "resources", kind, name)) or zero()


def int_value(q: Quantity) -> int:
    """`Quantity.Value()`: the integer value rounded away from zero."""
    v = q.value
    magnitude = -(-abs(v.numerator) // v.denominator)
    return magnitude if v >= 0 else -magnitude


def vcpus(cpu: Any) -> int:
    """hwutil.GetNumberOfVCPUs: product of the set topology fields, zero when none is set."""
    cpu = as_map(cpu)
    count = as_int(cpu.get("cores"))
    for key in ("sockets", "threads"):
        n = as_int(cpu.get(key))
        if n:
            count = n if count == 0 else count * n
    return count


def is_valid_port_name(name: str) -> bool:
    """validation.IsValidPortName returns no error."""
    return (
        len(name) <= 15
        and bool(_PORT_NAME_CHARSET_RE.match(name))
        and any("a" <= c <= "z" for c in name)
        and "--" not in name
        and not name.startswith("-")
        and not name.endswith("-")
    )


def is_pci_address(value: str) -> bool:
    return bool(_PCI_ADDRESS_RE.match(value))


def parse_mac(value: str) -> int | None:
    """The number of octets Go's net.ParseMAC reads from `value`, or None when it fails."""
    if len(value) < 14:
        return None
    if value[2] in ":-":
        if (len(value) + 1) % 3 != 0:
            return None
        n = (len(value) + 1) // 3
        sep = value[2]
        for i in range(n):
            octet = value[3 * i : 3 * i + 2]
            if len(octet) != 2 or not set(octet) <= _HEX:
                return None
            if i < n - 1 and value[3 * i + 2] != sep:
                return None
    elif value[4] == ".":
        if (len(value) + 1) % 5 != 0:
            return None
        n = 2 * (len(value) + 1) // 5
        for i in range(n // 2):
            group = value[5 * i : 5 * i + 4]
            if len(group) != 4 or not set(group) <= _HEX:
                return None
            if i < n // 2 - 1 and value[5 * i + 4] != ".":
                return None
    else:
        return None
    return n if n in (6, 8, 20) else None


def parse_ip(value: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """Go's net.ParseIP: dotted IPv4 or IPv6 without a zone."""
    if "%" in value:
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


def is_ipv4(value: str) -> bool:
    """`net.ParseIP(value).To4() != nil`: plain IPv4 or an IPv4-mapped IPv6 address."""
    ip = parse_ip(value)
    if isinstance(ip, ipaddress.IPv4Address):
        return True
    return isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None
