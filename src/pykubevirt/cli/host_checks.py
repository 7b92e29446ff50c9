"""What `pykubevirt doctor` and `up` conclude about the host: pure functions from gathered facts to OK, WARN or FAIL.

Gathering (cli/host_facts.py) touches the machine; these only judge, so each verdict and fix is tested on plain data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pykubevirt.cli.port_owner import PortOwner, in_use_message

OK = "OK"
WARN = "WARN"
FAIL = "FAIL"

GIB = 1024**3
# Below MIN the cluster cannot import a guest image; below WANT a couple of disks fill it.
MIN_FREE_BYTES = 1 * GIB
WANT_FREE_BYTES = 10 * GIB
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")


@dataclass(frozen=True, slots=True)
class Check:
    """One row of the doctor's table."""

    name: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        """The row as the one line `up` prints for a failure."""
        return f"{self.detail}; {self.fix}" if self.fix else self.detail


def kvm(usable: bool, reason: str) -> Check:
    if usable:
        return Check("kvm", OK, f"KVM usable ({reason})")
    return Check(
        "kvm",
        WARN,
        f"guests run under TCG, several times slower ({reason})",
        "enable VT-x/AMD-V (or nested virtualization), `modprobe kvm_intel` or `kvm_amd`",
    )


def qemu(path: str | None) -> Check:
    if path:
        return Check("qemu", OK, path)
    return Check("qemu", FAIL, "qemu-system-x86_64 is not installed", "apt-get install qemu-system-x86 (make setup)")


def libvirt(binding: bool, qemu_driver: str | None, user_exists: bool) -> Check:
    """The launcher's `qemu:///embed` needs the Python binding, the QEMU driver module and the `libvirt-qemu` user."""
    if not binding:
        return Check("libvirt", FAIL, "the libvirt Python binding is missing", "run `make setup`")
    if qemu_driver is None:
        return Check(
            "libvirt", FAIL, "libvirt's QEMU driver is not installed", "apt-get install libvirt-daemon-driver-qemu"
        )
    if not user_exists:
        return Check(
            "libvirt",
            FAIL,
            "the libvirt-qemu user does not exist (the embedded QEMU driver refuses to start without it)",
            "run `make setup` (useradd --system libvirt-qemu)",
        )
    return Check("libvirt", OK, f"embedded QEMU driver ({qemu_driver}), user libvirt-qemu")


def network_namespaces(is_root: bool, ip_command: str | None) -> Check:
    if ip_command is None:
        return Check("netns", FAIL, "the ip command is missing", "apt-get install iproute2")
    if not is_root:
        return Check(
            "netns", FAIL, "pod network namespaces need root", "run as root, or `pykubevirt up --no-pod-network`"
        )
    return Check("netns", OK, f"root, {ip_command}")


def tun(error: str) -> Check:
    if not error:
        return Check("tun", OK, "/dev/net/tun opens")
    return Check(
        "tun",
        FAIL,
        f"/dev/net/tun is not usable ({error}); guests have no network",
        "`modprobe tun`, or in a container pass --device /dev/net/tun",
    )


def cni(plugin_dir: str, present: Sequence[str]) -> Check:
    missing = [name for name in CNI_PLUGINS if name not in present]
    if not missing:
        return Check("cni", OK, f"{', '.join(CNI_PLUGINS)} in {plugin_dir}")
    return Check(
        "cni",
        FAIL,
        f"CNI plugins missing from {plugin_dir}: {', '.join(missing)}",
        "apt-get install containernetworking-plugins, or `pykubevirt up --no-pod-network`",
    )


def nftables(nft: str | None, error: str) -> Check:
    if nft is None:
        return Check(
            "nftables", FAIL, "nft is not installed (Services and masquerade need it)", "apt-get install nftables"
        )
    if error:
        return Check("nftables", FAIL, f"nft cannot list the ruleset ({error})", "run as root; `modprobe nf_tables`")
    return Check("nftables", OK, nft)


def ovmf(firmware_dir: str, found: bool) -> Check:
    if found:
        return Check("ovmf", OK, f"EFI firmware in {firmware_dir}")
    return Check("ovmf", WARN, f"no OVMF firmware in {firmware_dir}: EFI guests cannot boot", "apt-get install ovmf")


def swtpm(missing: Sequence[str]) -> Check:
    if not missing:
        return Check("swtpm", OK, "swtpm and swtpm_setup")
    return Check(
        "swtpm",
        WARN,
        f"{', '.join(missing)} missing: guests with a TPM cannot start",
        "apt-get install swtpm swtpm-tools",
    )


def qemu_img(path: str | None) -> Check:
    if path:
        return Check("qemu-img", OK, path)
    return Check("qemu-img", FAIL, "qemu-img is missing: no disk can be created", "apt-get install qemu-utils")


def skopeo(path: str | None) -> Check:
    if path:
        return Check("skopeo", OK, path)
    return Check(
        "skopeo", WARN, "skopeo is missing: registry containerDisks cannot be pulled", "apt-get install skopeo"
    )


def data_dir(path: str, error: str) -> Check:
    if not error:
        return Check("data-dir", OK, f"{path} is writable")
    return Check(
        "data-dir",
        FAIL,
        f"cannot write the data dir {path} ({error})",
        "run as root, fix its permissions or pass --data-dir DIR",
    )


def free_disk(path: str, free_bytes: int) -> Check:
    shown = f"{free_bytes / GIB:.1f} GiB free under {path}"
    if free_bytes < MIN_FREE_BYTES:
        return Check("disk", FAIL, shown, "free some space or pass --data-dir on another disk")
    if free_bytes < WANT_FREE_BYTES:
        return Check("disk", WARN, shown, "a few guest disks will fill it: free space or use another --data-dir")
    return Check("disk", OK, shown)


def listen_port(listen: str, in_use: bool, owner: PortOwner | None, ours: bool) -> Check:
    """The API server's port: free, or held by this data dir's running cluster (then `up` is a no-op)."""
    host, _, port = listen.rpartition(":")
    if not in_use:
        return Check("port", OK, f"{listen} is free")
    if ours:
        return Check("port", OK, f"{listen} is served by this data dir's running cluster")
    message = in_use_message(host.strip("[]"), int(port), owner)
    detail, _, fix = message.partition("; ")
    return Check("port", FAIL, detail, fix)


def worst(checks: Sequence[Check]) -> str:
    statuses = {check.status for check in checks}
    return FAIL if FAIL in statuses else WARN if WARN in statuses else OK
