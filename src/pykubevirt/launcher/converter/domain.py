"""The `<domain>` root: name, memory, OS, devices, clock, metadata, features, CPU, IO threads, reboot policy."""

from __future__ import annotations

from pykubevirt.api.json_lookup import get
from pykubevirt.launcher.converter import cpu, devices, disks, firmware, interfaces
from pykubevirt.launcher.converter import values as v
from pykubevirt.launcher.converter.context import ConversionError, ConverterContext
from pykubevirt.launcher.converter.xml import Element, element, on_off, sub, yes_no
from pykubevirt.launcher.protocol import domain_name as namespaced_domain_name

KUBEVIRT_METADATA_NS = "http://kubevirt.io"
REBOOT_POLICIES = {"Terminate": "destroy", "Reboot": "restart"}


def domain_name(vmi: v.Obj) -> str:
    """`<namespace>_<name>`, the name KubeVirt gives the libvirt domain."""
    meta = v.mapping(vmi, "metadata")
    return namespaced_domain_name(str(meta.get("namespace") or ""), str(meta.get("name")))


def _state(parent: Element, tag: str, source: object, nested: tuple[str, ...] = ()) -> None:
    """`<tag state="on|off">` when `source` is set, with the `nested` sub-features of it inside."""
    if isinstance(source, dict):
        el = sub(parent, tag, {"state": on_off(v.enabled(source))})
        for child in nested:
            _state(el, child, source.get(child))


def _hyperv(hyperv: v.Obj) -> Element:
    el = element("hyperv")
    _state(el, "relaxed", hyperv.get("relaxed"))
    _state(el, "vapic", hyperv.get("vapic"))
    spinlocks = hyperv.get("spinlocks")
    if isinstance(spinlocks, dict):
        sub(el, "spinlocks", {"state": on_off(v.enabled(spinlocks)), "retries": spinlocks.get("spinlocks")})
    _state(el, "vpindex", hyperv.get("vpindex"))
    _state(el, "runtime", hyperv.get("runtime"))
    _state(el, "synic", hyperv.get("synic"))
    _state(el, "stimer", hyperv.get("synictimer"), nested=("direct",))
    _state(el, "reset", hyperv.get("reset"))
    vendor = hyperv.get("vendorid")
    if isinstance(vendor, dict):
        sub(el, "vendor_id", {"state": on_off(v.enabled(vendor)), "value": vendor.get("vendorid") or None})
    _state(el, "frequencies", hyperv.get("frequencies"))
    _state(el, "reenlightenment", hyperv.get("reenlightenment"))
    _state(el, "tlbflush", hyperv.get("tlbflush"), nested=("direct", "extended"))
    _state(el, "ipi", hyperv.get("ipi"))
    _state(el, "evmcs", hyperv.get("evmcs"))
    return el


def build_features(vmi: v.Obj, ctx: ConverterContext) -> Element:
    features = element("features")
    source = get(v.domain(vmi), "features")
    if not isinstance(source, dict):
        return features
    if v.enabled(source.get("acpi")):
        sub(features, "acpi")
    if isinstance(source.get("apic"), dict) and v.enabled(source["apic"]):
        sub(features, "apic")
    hyperv = source.get("hyperv")
    passthrough = bool(get(source, "hypervPassthrough", "enabled"))
    # TCG cannot provide most enlightenments (QEMU 7.2 exits with "kernel doesn't allow setting HyperV VP_INDEX"),
    # so under emulation the block goes; KubeVirt would keep it and the guest would not start.
    if isinstance(hyperv, dict) and not ctx.use_emulation:
        features.append(_hyperv(hyperv))
    elif passthrough and not ctx.use_emulation:
        sub(features, "hyperv", {"mode": "passthrough"})
    if isinstance(source.get("smm"), dict) and v.enabled(source["smm"]):
        sub(features, "smm")
    kvm = source.get("kvm")
    if isinstance(kvm, dict):
        kvm_el = sub(features, "kvm")
        sub(kvm_el, "hidden", {"state": on_off(bool(kvm.get("hidden")))})
    pvspinlock = source.get("pvspinlock")
    if isinstance(pvspinlock, dict):
        on = v.enabled(pvspinlock)
        # Paravirtual spinlocks need KVM ("host doesn't support paravirtual spinlocks" under TCG); off is harmless.
        if not (on and ctx.use_emulation):
            sub(features, "pvspinlock", {"state": on_off(on)})
    # amd64: the VMware I/O port is never wanted.
    sub(features, "vmport", {"state": "off"})
    return features


def _present(timer: v.Obj) -> bool:
    """Timers say `present` where features say `enabled`; a listed timer is present unless set false."""
    return v.flag(timer.get("present"), True)


def build_clock(vmi: v.Obj) -> Element | None:
    clock = get(v.domain(vmi), "clock")
    if not isinstance(clock, dict):
        return None
    el = element("clock")
    utc = clock.get("utc")
    if isinstance(utc, dict):
        offset = utc.get("offsetSeconds")
        el.set("offset", "utc")
        el.set("adjustment", "reset" if offset is None else str(int(offset)))
    elif clock.get("timezone"):
        el.set("offset", "timezone")
        el.set("timezone", str(clock["timezone"]))
    timer = v.mapping(clock, "timer")
    rtc = timer.get("rtc")
    if isinstance(rtc, dict):
        sub(
            el,
            "timer",
            {
                "name": "rtc",
                "tickpolicy": rtc.get("tickPolicy") or None,
                "present": yes_no(_present(rtc)),
                "track": rtc.get("track") or None,
            },
        )
    pit = timer.get("pit")
    if isinstance(pit, dict):
        sub(el, "timer", {"name": "pit", "tickpolicy": pit.get("tickPolicy") or None, "present": yes_no(_present(pit))})
    for key, name in (("kvm", "kvmclock"), ("hpet", "hpet"), ("hyperv", "hypervclock")):
        source = timer.get(key)
        if isinstance(source, dict):
            tick = source.get("tickPolicy") if key == "hpet" else None
            sub(el, "timer", {"name": name, "tickpolicy": tick or None, "present": yes_no(_present(source))})
    return el


def build_metadata(vmi: v.Obj, ctx: ConverterContext) -> Element:
    """KubeVirt's own metadata: the VMI uid and the grace period the handler uses after a launcher restart."""
    metadata = element("metadata")
    kubevirt = sub(metadata, "kubevirt", {"xmlns": KUBEVIRT_METADATA_NS})
    sub(kubevirt, "uid", text=str(get(vmi, "metadata", "uid") or ""))
    grace = v.spec(vmi).get("terminationGracePeriodSeconds")
    grace_el = sub(kubevirt, "graceperiod")
    seconds = ctx.grace_period_seconds if grace is None else int(grace)
    sub(grace_el, "deletionGracePeriodSeconds", text=seconds)
    return metadata


def _check_supported(vmi: v.Obj, ctx: ConverterContext) -> None:
    if ctx.architecture != "x86_64":
        raise ConversionError(f"architecture {ctx.architecture} is not supported, only x86_64")
    arch = v.spec(vmi).get("architecture")
    if arch not in (None, "", "amd64", "x86_64"):
        raise ConversionError(f"guest architecture {arch} is not supported on an x86_64 host")
    dom = v.domain(vmi)
    if dom.get("launchSecurity") is not None:
        raise ConversionError("launchSecurity (SEV/TDX) is not supported")


def build_domain(vmi: v.Obj, ctx: ConverterContext) -> Element:
    """The whole domain element, children in KubeVirt's order."""
    _check_supported(vmi, ctx)
    root = element("domain", {"type": "qemu" if ctx.use_emulation else "kvm"})
    sub(root, "name", text=domain_name(vmi))
    mem = cpu.memory(vmi)
    sub(root, "memory", {"unit": "b"}, text=mem.boot)
    numa_kib: int | None = None
    if mem.maximum is not None:
        # libvirt 9.0 needs a slot count and a guest NUMA node before it accepts <maxMemory> ("At least one numa
        # node has to be configured when enabling memory hotplug"); one node holding all boot memory.
        sub(root, "maxMemory", {"unit": "b", "slots": cpu.MAX_MEMORY_SLOTS}, text=mem.maximum)
        numa_kib = mem.boot // 1024
    elif cpu.memfd_required(vmi):
        numa_kib = mem.boot // 1024
    backing = cpu.memory_backing(vmi)
    if backing is not None:
        root.append(backing)
    root.append(firmware.build_os(vmi, ctx))
    root.append(firmware.build_sysinfo(vmi, ctx))
    threads = disks.io_thread_plan(vmi)
    root.append(devices.build_devices(vmi, ctx, threads, interfaces.build_interfaces(vmi, ctx)))
    clock = build_clock(vmi)
    if clock is not None:
        root.append(clock)
    root.append(build_metadata(vmi, ctx))
    root.append(build_features(vmi, ctx))
    cpu_el, vcpu_el, vcpus_el = cpu.build_cpu(vmi, ctx, numa_kib)
    root.append(cpu_el)
    root.append(vcpu_el)
    if vcpus_el is not None:
        root.append(vcpus_el)
    cputune = cpu.build_cputune(vmi, ctx)
    if cputune is not None:
        # What the pod's cgroup cpuset imposes in KubeVirt: libvirt would otherwise give the emulator threads every
        # host CPU.
        vcpu_el.set("cpuset", ",".join(str(c) for c in sorted(ctx.pinned_cpus)))
        root.append(cputune)
    if threads.total:
        sub(root, "iothreads", text=threads.total)
    policy = v.domain(vmi).get("rebootPolicy")
    if policy in REBOOT_POLICIES:
        sub(root, "on_reboot", text=REBOOT_POLICIES[policy])
    return root
