"""`domain.devices`: disks, interfaces, inputs, watchdog, GPUs and host devices, and the autoattach switches."""

from __future__ import annotations

from pykubevirt.api.kubevirt import plain_integer
from pykubevirt.api.schema import Schema, array, boolean, integer, obj, string

# Disks.

BLOCK_SIZE: Schema = obj(
    {
        "custom": obj(
            {
                "discardGranularity": plain_integer("Discard granularity in bytes."),
                "logical": plain_integer("Logical block size in bytes."),
                "physical": plain_integer("Physical block size in bytes."),
            },
            "Explicit block sizes.",
        ),
        "matchVolume": obj(
            {"enabled": boolean("Whether to take the block sizes from the volume.")},
            "Take the block sizes from the backing volume.",
        ),
    },
    "Block sizes the disk reports to the guest: custom or matched to the volume.",
)

_BUS = "Bus the disk is attached to: virtio, sata, scsi or usb."

DISK_TARGET: Schema = obj(
    {
        "bus": string(_BUS),
        "pciAddress": string("Guest PCI address (virtio bus only), e.g. 0000:81:01.10."),
        "readonly": boolean("Expose the disk read-only."),
    },
    "Attach the volume as a hard disk.",
)

CDROM_TARGET: Schema = obj(
    {
        "bus": string("Bus the CD-ROM is attached to: sata, scsi or usb (not virtio)."),
        "readonly": boolean("Expose the CD-ROM read-only; true by default."),
        "tray": string("Tray state: closed (default) or open."),
    },
    "Attach the volume as a CD-ROM.",
)

LUN_TARGET: Schema = obj(
    {
        "bus": string(_BUS),
        "readonly": boolean("Expose the LUN read-only."),
        "reservation": boolean("Allow SCSI persistent reservations."),
    },
    "Pass the volume through as a SCSI LUN.",
)

DISK: Schema = obj(
    {
        "blockSize": BLOCK_SIZE,
        "bootOrder": plain_integer("Boot priority (> 0, lower first, unique); disks without it are not booted from."),
        "cache": string("Host cache mode: none, writethrough or writeback."),
        "cdrom": CDROM_TARGET,
        "changedBlockTracking": boolean("Track changed blocks of the disk for incremental backups."),
        "dedicatedIOThread": boolean("Give the disk its own IOThread (virtio bus)."),
        "disk": DISK_TARGET,
        "errorPolicy": string("What I/O errors do: stop, ignore, report or enospace."),
        "io": string("I/O mode: native or threads."),
        "lun": LUN_TARGET,
        "name": string("Name of the volume the disk exposes."),
        "serial": string("Serial number shown to the guest."),
        "shareable": boolean("Allow several VMs to use the disk at once."),
        "tag": string("Tag exposed to the guest through the device metadata."),
    },
    "A disk: a volume exposed as disk, cdrom or lun (one target type).",
    required=["name"],
)

DISKS: Schema = array(DISK, "Disks of the VMI; each refers to a volume by name.", max_items=256)

# Network interfaces.

_PORT = obj(
    {
        "name": string("Port name."),
        "port": integer("Port number, 1-65535."),
        "protocol": string("TCP (default) or UDP."),
    },
    required=["port"],
)

_PORT_RANGE = obj(
    {
        "end": integer("Last port of the range."),
        "protocol": string("TCP or UDP."),
        "start": integer("First port of the range."),
    },
    required=["end", "protocol", "start"],
)

DHCP_OPTIONS: Schema = obj(
    {
        "bootFileName": string("DHCP option 67: boot file name."),
        "ntpServers": array(string(), "DHCP option 42: NTP servers."),
        "privateOptions": array(
            obj(
                {"option": plain_integer("Option number, 224-254."), "value": string("Option value.")},
                required=["option", "value"],
            ),
            "Private DHCP options.",
        ),
        "tftpServerName": string("DHCP option 66: TFTP server name."),
    },
    "Extra DHCP options for the guest.",
)

INTERFACE: Schema = obj(
    {
        "acpiIndex": plain_integer("ACPI index of the NIC, used for predictable guest interface names."),
        "binding": obj(
            {"name": string("Name of a network binding plugin registered in the KubeVirt CR.")},
            "Connect through a network binding plugin.",
            required=["name"],
        ),
        "bootOrder": plain_integer("Boot priority (> 0, lower first, unique); enables PXE boot from this NIC."),
        "bridge": obj(description="Bridge the guest NIC to the pod interface."),
        "dhcpOptions": DHCP_OPTIONS,
        "macAddress": string("MAC address of the guest NIC."),
        "macvtap": obj(description="Connect through macvtap (deprecated)."),
        "masquerade": obj(description="NAT the guest behind the pod IP; takes no fields (ports are on the interface)."),
        "model": string("NIC model: virtio (default), e1000, e1000e, igb, ne2k_pci, pcnet or rtl8139."),
        "name": string("Name of the network the interface connects to."),
        "passt": obj(description="Connect through passt (deprecated, use a binding plugin)."),
        "passtBinding": obj(description="Connect through the core passt binding."),
        "pciAddress": string("Guest PCI address, e.g. 0000:81:01.10."),
        "portRanges": array(_PORT_RANGE, "Port ranges forwarded to the guest.", list_type="atomic"),
        "ports": array(_PORT, "Ports forwarded to the guest (masquerade); all ports when empty."),
        "slirp": obj(description="User-mode networking (discontinued)."),
        "sriov": obj(description="Pass an SR-IOV virtual function through."),
        "state": string("Link state: up, down or absent (hot-unplug)."),
        "tag": string("Tag exposed to the guest through the device metadata."),
    },
    "A guest NIC: its model and how it binds to the network of the same name (one binding method).",
    required=["name"],
)

INTERFACES: Schema = array(
    INTERFACE, "Network interfaces of the guest; each refers to a network by name.", max_items=256
)

# Other devices.

INPUT: Schema = obj(
    {
        "bus": string("usb or virtio."),
        "name": string("Device name."),
        "type": string("Input type: tablet."),
    },
    "An input device.",
    required=["name", "type"],
)

VIRTUAL_GPU_OPTIONS: Schema = obj(
    {
        "display": obj(
            {
                "enabled": boolean("Use the vGPU as the primary display; true by default."),
                "ramFB": obj(
                    {"enabled": boolean("Whether ramfb is on.")},
                    "Boot display through ramfb; on by default.",
                ),
            },
            "Display settings of the vGPU.",
        )
    },
    "Options of a mediated (virtual) GPU.",
)

_DEVICE_PROPERTIES: dict[str, Schema] = {
    "claimName": string("Resource claim providing the device (DRA)."),
    "deviceName": string("Device plugin resource name, e.g. nvidia.com/GP102GL."),
    "name": string("Device name."),
    "requestName": string("Request within the resource claim (DRA)."),
    "tag": string("Tag exposed to the guest through the device metadata."),
}

GPU: Schema = obj(
    {**_DEVICE_PROPERTIES, "virtualGPUOptions": VIRTUAL_GPU_OPTIONS},
    "A GPU passed through to the guest.",
    required=["name"],
)

HOST_DEVICE: Schema = obj(_DEVICE_PROPERTIES, "A host PCI or mediated device passed through.", required=["name"])

FILESYSTEM: Schema = obj(
    {"name": string("Name of the volume shared."), "virtiofs": obj(description="Share through virtiofs.")},
    "A volume shared with the guest as a filesystem.",
    required=["name", "virtiofs"],
)

WATCHDOG: Schema = obj(
    {
        "diag288": obj(
            {"action": string("poweroff, reset, shutdown or dump.")},
            "s390x diag288 watchdog.",
        ),
        "i6300esb": obj(
            {"action": string("poweroff, reset (default), shutdown or dump.")},
            "Intel 6300ESB watchdog (amd64).",
        ),
        "name": string("Watchdog name."),
    },
    "A watchdog that acts when the guest stops petting it (one model).",
    required=["name"],
)

SOUND: Schema = obj(
    {"model": string("ich9 (default) or ac97."), "name": string("Sound device name.")},
    "An emulated sound card.",
    required=["name"],
)

TPM: Schema = obj(
    {
        "enabled": boolean("Attach the TPM; true when the block is present."),
        "persistent": boolean("Keep the TPM state across restarts (needs backend storage)."),
    },
    "An emulated TPM 2.0.",
)

VIDEO: Schema = obj({"type": string("Video device model, e.g. virtio, vga, bochs.")}, "The video device.")

PANIC_DEVICE: Schema = obj({"model": string("Panic device model: isa, hyperv or pvpanic.")}, "A panic notifier.")

DEVICES: Schema = obj(
    {
        "autoattachGraphicsDevice": boolean("Add a VGA device and VNC; true by default."),
        "autoattachInputDevice": boolean("Add a USB tablet when no input is given."),
        "autoattachMemBalloon": boolean("Add a virtio memory balloon; true by default."),
        "autoattachPodInterface": boolean("Add the default pod network interface when none is given; true by default."),
        "autoattachSerialConsole": boolean("Add a serial console; true by default."),
        "autoattachVSOCK": boolean("Add a virtio-vsock device."),
        "blockMultiQueue": boolean("Give virtio block devices one queue per vCPU."),
        "clientPassthrough": obj(description="Allow client-side USB redirection."),
        "disableHotplug": boolean("Disable device hotplug (no spare PCI ports)."),
        "disks": DISKS,
        "downwardMetrics": obj(description="Expose host metrics to the guest through a virtio-serial port."),
        "filesystems": array(FILESYSTEM, "Volumes shared as filesystems.", list_type="atomic"),
        "gpus": array(GPU, "GPUs passed through.", list_type="atomic"),
        "hostDevices": array(HOST_DEVICE, "Host devices passed through.", list_type="atomic"),
        "inputs": array(INPUT, "Input devices."),
        "interfaces": INTERFACES,
        "logSerialConsole": boolean("Log the serial console to the launcher's output."),
        "networkInterfaceMultiqueue": boolean("Give virtio NICs one queue per vCPU."),
        "panicDevices": array(PANIC_DEVICE, "Panic notifier devices."),
        "rng": obj(description="Add a virtio entropy source."),
        "sound": SOUND,
        "tpm": TPM,
        "useVirtioTransitional": boolean("Use virtio-transitional devices for old guests."),
        "video": VIDEO,
        "watchdog": WATCHDOG,
    },
    "Devices of the guest: disks, interfaces, inputs and others, plus switches for default devices.",
)
