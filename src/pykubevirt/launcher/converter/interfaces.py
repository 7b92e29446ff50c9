"""`<interface>` elements for bridge and masquerade bindings (KubeVirt's tap attachment, or libvirt user networking)."""

from __future__ import annotations

import hashlib

from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import Element, element, sub

# The pod's primary interface gets this tap; secondary Multus networks get "tap" + a hash of the network name.
PRIMARY_TAP = "tap0"
HASHED_IFACE_LEN = 11
MAX_QUEUES = 256
TAP_BINDINGS = ("bridge", "masquerade")


def tap_name(network: v.Obj) -> str:
    """The tap device virt-launcher's network setup creates for this network (KubeVirt's hashed scheme)."""
    if _is_secondary(network):
        digest = hashlib.sha256(str(network.get("name")).encode()).hexdigest()
        return "tap" + digest[:HASHED_IFACE_LEN]
    return PRIMARY_TAP


def _is_secondary(network: v.Obj) -> bool:
    multus = network.get("multus")
    return isinstance(multus, dict) and not multus.get("default")


def _queues(vmi: v.Obj) -> int:
    if not v.devices(vmi).get("networkInterfaceMultiqueue"):
        return 0
    return min(v.topology(vmi).vcpus, MAX_QUEUES)


def _binding(iface: v.Obj) -> str:
    name = iface.get("name")
    for key in TAP_BINDINGS:
        if iface.get(key) is not None:
            return key
    # These need host devices, a passt process or a network binding plugin's sidecar, none of which exist here.
    if iface.get("sriov") is not None:
        raise ConversionError(f"interface {name}: SR-IOV interfaces are not supported")
    if any(iface.get(k) is not None for k in ("passtBinding", "passt", "binding", "slirp", "macvtap")):
        raise ConversionError(f"interface {name}: only bridge and masquerade bindings are supported")
    raise ConversionError(f"interface {name} has no supported binding method (bridge or masquerade)")


def build_interfaces(vmi: v.Obj, ctx: ConverterContext) -> list[Element]:
    networks = {str(n.get("name")): n for n in v.items(vmi, "spec", "networks")}
    model = v.virtio_model(vmi)
    queues = _queues(vmi)
    result: list[Element] = []
    for iface in v.items(v.devices(vmi), "interfaces"):
        name = str(iface.get("name"))
        if iface.get("state") == "absent":
            continue
        network = networks.get(name)
        if network is None:
            raise ConversionError(f"failed to find network {name}")
        _binding(iface)
        # User-mode networking needs no tap or bridge in a pod network namespace, which the embedded node lacks.
        user_mode = ctx.network_mode == "user" and not _is_secondary(network)
        el = element("interface")
        pci = iface.get("pciAddress")
        if pci:
            sub(el, "address", v.pci_address(str(pci), f"interface {name}"))
        el.set("type", "user" if user_mode else "ethernet")
        if not user_mode:
            # virt-launcher created this tap in the pod; libvirt must use it as is.
            sub(el, "target", {"dev": tap_name(network), "managed": "no"})
        iface_model = str(iface.get("model") or "virtio")
        sub(el, "model", {"type": model if iface_model == "virtio" else iface_model})
        mac = iface.get("macAddress") or ctx.interface_macs.get(name)
        if mac:
            sub(el, "mac", {"address": str(mac)})
        mtu = ctx.interface_mtus.get(name)
        if mtu and not user_mode:
            sub(el, "mtu", {"size": int(mtu)})
        boot_order = iface.get("bootOrder")
        if boot_order is not None:
            sub(el, "boot", {"order": int(boot_order)})
        if iface.get("state") == "down":
            sub(el, "link", {"state": "down"})
        sub(el, "alias", {"name": f"ua-{name}"})
        if iface_model == "virtio" and queues and not user_mode:
            # Multi-queue needs vhost-net on a tap; the user-mode (SLIRP) backend has a single queue.
            sub(el, "driver", {"name": "vhost", "queues": queues})
        if boot_order is None:
            # Without a boot order the NIC's PXE ROM is only start-up time and attack surface.
            sub(el, "rom", {"enabled": "no"})
        acpi_index = int(iface.get("acpiIndex") or 0)
        if acpi_index > 0:
            sub(el, "acpi", {"index": acpi_index})
        result.append(el)
    return result
