"""Everything environment-specific the converter needs, so that the conversion itself stays a pure function."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pykubevirt.api import pod_layout

# KubeVirt's in-pod directories (pod_layout's; pkg/util/util.go) are the defaults, so our XML reads like KubeVirt's.
KUBEVIRT_PVC_DISK_DIR = f"{pod_layout.PRIVATE_DIR}/vmi-disks"
OVMF_DIR = "/usr/share/OVMF"

NetworkMode = Literal["kubevirt", "user"]


class ConversionError(ValueError):
    """The VMI cannot be expressed as a domain (an unsupported device, a missing prepared disk, …)."""


@dataclass(frozen=True, slots=True)
class SMBIOS:
    """The cluster's SMBIOS system identity (KubeVirt CR `smbios`; KubeVirt's defaults)."""

    manufacturer: str = "KubeVirt"
    family: str = "KubeVirt"
    product: str = "None"
    sku: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class ConverterContext:
    """Host facts and launcher decisions the conversion depends on; KubeVirt's ConverterContext, trimmed."""

    # True when KVM is unusable: `<domain type="qemu">` (TCG) and KVM-only features dropped.
    use_emulation: bool = False
    # libvirt's name of the guest architecture; only x86_64 is supported.
    architecture: str = "x86_64"
    private_dir: str = pod_layout.PRIVATE_DIR
    ephemeral_disk_dir: str = pod_layout.EPHEMERAL_DISK_DIR
    container_disk_dir: str = pod_layout.CONTAINER_DISK_DIR
    libvirt_runtime_dir: str = pod_layout.LIBVIRT_RUNTIME_DIR
    pvc_disk_dir: str = KUBEVIRT_PVC_DISK_DIR
    # Holds hotplug disks and the persistent-reservation helper socket.
    share_dir: str = pod_layout.KUBEVIRT_SHARE_DIR
    # Where block-mode PVC/DataVolume devices appear (a pod sees them as /dev/<volume>).
    block_device_dir: str = "/dev"
    # containerDisk volume name → (backing image path, its format "raw"|"qcow2"), prepared by the launcher.
    container_disks: dict[str, tuple[str, str]] = field(default_factory=dict)
    # PVC/DataVolume volumes that are block devices rather than a disk.img on a filesystem.
    block_volumes: frozenset[str] = frozenset()
    # Preallocated volumes: no discard=unmap, and io=native with cache=none (KubeVirt's VolumesDiscardIgnore).
    preallocated_volumes: frozenset[str] = frozenset()
    # Whether O_DIRECT works where the disks live: default cache "none" if so, else "writethrough".
    direct_io: bool = True
    smbios: SMBIOS = field(default_factory=SMBIOS)
    # Written to the domain metadata when the VMI sets no terminationGracePeriodSeconds.
    grace_period_seconds: int = 30
    # Cluster default for the serial console log; the VMI's devices.logSerialConsole overrides it.
    serial_log: bool = True
    mem_balloon_stats_period: int = 10
    free_page_reporting: bool = True
    # "kubevirt": pod-network NICs are `type="ethernet"` on a pre-created tap; "user": libvirt user-mode networking.
    network_mode: NetworkMode = "kubevirt"
    # Interface name → the MAC and MTU of its pod interface, as the launcher's network setup found them (the domain
    # NIC takes them unless the spec names a MAC): for bridge the pod's MAC moves to the guest.
    interface_macs: Mapping[str, str] = field(default_factory=dict)
    interface_mtus: Mapping[str, int] = field(default_factory=dict)
    # OVMF images for EFI guests (KubeVirt's names in its launcher image; the launcher passes the host's, "" for a
    # pair the host lacks, which the conversion then refuses naming the package).
    efi_code: str = f"{OVMF_DIR}/OVMF_CODE.fd"
    efi_vars: str = f"{OVMF_DIR}/OVMF_VARS.fd"
    efi_secure_code: str = f"{OVMF_DIR}/OVMF_CODE.secboot.fd"
    efi_secure_vars: str = f"{OVMF_DIR}/OVMF_VARS.secboot.fd"
    # Let libvirt pick Secure Boot firmware from its descriptors instead of the paths above.
    efi_firmware_autoselect: bool = False
    # Non-root launchers keep NVRAM under the private dir; None means `<private_dir>/libvirt/qemu/nvram`.
    nvram_dir: str | None = None
    # The pod's exclusive host CPUs (a static CPU manager pinned the launcher to them); dedicatedCpuPlacement pins
    # vCPU i to the i-th of them. Empty when the launcher runs on shared CPUs.
    pinned_cpus: tuple[int, ...] = ()
    # Whether swtpm (the TPM emulator libvirt runs for `devices.tpm`) is installed.
    tpm_emulator: bool = True
    # KubeVirt CR `bochsDisplayForEFIGuests`.
    bochs_display_for_efi: bool = False

    @property
    def nvram_path(self) -> str:
        return self.nvram_dir if self.nvram_dir is not None else f"{self.private_dir}/libvirt/qemu/nvram"
