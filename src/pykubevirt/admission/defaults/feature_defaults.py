"""Feature and timer defaults: present features are enabled, ACPI on (off on s390x), Hyper-V dependencies (§4.1)."""

from __future__ import annotations

from typing import Any

from pykubevirt.admission.defaults.common import dicts, obj, truthy_state
from pykubevirt.api.json_lookup import get

HYPERV_PLAIN_FEATURES = (
    "relaxed",
    "vapic",
    "vpindex",
    "runtime",
    "synic",
    "reset",
    "frequencies",
    "reenlightenment",
    "ipi",
    "evmcs",
)
TIMERS = ("hpet", "kvm", "pit", "rtc", "hyperv")
SPINLOCK_RETRIES = 4096
HYPERV_PATH = "spec.domain.features.hyperv"
# Leaves first: enabling synictimer's requirement (synic) must happen before synic's own check.
HYPERV_REQUIREMENTS = (
    ("evmcs", "vapic"),
    ("ipi", "vpindex"),
    ("tlbflush", "vpindex"),
    ("synictimer", "synic"),
    ("synic", "vpindex"),
)
VMX_FEATURE = "vmx"
REQUIRE_POLICY = "require"


def _enable(state: Any) -> None:
    """A present FeatureState with no `enabled` becomes enabled."""
    if isinstance(state, dict) and state.get("enabled") is None:
        state["enabled"] = True


def set_s390x_features(spec: dict[str, Any]) -> None:
    """s390x has no ACPI, so it is off unless the user says otherwise (runs before the generic defaults)."""
    domain = obj(spec, "domain")
    if domain is None:
        return
    features = domain.get("features")
    if features is None:
        domain["features"] = {"acpi": {"enabled": False}}
        return
    acpi = obj(features, "acpi") if isinstance(features, dict) else None
    if acpi is not None and acpi.get("enabled") is None:
        acpi["enabled"] = False


def _set_hyperv_defaults(hyperv: dict[str, Any]) -> None:
    for name in HYPERV_PLAIN_FEATURES:
        _enable(hyperv.get(name))
    spinlocks = hyperv.get("spinlocks")
    if isinstance(spinlocks, dict):
        _enable(spinlocks)
        if spinlocks.get("enabled") is True and spinlocks.get("spinlocks") is None:
            spinlocks["spinlocks"] = SPINLOCK_RETRIES
    synictimer = hyperv.get("synictimer")
    if isinstance(synictimer, dict):
        _enable(synictimer)
        _enable(synictimer.get("direct"))
    _enable(hyperv.get("vendorid"))
    tlbflush = hyperv.get("tlbflush")
    if isinstance(tlbflush, dict):
        _enable(tlbflush)
        _enable(tlbflush.get("direct"))
        _enable(tlbflush.get("extended"))


def set_feature_defaults(spec: dict[str, Any]) -> None:
    """`features: {}`, ACPI enabled, and every present feature, timer and feature-state toggle enabled."""
    domain = obj(spec, "domain")
    if domain is None:
        return
    features = obj(domain, "features")
    if features is not None:
        acpi = obj(features, "acpi")
        _enable(acpi)
        for name in ("apic", "smm", "pvspinlock"):
            _enable(features.get(name))
        hyperv = features.get("hyperv")
        if isinstance(hyperv, dict):
            _set_hyperv_defaults(hyperv)
    timer = get(domain, "clock", "timer")
    if isinstance(timer, dict):
        for name in TIMERS:
            _enable(timer.get(name))
    devices = domain.get("devices")
    if isinstance(devices, dict):
        for disk in dicts(devices.get("disks")):
            _enable(get(disk, "blockSize", "matchVolume"))
        for gpu in dicts(devices.get("gpus")):
            _enable(get(gpu, "virtualGPUOptions", "display", "ramFB"))


def _set_vmx_requirement(spec: dict[str, Any]) -> None:
    domain = obj(spec, "domain")
    cpu = obj(domain, "cpu") if domain is not None else None
    if cpu is None:
        return
    wanted = {"name": VMX_FEATURE, "policy": REQUIRE_POLICY}
    features = cpu.get("features")
    if not isinstance(features, list) or not features:
        cpu["features"] = [wanted]
        return
    for feature in dicts(features):
        if feature.get("name") == VMX_FEATURE:
            feature["policy"] = REQUIRE_POLICY
            return
    features.append(wanted)


def set_hyperv_dependencies(spec: dict[str, Any]) -> str | None:
    """Enable what enabled Hyper-V features need; stop at the first requirement the user disabled.

    Returns that conflict's message (validation rejects it later); EVMCS also requires the vmx CPU feature.
    """
    hyperv = get(spec, "domain", "features", "hyperv")
    if not isinstance(hyperv, dict):
        return None
    for feature, required in HYPERV_REQUIREMENTS:
        if not truthy_state(hyperv.get(feature)):
            continue
        requirement = hyperv.get(required)
        if requirement is None:
            hyperv[required] = {"enabled": True}
        elif isinstance(requirement, dict) and requirement.get("enabled") is None:
            requirement["enabled"] = True
        elif not truthy_state(requirement):
            return f"'{HYPERV_PATH}.{feature}' requires '{HYPERV_PATH}.{required}', which was disabled."
    evmcs = hyperv.get("evmcs")
    if isinstance(evmcs, dict) and evmcs.get("enabled") in (None, True):
        _set_vmx_requirement(spec)
    return None
