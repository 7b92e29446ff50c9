"""Gathering what the host has (binaries, devices, users, disk, the listen port) and judging it with cli/host_checks.py.

`startup_checks` is the quick subset `pykubevirt up` runs before it starts anything; `doctor_checks` is everything.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from pykubevirt.cli import host_checks
from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.host_checks import Check
from pykubevirt.cli.port_owner import port_in_use, port_owner

OVMF_DIR = "/usr/share/OVMF"
QEMU_DRIVER_GLOB = "/usr/lib/*/libvirt/connection-driver/libvirt_driver_qemu.so"


def existing_ancestor(path: Path) -> Path:
    """`path` or its nearest parent that exists (a data dir `up` has not created yet is judged by its parent)."""
    path = path.resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def writable_error(path: Path) -> str:
    """Why nothing can be written under `path` ("" when a file can be)."""
    where = existing_ancestor(path)
    try:
        with tempfile.TemporaryFile(dir=where, prefix=".pykubevirt-doctor-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def tun_error(device: str = "/dev/net/tun") -> str:
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    return ""


def listen_check(listen: str, *, ours: bool) -> Check:
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    in_use = port_in_use(host, int(port))
    owner = port_owner(host, int(port)) if in_use and not ours else None
    return host_checks.listen_port(listen, in_use, owner, ours)


def startup_checks(layout: ClusterLayout, *, pod_network: bool, ours: bool = False) -> list[Check]:
    """What stops `up` at once, checked in well under a second: data dir, disk, listen port, tun."""
    checks = [
        host_checks.data_dir(str(layout.data_dir), writable_error(layout.data_dir)),
        host_checks.free_disk(
            str(existing_ancestor(layout.data_dir)), shutil.disk_usage(existing_ancestor(layout.data_dir)).free
        ),
        listen_check(layout.listen, ours=ours),
    ]
    if pod_network:
        checks.append(host_checks.tun(tun_error()))
    return checks


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _libvirt_binding() -> bool:
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return False
    return True


def _nft_error(nft: str) -> str:
    try:
        result = subprocess.run([nft, "list", "tables"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if result.returncode == 0 else " ".join(result.stderr.split())[:200]


def _cni_plugins(plugin_dir: str) -> list[str]:
    try:
        return sorted(entry.name for entry in os.scandir(plugin_dir) if os.access(entry.path, os.X_OK))
    except OSError:
        return []


def doctor_checks(layout: ClusterLayout, *, ours: bool) -> list[Check]:
    """Everything the cluster and its features need, in the order a reader fixes them."""
    from pykubevirt.launcher.kvm_probe import cached_probe
    from pykubevirt.node.cni import CNI_PATH

    probe = cached_probe()
    drivers = sorted(glob.glob(QEMU_DRIVER_GLOB))
    nft = shutil.which("nft")
    return [
        host_checks.qemu(shutil.which("qemu-system-x86_64")),
        host_checks.kvm(probe.usable, probe.reason),
        host_checks.libvirt(_libvirt_binding(), drivers[0] if drivers else None, _user_exists("libvirt-qemu")),
        host_checks.network_namespaces(os.geteuid() == 0, shutil.which("ip")),
        host_checks.tun(tun_error()),
        host_checks.cni(CNI_PATH, _cni_plugins(CNI_PATH)),
        host_checks.nftables(nft, _nft_error(nft) if nft else ""),
        host_checks.ovmf(OVMF_DIR, bool(glob.glob(f"{OVMF_DIR}/OVMF_CODE*.fd"))),
        host_checks.swtpm([name for name in ("swtpm", "swtpm_setup") if shutil.which(name) is None]),
        host_checks.qemu_img(shutil.which("qemu-img")),
        host_checks.skopeo(shutil.which("skopeo")),
        *startup_checks(layout, pod_network=False, ours=ours),
    ]
