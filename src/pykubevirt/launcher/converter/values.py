"""Reading a VMI dict: nested lookups, KubeVirt's bool defaults, quantities, vCPU topology and virtio models."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pykubevirt.api.json_lookup import get
from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.launcher.converter.context import ConversionError

Obj = dict[str, Any]


def mapping(obj: Any, *keys: str) -> Obj:
    value = get(obj, *keys)
    return value if isinstance(value, dict) else {}


def items(obj: Any, *keys: str) -> list[Obj]:
    value = get(obj, *keys)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def flag(value: Any, default: bool) -> bool:
    """A *bool pointer: nil takes the default."""
    return default if value is None else bool(value)


def enabled(state: Any, default: bool = True) -> bool:
    """A FeatureState-like object's `enabled`, nil meaning `default`."""
    return flag(get(state, "enabled"), default)


def spec(vmi: Obj) -> Obj:
    return mapping(vmi, "spec")


def domain(vmi: Obj) -> Obj:
    return mapping(vmi, "spec", "domain")


def devices(vmi: Obj) -> Obj:
    return mapping(vmi, "spec", "domain", "devices")


def quantity(value: Any, what: str) -> Quantity:
    try:
        return Quantity.parse(value)
    except (QuantityError, TypeError, ValueError) as exc:
        raise ConversionError(f"{what} '{value}' is not a quantity") from exc


def to_bytes(value: Any, what: str) -> int:
    """KubeVirt's QuantityToByte: whole values as they are, fractional ones rounded up then minus one."""
    amount = quantity(value, what)
    frac = amount.value
    size = frac.numerator if frac.denominator == 1 else amount.ceil_int() - 1
    if size < 0:
        raise ConversionError(f"Memory size '{value}' must be greater than or equal to 0")
    return size


def ceil_value(value: Any, what: str) -> int:
    """resource.Quantity.Value(): the amount rounded up to a whole number."""
    return quantity(value, what).ceil_int()


def guest_memory(vmi: Obj) -> Any:
    """memory.guest, else requests.memory, else limits.memory (KubeVirt's GetVirtualMemory); None if none."""
    dom = domain(vmi)
    guest = get(dom, "memory", "guest")
    if guest is not None:
        return guest
    requests = mapping(dom, "resources", "requests")
    limits = mapping(dom, "resources", "limits")
    if "memory" not in requests and "memory" in limits:
        return limits["memory"]
    return requests.get("memory")


@dataclass(frozen=True, slots=True)
class Topology:
    sockets: int
    cores: int
    threads: int

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores * self.threads


def topology(vmi: Obj) -> Topology:
    """Sockets/cores/threads (1 when unset); with no topology at all, sockets come from the CPU limit or request."""
    dom = domain(vmi)
    cpu = get(dom, "cpu")
    cpu = cpu if isinstance(cpu, dict) else None
    sockets = int((cpu or {}).get("sockets") or 0)
    cores = int((cpu or {}).get("cores") or 0)
    threads = int((cpu or {}).get("threads") or 0)
    if cpu is None or (sockets == 0 and cores == 0 and threads == 0):
        limits = mapping(dom, "resources", "limits")
        requests = mapping(dom, "resources", "requests")
        if "cpu" in limits:
            sockets = ceil_value(limits["cpu"], "resources.limits.cpu")
        elif "cpu" in requests:
            sockets = ceil_value(requests["cpu"], "resources.requests.cpu")
    return Topology(sockets=sockets or 1, cores=cores or 1, threads=threads or 1)


def virtio_model(vmi: Obj) -> str:
    """The model name of virtio devices: non-transitional unless `useVirtioTransitional` (amd64 rule)."""
    return "virtio-transitional" if devices(vmi).get("useVirtioTransitional") else "virtio-non-transitional"


def is_efi(vmi: Obj) -> bool:
    return get(domain(vmi), "firmware", "bootloader", "efi") is not None


def is_high_performance(vmi: Obj) -> bool:
    """Dedicated CPUs, realtime or hugepages: KubeVirt then turns free page reporting off."""
    dom = domain(vmi)
    cpu = mapping(dom, "cpu")
    return (
        bool(cpu.get("dedicatedCpuPlacement"))
        or cpu.get("realtime") is not None
        or (get(dom, "memory", "hugepages") is not None)
    )


def pci_address(text: str, what: str) -> dict[str, str]:
    """`DDDD:BB:SS.F` → libvirt's `<address type="pci">` attributes."""
    parts = text.replace(".", ":").split(":")
    hex_digits = set("0123456789abcdefABCDEF")
    widths = (4, 2, 2, 1)
    if len(parts) != 4 or any(len(p) != w or not set(p) <= hex_digits for p, w in zip(parts, widths, strict=True)):
        raise ConversionError(f"failed to configure {what}: failed to parse pci address {text}")
    if parts[3] not in "01234567":
        raise ConversionError(f"failed to configure {what}: failed to parse pci address {text}")
    return {
        "type": "pci",
        "domain": "0x" + parts[0],
        "bus": "0x" + parts[1],
        "slot": "0x" + parts[2],
        "function": "0x" + parts[3],
    }
