"""instancetype.kubevirt.io/v1beta1: instance types (resource sizes) and preferences (defaults) for VMs.

Namespaced and cluster-wide kinds share one spec each; most nodes are reused from the VMI domain model.
"""

from __future__ import annotations

from pykubevirt.api.constants import (
    CLUSTER_INSTANCETYPE_KIND,
    CLUSTER_PREFERENCE_KIND,
    INSTANCETYPE_API_VERSION,
    INSTANCETYPE_KIND,
    PREFERENCE_KIND,
)
from pykubevirt.api.kubevirt import plain_integer
from pykubevirt.api.kubevirt.compute import (
    CLOCK_TIMEZONE,
    CLOCK_UTC,
    CPU_FEATURE,
    EFI,
    FEATURES,
    HUGEPAGES,
    HYPERV,
    IO_THREADS,
    IO_THREADS_POLICY,
    LAUNCH_SECURITY,
    NUMA,
    REALTIME,
    TIMER,
)
from pykubevirt.api.kubevirt.devices import BLOCK_SIZE, GPU, HOST_DEVICE, TPM, VIRTUAL_GPU_OPTIONS
from pykubevirt.api.schema import (
    Schema,
    array,
    boolean,
    describe,
    int64,
    integer,
    obj,
    quantity,
    string,
    string_map,
)

_ANNOTATIONS = string_map("Annotations added to the VMI.")

INSTANCETYPE_SPEC: Schema = obj(
    {
        "annotations": _ANNOTATIONS,
        "cpu": obj(
            {
                "dedicatedCPUPlacement": boolean("Pin each vCPU to a dedicated host CPU."),
                "guest": integer("Number of vCPUs; laid out per the preference's preferred topology."),
                "isolateEmulatorThread": boolean("Give QEMU's emulator thread its own host CPU."),
                "maxSockets": integer("Upper bound of sockets for CPU hotplug."),
                "model": string("CPU model."),
                "numa": NUMA,
                "realtime": REALTIME,
            },
            "vCPUs the instance type provides.",
            required=["guest"],
        ),
        "gpus": array(GPU, "GPUs passed through.", list_type="atomic"),
        "hostDevices": array(HOST_DEVICE, "Host devices passed through.", list_type="atomic"),
        "ioThreads": IO_THREADS,
        "ioThreadsPolicy": IO_THREADS_POLICY,
        "launchSecurity": LAUNCH_SECURITY,
        "memory": obj(
            {
                "guest": quantity("Guest memory."),
                "hugepages": HUGEPAGES,
                "maxGuest": quantity("Upper bound of guest memory for memory hotplug."),
                "overcommitPercent": {
                    **plain_integer("Percent by which the memory request is lowered below the guest memory, 0-100."),
                    "minimum": 0,
                    "maximum": 100,
                },
            },
            "Memory the instance type provides.",
            required=["guest"],
        ),
        "nodeSelector": string_map("Labels a node must carry."),
        "schedulerName": string("Scheduler of the launcher pod."),
    },
    "Resources and performance settings a VM gets; a VM may not set them itself.",
    required=["cpu", "memory"],
)

_FEATURE = FEATURES["properties"]

PREFERENCE_SPEC: Schema = obj(
    {
        "annotations": _ANNOTATIONS,
        "clock": obj(
            {
                "preferredClockOffset": obj(
                    {"timezone": CLOCK_TIMEZONE, "utc": CLOCK_UTC}, "Preferred guest clock offset."
                ),
                "preferredTimer": describe(TIMER, "Preferred timers."),
            },
            "Preferred clock settings.",
        ),
        "cpu": obj(
            {
                "preferredCPUFeatures": array(CPU_FEATURE, "CPU features to add or remove."),
                "preferredCPUTopology": string("How cpu.guest is laid out: sockets, cores, threads, spread or any."),
                "spreadOptions": obj(
                    {
                        "across": string("SocketsCores (default), SocketsCoresThreads or CoresThreads."),
                        "ratio": integer("Ratio of the spread; 2 by default."),
                    },
                    "How the spread topology divides vCPUs.",
                ),
            },
            "Preferred CPU settings.",
        ),
        "devices": obj(
            {
                "preferredAutoattachGraphicsDevice": boolean("Default of autoattachGraphicsDevice."),
                "preferredAutoattachInputDevice": boolean("Default of autoattachInputDevice."),
                "preferredAutoattachMemBalloon": boolean("Default of autoattachMemBalloon."),
                "preferredAutoattachPodInterface": boolean("Default of autoattachPodInterface."),
                "preferredAutoattachSerialConsole": boolean("Default of autoattachSerialConsole."),
                "preferredBlockMultiQueue": boolean("Default of blockMultiQueue."),
                "preferredCdromBus": string("Default bus of CD-ROMs."),
                "preferredDisableHotplug": boolean("Default of disableHotplug."),
                "preferredDiskBlockSize": BLOCK_SIZE,
                "preferredDiskBus": string("Default bus of disks."),
                "preferredDiskCache": string("Default cache mode of disks."),
                "preferredDiskDedicatedIoThread": boolean("Default of dedicatedIOThread on disks."),
                "preferredDiskIO": string("Default I/O mode of disks."),
                "preferredInputBus": string("Default bus of inputs."),
                "preferredInputType": string("Default type of inputs."),
                "preferredInterfaceMasquerade": obj(
                    description="Bind interfaces without a binding method with masquerade."
                ),
                "preferredInterfaceModel": string("Default NIC model."),
                "preferredLunBus": string("Default bus of LUNs."),
                "preferredNetworkInterfaceMultiQueue": boolean("Default of networkInterfaceMultiqueue."),
                "preferredPanicDeviceModel": string("Default panic device model."),
                "preferredRng": obj(description="Add an entropy source."),
                "preferredSoundModel": string("Default sound model."),
                "preferredTPM": TPM,
                "preferredUseVirtioTransitional": boolean("Default of useVirtioTransitional."),
                "preferredVideoType": string("Default video device model."),
                "preferredVirtualGPUOptions": VIRTUAL_GPU_OPTIONS,
            },
            "Preferred device settings.",
        ),
        "features": obj(
            {
                "preferredAcpi": _FEATURE["acpi"],
                "preferredApic": _FEATURE["apic"],
                "preferredHyperv": HYPERV,
                "preferredKvm": _FEATURE["kvm"],
                "preferredPvspinlock": _FEATURE["pvspinlock"],
                "preferredSmm": _FEATURE["smm"],
            },
            "Preferred hypervisor features.",
        ),
        "firmware": obj(
            {
                "preferredEfi": EFI,
                "preferredUseBios": boolean("Boot with BIOS."),
                "preferredUseBiosSerial": boolean("Send BIOS output to the serial console."),
                "preferredUseEfi": boolean("Boot with EFI (deprecated, use preferredEfi)."),
                "preferredUseSecureBoot": boolean("Use Secure Boot (deprecated, use preferredEfi)."),
            },
            "Preferred firmware.",
        ),
        "machine": obj({"preferredMachineType": string("Default machine type.")}, "Preferred machine."),
        "preferSpreadSocketToCoreRatio": integer("Deprecated, use cpu.spreadOptions.ratio."),
        "preferredArchitecture": string("Default architecture."),
        "preferredLaunchSecurity": describe(LAUNCH_SECURITY, "Preferred launch security."),
        "preferredSubdomain": string("Default subdomain."),
        "preferredTerminationGracePeriodSeconds": int64("Default terminationGracePeriodSeconds."),
        "requirements": obj(
            {
                "architecture": string("Architecture the VM must have."),
                "cpu": obj({"guest": integer("Minimum vCPUs.")}, "Minimum CPU the VM must have.", required=["guest"]),
                "memory": obj(
                    {"guest": quantity("Minimum guest memory.")},
                    "Minimum memory the VM must have.",
                    required=["guest"],
                ),
            },
            "Minimum resources a VM must have to use the preference.",
        ),
        "volumes": obj(
            {"preferredStorageClassName": string("Default StorageClass of dataVolumeTemplates.")},
            "Preferred volume settings.",
        ),
    },
    "Defaults applied to a VM's template where it leaves a field unset.",
)


def _kind(kind: str, spec: Schema, description: str) -> Schema:
    return obj(
        {
            "apiVersion": string(f"API version: {INSTANCETYPE_API_VERSION}."),
            "kind": string(f"Kind: {kind}."),
            "metadata": obj(),
            "spec": spec,
        },
        description,
        required=["spec"],
    )


VIRTUAL_MACHINE_INSTANCETYPE: Schema = _kind(
    INSTANCETYPE_KIND, INSTANCETYPE_SPEC, "A namespaced instance type: CPU, memory and devices for VMs."
)
VIRTUAL_MACHINE_CLUSTER_INSTANCETYPE: Schema = _kind(
    CLUSTER_INSTANCETYPE_KIND, INSTANCETYPE_SPEC, "A cluster-wide instance type: CPU, memory and devices for VMs."
)
VIRTUAL_MACHINE_PREFERENCE: Schema = _kind(
    PREFERENCE_KIND, PREFERENCE_SPEC, "A namespaced preference: default settings for VMs."
)
VIRTUAL_MACHINE_CLUSTER_PREFERENCE: Schema = _kind(
    CLUSTER_PREFERENCE_KIND, PREFERENCE_SPEC, "A cluster-wide preference: default settings for VMs."
)
