"""Device defaults: container-disk pull policy, the pod network, disks, inputs, watchdog and probes (§4.1)."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.defaults.common import MutationDenied, as_list, dicts, obj
from pykubevirt.config.cluster_config import ClusterConfig

DEFAULT_NETWORK_NAME = "default"
BRIDGE = "bridge"
MASQUERADE = "masquerade"
SLIRP = "slirp"
BRIDGE_NOT_ENABLED = "bridge interface is not enabled in kubevirt-config"
SLIRP_DEPRECATED = "slirp interface is deprecated as of v1.3"

DISK_TARGETS = ("disk", "cdrom", "lun")
BUS_SATA = "sata"
BUS_VIRTIO = "virtio"
INPUT_BUS_USB = "usb"
INPUT_TYPE_TABLET = "tablet"
WATCHDOG_ACTION_RESET = "reset"
TRAY_CLOSED = "closed"


def _devices(spec: dict[str, Any]) -> dict[str, Any] | None:
    domain = obj(spec, "domain")
    return obj(domain, "devices") if domain is not None else None


def set_default_pull_policies(spec: dict[str, Any]) -> None:
    """Always for `:latest` or an image with neither ':' nor '@', else IfNotPresent.

    Like KubeVirt, any ':' counts as a tag, so `registry:5000/image` gets IfNotPresent.
    """
    for volume in dicts(spec.get("volumes")):
        disk = volume.get("containerDisk")
        if not isinstance(disk, dict) or disk.get("imagePullPolicy"):
            continue
        image = str(disk.get("image") or "")
        if image.endswith(":latest") or not any(ch in image for ch in ":@"):
            disk["imagePullPolicy"] = "Always"
        else:
            disk["imagePullPolicy"] = "IfNotPresent"


def set_default_network_interface(spec: dict[str, Any], config: ClusterConfig) -> None:
    """Attach the pod network when no interface and no network is given and autoattachPodInterface is not false."""
    devices = _devices(spec)
    if devices is None or devices.get("autoattachPodInterface") is False:
        return
    if spec.get("networks") or devices.get("interfaces"):
        return
    kind = config.network_interface
    if kind == BRIDGE:
        if not config.permit_bridge_interface_on_pod_network:
            raise MutationDenied(BRIDGE_NOT_ENABLED)
        devices["interfaces"] = [{"name": DEFAULT_NETWORK_NAME, BRIDGE: {}}]
    elif kind == MASQUERADE:
        devices["interfaces"] = [{"name": DEFAULT_NETWORK_NAME, MASQUERADE: {}}]
    elif kind == SLIRP:
        raise MutationDenied(SLIRP_DEPRECATED)
    # An unknown configured type still gets the network, as upstream does; validation reports the gap.
    spec["networks"] = [{"name": DEFAULT_NETWORK_NAME, "pod": {}}]


def set_default_volume_disks(spec: dict[str, Any]) -> None:
    """Give every volume that no disk or filesystem uses a disk of its own name."""
    devices = _devices(spec)
    if devices is None:
        return
    used = {d.get("name") for d in dicts(devices.get("disks"))}
    used |= {f.get("name") for f in dicts(devices.get("filesystems"))}
    missing = [v.get("name", "") for v in dicts(spec.get("volumes")) if v.get("name", "") not in used]
    if not missing:
        return
    disks = as_list(devices.get("disks"))
    devices["disks"] = [*disks, *({"name": name} for name in missing)]


def set_disk_target_defaults(spec: dict[str, Any]) -> None:
    """A disk with no target becomes `disk: {}`; a cdrom is read-only with its tray closed."""
    devices = _devices(spec)
    if devices is None:
        return
    for disk in dicts(devices.get("disks")):
        if all(disk.get(target) is None for target in DISK_TARGETS):
            disk["disk"] = {}
        cdrom = disk.get("cdrom")
        if isinstance(cdrom, dict):
            if cdrom.get("readonly") is None:
                cdrom["readonly"] = True
            if not cdrom.get("tray"):
                cdrom["tray"] = TRAY_CLOSED


def set_default_disk_bus(spec: dict[str, Any], bus: str) -> None:
    devices = _devices(spec)
    if devices is None:
        return
    for disk in dicts(devices.get("disks")):
        for target in DISK_TARGETS:
            device = disk.get(target)
            if isinstance(device, dict) and not device.get("bus"):
                device["bus"] = bus


def set_input_defaults(spec: dict[str, Any]) -> None:
    devices = _devices(spec)
    if devices is None:
        return
    for device in dicts(devices.get("inputs")):
        if not device.get("bus"):
            device["bus"] = INPUT_BUS_USB
        if not device.get("type"):
            device["type"] = INPUT_TYPE_TABLET


def set_watchdog_defaults(spec: dict[str, Any], model: str) -> None:
    """An existing watchdog gets the architecture's model (`i6300esb` or `diag288`) with action reset."""
    devices = _devices(spec)
    watchdog = devices.get("watchdog") if devices is not None else None
    if not isinstance(watchdog, dict):
        return
    device = obj(watchdog, model)
    if device is not None and not device.get("action"):
        device["action"] = WATCHDOG_ACTION_RESET


def _at_least(probe: dict[str, Any], key: str, default: int) -> None:
    value = probe.get(key)
    # Non-integers are left for the schema check to reject.
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value < 1):
        probe[key] = default


def set_probe_defaults(spec: dict[str, Any]) -> None:
    for key in ("readinessProbe", "livenessProbe"):
        probe = spec.get(key)
        if not isinstance(probe, dict):
            continue
        _at_least(probe, "timeoutSeconds", 1)
        _at_least(probe, "periodSeconds", 10)
        _at_least(probe, "successThreshold", 1)
        _at_least(probe, "failureThreshold", 3)
