"""The virtual hardware of a domain besides its devices: resources, CPU, memory, machine, firmware, features, clock."""

from __future__ import annotations

from pykubevirt.api.kubevirt import plain_integer
from pykubevirt.api.schema import Schema, array, boolean, integer, map_of, obj, quantity, string


def _toggle(description: str) -> Schema:
    return obj({"enabled": boolean("Whether the feature is on; true when the block is present.")}, description)


RESOURCES: Schema = obj(
    {
        "limits": map_of(quantity(), "Upper bounds of the launcher pod's resources (cpu, memory…)."),
        "overcommitGuestOverhead": boolean("Leave the launcher's memory overhead out of the memory request."),
        "requests": map_of(quantity(), "Resources requested for the VMI (cpu, memory…); the pod adds its overhead."),
    },
    "Compute resources of the VMI, from which the launcher pod's resources are derived.",
)

CPU_FEATURE: Schema = obj(
    {
        "name": string("CPU feature name, e.g. vmx."),
        "policy": string("force, require (default), optional, disable or forbid."),
    },
    required=["name"],
)

NUMA: Schema = obj(
    {"guestMappingPassthrough": obj(description="Map the guest NUMA topology onto the host's.")},
    "Guest NUMA topology.",
)

REALTIME: Schema = obj(
    {"mask": string("vCPUs to run with real-time scheduling (libvirt vcpus syntax); all by default.")},
    "Tune the vCPUs for real-time workloads.",
)

CPU: Schema = obj(
    {
        "cores": integer("Cores per socket; 1 by default."),
        "dedicatedCpuPlacement": boolean("Pin each vCPU to a dedicated host CPU (needs a Guaranteed pod)."),
        "features": array(CPU_FEATURE, "CPU features to add to or remove from the model."),
        "isolateEmulatorThread": boolean("Give QEMU's emulator thread its own dedicated host CPU."),
        "maxSockets": integer("Upper bound of sockets for CPU hotplug."),
        "model": string("CPU model: host-model (default), host-passthrough or a named model."),
        "numa": NUMA,
        "realtime": REALTIME,
        "sockets": integer("Number of sockets; 1 by default."),
        "threads": integer("Threads per core; 1 by default."),
    },
    "The guest CPU: topology (sockets × cores × threads), model, features and pinning.",
)

HUGEPAGES: Schema = obj(
    {"pageSize": string("Huge page size backing the guest memory, e.g. 2Mi or 1Gi.")},
    "Back the guest memory with huge pages.",
)

MEMORY: Schema = obj(
    {
        "guest": quantity("Memory the guest sees; defaults to resources.requests.memory."),
        "hugepages": HUGEPAGES,
        "maxGuest": quantity("Upper bound of guest memory for memory hotplug."),
        "reservedOverhead": obj(
            {
                "addedOverhead": quantity("Memory added to the computed launcher overhead."),
                "memLock": string(
                    "Whether the guest memory must be locked (memlock rlimit).", enum=["NotRequired", "Required"]
                ),
            },
            "Extra launcher memory overhead to reserve.",
        ),
    },
    "Guest memory: size, huge pages and hotplug limit.",
)

MACHINE: Schema = obj(
    {"type": string("QEMU machine type, e.g. q35; the cluster default for the architecture if empty.")},
    "The emulated machine.",
)

EFI: Schema = obj(
    {
        "persistent": boolean("Keep the EFI variable store across restarts (needs backend storage)."),
        "secureBoot": boolean("Enable Secure Boot; true by default with EFI, needs SMM."),
    },
    "Boot with UEFI (OVMF).",
)

BIOS: Schema = obj(
    {"useSerial": boolean("Send SeaBIOS output to the serial console.")},
    "Boot with the legacy BIOS (SeaBIOS).",
)

FIRMWARE: Schema = obj(
    {
        "acpi": obj(
            {
                "msdmNameRef": string("Volume (secret) providing the ACPI MSDM table."),
                "slicNameRef": string("Volume (secret) providing the ACPI SLIC table."),
            },
            "ACPI tables handed to the guest.",
        ),
        "bootloader": obj({"bios": BIOS, "efi": EFI}, "The bootloader: bios or efi, not both."),
        "kernelBoot": obj(
            {
                "container": obj(
                    {
                        "image": string("Container image holding the kernel and initrd."),
                        "imagePullPolicy": string("Always, Never or IfNotPresent."),
                        "imagePullSecret": string("Secret used to pull the image."),
                        "initrdPath": string("Path of the initrd inside the image."),
                        "kernelPath": string("Path of the kernel inside the image."),
                    },
                    "Where the kernel and initrd come from.",
                    required=["image"],
                ),
                "kernelArgs": string("Kernel command line."),
            },
            "Boot a kernel directly instead of a bootloader.",
        ),
        "serial": string("SMBIOS system serial number."),
        "uuid": string("SMBIOS system UUID; derived from the VM name when empty."),
    },
    "Firmware: bootloader, SMBIOS serial and UUID, kernel boot, ACPI tables.",
)

_HYPERV_SPINLOCKS = obj(
    {
        "enabled": boolean("Whether the feature is on; true when the block is present."),
        "spinlocks": integer("Spinlock retries before notifying the hypervisor; at least 4096."),
    },
    "Hyper-V paravirtualised spinlocks.",
)

_HYPERV_VENDOR_ID = obj(
    {
        "enabled": boolean("Whether the feature is on; true when the block is present."),
        "vendorid": string("Hypervisor vendor id shown to the guest (up to 12 characters)."),
    },
    "Set the hypervisor vendor id.",
)

HYPERV: Schema = obj(
    {
        "evmcs": _toggle("Enlightened VMCS for nested virtualisation."),
        "frequencies": _toggle("Expose TSC and APIC frequency MSRs."),
        "ipi": _toggle("Paravirtualised inter-processor interrupts."),
        "reenlightenment": _toggle("Re-enlightenment notifications on migration."),
        "relaxed": _toggle("Relaxed timing: no watchdog timeouts under load."),
        "reset": _toggle("Hyper-V reset through MSR."),
        "runtime": _toggle("Virtual processor run time MSR."),
        "spinlocks": _HYPERV_SPINLOCKS,
        "synic": _toggle("Synthetic interrupt controller."),
        "synictimer": obj(
            {
                "direct": _toggle("Direct-mode synthetic timers."),
                "enabled": boolean("Whether the feature is on; true when the block is present."),
            },
            "Synthetic timers (need synic).",
        ),
        "tlbflush": obj(
            {
                "direct": _toggle("Direct TLB flush for nested guests."),
                "enabled": boolean("Whether the feature is on; true when the block is present."),
                "extended": _toggle("Extended TLB flush hypercalls."),
            },
            "Paravirtualised TLB flush.",
        ),
        "vapic": _toggle("Virtual APIC assist."),
        "vendorid": _HYPERV_VENDOR_ID,
        "vpindex": _toggle("Virtual processor index MSR."),
    },
    "Hyper-V enlightenments for Windows guests.",
)

FEATURES: Schema = obj(
    {
        "acpi": _toggle("ACPI (needed for graceful shutdown); on by default."),
        "apic": obj(
            {
                "enabled": boolean("Whether the feature is on; true when the block is present."),
                "endOfInterrupt": boolean("Paravirtualised end-of-interrupt."),
            },
            "The APIC.",
        ),
        "hyperv": HYPERV,
        "hypervPassthrough": _toggle("Pass every Hyper-V enlightenment the host supports."),
        "kvm": obj({"hidden": boolean("Hide the KVM signature from the guest.")}, "KVM-specific features."),
        "pvspinlock": _toggle("Paravirtualised spinlocks."),
        "smm": _toggle("System management mode (needed by Secure Boot)."),
    },
    "Hypervisor features exposed to the guest: ACPI, APIC, Hyper-V, SMM…",
)


def _timer(description: str, *, tick_policy: bool = True, track: bool = False) -> Schema:
    props: dict[str, Schema] = {"present": boolean("Attach the timer; true when the block is present.")}
    if tick_policy:
        props["tickPolicy"] = string("What to do with missed ticks: delay, catchup, merge or discard.")
    if track:
        props["track"] = string("What the RTC follows: guest or wall.")
    return obj(props, description)


TIMER: Schema = obj(
    {
        "hpet": _timer("High precision event timer."),
        "hyperv": _timer("Hyper-V reference clock.", tick_policy=False),
        "kvm": _timer("KVM paravirtual clock.", tick_policy=False),
        "pit": _timer("Programmable interval timer."),
        "rtc": _timer("Real-time clock.", track=True),
    },
    "Timers attached to the guest.",
)

CLOCK_TIMEZONE = string("Start the guest clock in this time zone, e.g. Europe/Berlin.")

CLOCK_UTC: Schema = obj(
    {"offsetSeconds": plain_integer("Offset of the guest clock from UTC in seconds.")},
    "Start the guest clock in UTC, optionally offset.",
)

# KubeVirt keeps unknown fields under clock (x-kubernetes-preserve-unknown-fields), so do we.
CLOCK: Schema = obj(
    {"timer": TIMER, "timezone": CLOCK_TIMEZONE, "utc": CLOCK_UTC},
    "Guest clock: its offset (utc or timezone) and timers.",
    preserve_unknown=True,
)

CHASSIS: Schema = obj(
    {
        "asset": string("SMBIOS chassis asset tag."),
        "manufacturer": string("SMBIOS chassis manufacturer."),
        "serial": string("SMBIOS chassis serial number."),
        "sku": string("SMBIOS chassis SKU."),
        "version": string("SMBIOS chassis version."),
    },
    "SMBIOS chassis information.",
)

IO_THREADS: Schema = obj(
    {"supplementalPoolThreadCount": integer("IOThreads in the pool when ioThreadsPolicy is supplementalPool.")},
    "IOThread settings.",
)

IO_THREADS_POLICY = string("How disks get IOThreads: shared, auto or supplementalPool.")

LAUNCH_SECURITY: Schema = obj(
    {
        "sev": obj(
            {
                "attestation": obj(description="Wait for attestation before the guest runs."),
                "dhCert": string("Base64 guest owner's Diffie-Hellman key."),
                "policy": obj(
                    {"encryptedState": boolean("Encrypt the CPU register state too (SEV-ES).")},
                    "SEV guest policy.",
                ),
                "session": string("Base64 session blob for the launch."),
            },
            "AMD SEV memory encryption.",
        ),
        "snp": obj(description="AMD SEV-SNP."),
        "tdx": obj(description="Intel TDX."),
    },
    "Confidential-computing launch security: one of sev, snp or tdx.",
)

REBOOT_POLICY = string(
    "What a guest-initiated reboot does: Reboot (default) or Terminate the VMI.", enum=["Reboot", "Terminate"]
)
