"""Preferences fill template fields the user left unset; they never conflict (pkg/instancetype/preference/apply)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pykubevirt.api.json_lookup import as_list, get

_AUTOATTACH = (
    ("preferredAutoattachGraphicsDevice", "autoattachGraphicsDevice"),
    ("preferredAutoattachMemBalloon", "autoattachMemBalloon"),
    ("preferredAutoattachPodInterface", "autoattachPodInterface"),
    ("preferredAutoattachSerialConsole", "autoattachSerialConsole"),
    ("preferredAutoattachInputDevice", "autoattachInputDevice"),
)
_DEVICE_FLAGS = (
    ("preferredUseVirtioTransitional", "useVirtioTransitional"),
    ("preferredBlockMultiQueue", "blockMultiQueue"),
    ("preferredNetworkInterfaceMultiQueue", "networkInterfaceMultiqueue"),
)
_FEATURES = (
    ("preferredApic", "apic"),
    ("preferredKvm", "kvm"),
    ("preferredPvspinlock", "pvspinlock"),
    ("preferredSmm", "smm"),
)


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """The dict at `parent[key]`, created when missing."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def apply_preference(pref: Mapping[str, Any] | None, spec: dict[str, Any], metadata: dict[str, Any]) -> None:
    """Preference Apply, in upstream's order."""
    if pref is None:
        return
    domain = _child(spec, "domain")
    features = as_list(get(pref, "cpu", "preferredCPUFeatures"))
    if features:
        cpu = _child(domain, "cpu")
        names = {get(f, "name") for f in as_list(cpu.get("features"))}
        cpu["features"] = as_list(cpu.get("features")) + [
            copy.deepcopy(f) for f in features if get(f, "name") not in names
        ]
    if isinstance(pref.get("devices"), Mapping):
        _devices(pref["devices"], spec, _child(domain, "devices"))
    if isinstance(pref.get("features"), Mapping):
        _features(pref["features"], _child(domain, "features"))
    if isinstance(pref.get("firmware"), Mapping):
        _firmware(pref["firmware"], _child(_child(domain, "firmware"), "bootloader"))
    machine_type = get(pref, "machine", "preferredMachineType")
    if machine_type:
        machine = _child(domain, "machine")
        if not machine.get("type"):
            machine["type"] = machine_type
    if isinstance(pref.get("clock"), Mapping):
        _clock(pref["clock"], _child(domain, "clock"))
    if not spec.get("subdomain") and pref.get("preferredSubdomain") is not None:
        spec["subdomain"] = pref["preferredSubdomain"]
    if (
        pref.get("preferredTerminationGracePeriodSeconds") is not None
        and spec.get("terminationGracePeriodSeconds") is None
    ):
        spec["terminationGracePeriodSeconds"] = pref["preferredTerminationGracePeriodSeconds"]
    if pref.get("preferredArchitecture") and not spec.get("architecture"):
        spec["architecture"] = pref["preferredArchitecture"]
    annotations = _child(metadata, "annotations")
    for key, value in (pref.get("annotations") or {}).items():
        annotations.setdefault(key, value)
    if pref.get("preferredLaunchSecurity") is not None and domain.get("launchSecurity") is None:
        domain["launchSecurity"] = copy.deepcopy(pref["preferredLaunchSecurity"])


def _devices(prefs: Mapping[str, Any], spec: Mapping[str, Any], devices: dict[str, Any]) -> None:
    for src, dst in _DEVICE_FLAGS:
        if prefs.get(src) is not None and devices.get(dst) is None:
            devices[dst] = prefs[src]
    if prefs.get("preferredDisableHotplug") is not None:
        devices["disableHotplug"] = prefs["preferredDisableHotplug"]
    sound = devices.get("sound")
    if prefs.get("preferredSoundModel") and isinstance(sound, dict) and not sound.get("model"):
        sound["model"] = prefs["preferredSoundModel"]
    for src, dst in (("preferredRng", "rng"), ("preferredTPM", "tpm")):
        if prefs.get(src) is not None and devices.get(dst) is None:
            devices[dst] = copy.deepcopy(prefs[src])
    if prefs.get("preferredVideoType") is not None:
        video = _child(devices, "video")
        if not video.get("type"):
            video["type"] = prefs["preferredVideoType"]
    for src, dst in _AUTOATTACH:
        if prefs.get(src) is not None and devices.get(dst) is None:
            devices[dst] = prefs[src]
    _disks(prefs, devices)
    _interfaces(prefs, spec, devices)
    for device in as_list(devices.get("inputs")):
        if isinstance(device, dict):
            if prefs.get("preferredInputBus") and not device.get("bus"):
                device["bus"] = prefs["preferredInputBus"]
            if prefs.get("preferredInputType") and not device.get("type"):
                device["type"] = prefs["preferredInputType"]
    model = prefs.get("preferredPanicDeviceModel")
    if model is not None:
        panic = as_list(devices.get("panicDevices"))
        if not panic:
            devices["panicDevices"] = [{"model": model}]
        for device in panic:
            if isinstance(device, dict) and device.get("model") is None:
                device["model"] = model


def _disks(prefs: Mapping[str, Any], devices: dict[str, Any]) -> None:
    for disk in as_list(devices.get("disks")):
        if not isinstance(disk, dict):
            continue
        if disk.get("disk") is None and disk.get("cdrom") is None and disk.get("lun") is None:
            disk["disk"] = {}
        if isinstance(disk.get("disk"), dict):
            target = disk["disk"]
            if prefs.get("preferredDiskBus") and not target.get("bus"):
                target["bus"] = prefs["preferredDiskBus"]
            if prefs.get("preferredDiskBlockSize") is not None and disk.get("blockSize") is None:
                disk["blockSize"] = copy.deepcopy(prefs["preferredDiskBlockSize"])
            if prefs.get("preferredDiskCache") and not disk.get("cache"):
                disk["cache"] = prefs["preferredDiskCache"]
            if prefs.get("preferredDiskIO") and not disk.get("io"):
                disk["io"] = prefs["preferredDiskIO"]
            if (
                prefs.get("preferredDiskDedicatedIoThread") is not None
                and disk.get("dedicatedIOThread") is None
                and target.get("bus") == "virtio"
            ):
                disk["dedicatedIOThread"] = prefs["preferredDiskDedicatedIoThread"]
        elif isinstance(disk.get("cdrom"), dict):
            if prefs.get("preferredCdromBus") and not disk["cdrom"].get("bus"):
                disk["cdrom"]["bus"] = prefs["preferredCdromBus"]
        elif isinstance(disk.get("lun"), dict):
            if prefs.get("preferredLunBus") and not disk["lun"].get("bus"):
                disk["lun"]["bus"] = prefs["preferredLunBus"]


def _interfaces(prefs: Mapping[str, Any], spec: Mapping[str, Any], devices: dict[str, Any]) -> None:
    pod_networks = {get(n, "name"): get(n, "pod") is not None for n in as_list(spec.get("networks"))}
    binding_keys = ("bridge", "masquerade", "sriov", "passtBinding", "slirp", "macvtap", "passt", "binding")
    for iface in as_list(devices.get("interfaces")):
        if not isinstance(iface, dict):
            continue
        if prefs.get("preferredInterfaceModel") and not iface.get("model"):
            iface["model"] = prefs["preferredInterfaceModel"]
        unbound = all(iface.get(key) is None for key in binding_keys)
        if prefs.get("preferredInterfaceMasquerade") is not None and unbound and pod_networks.get(iface.get("name")):
            iface["masquerade"] = copy.deepcopy(prefs["preferredInterfaceMasquerade"])


def _features(prefs: Mapping[str, Any], features: dict[str, Any]) -> None:
    # Upstream overwrites ACPI unconditionally: the VMI field is not a pointer, so "unset" cannot be told apart.
    if prefs.get("preferredAcpi") is not None:
        features["acpi"] = copy.deepcopy(prefs["preferredAcpi"])
    if prefs.get("preferredHyperv") is not None:
        hyperv = _child(features, "hyperv")
        for key, value in prefs["preferredHyperv"].items():
            if value is not None and hyperv.get(key) is None:
                hyperv[key] = copy.deepcopy(value)
    for src, dst in _FEATURES:
        if prefs.get(src) is not None and features.get(dst) is None:
            features[dst] = copy.deepcopy(prefs[src])


def _firmware(prefs: Mapping[str, Any], bootloader: dict[str, Any]) -> None:
    if prefs.get("preferredUseBios") is True and bootloader.get("bios") is None and bootloader.get("efi") is None:
        bootloader["bios"] = {}
    bios = bootloader.get("bios")
    if prefs.get("preferredUseBiosSerial") is not None and isinstance(bios, dict) and bios.get("useSerial") is None:
        bios["useSerial"] = prefs["preferredUseBiosSerial"]
    if bootloader.get("efi") is None and bootloader.get("bios") is None and prefs.get("preferredEfi") is not None:
        bootloader["efi"] = copy.deepcopy(prefs["preferredEfi"])
        return
    if prefs.get("preferredUseEfi") is True and bootloader.get("efi") is None and bootloader.get("bios") is None:
        bootloader["efi"] = {}
    efi = bootloader.get("efi")
    if prefs.get("preferredUseSecureBoot") is not None and isinstance(efi, dict) and efi.get("secureBoot") is None:
        efi["secureBoot"] = prefs["preferredUseSecureBoot"]


def _clock(prefs: Mapping[str, Any], clock: dict[str, Any]) -> None:
    offset = prefs.get("preferredClockOffset")
    if offset is not None and clock.get("utc") is None and clock.get("timezone") is None:
        clock.update(copy.deepcopy(dict(offset)))
    if prefs.get("preferredTimer") is not None and clock.get("timer") is None:
        clock["timer"] = copy.deepcopy(prefs["preferredTimer"])
