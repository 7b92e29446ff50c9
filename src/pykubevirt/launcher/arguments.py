"""virt-launcher's command-line flags, as KubeVirt's launcher pod passes them (kept free of heavy imports)."""

from __future__ import annotations

import argparse

from pykubevirt.api import pod_layout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """virt-launcher's flags, as KubeVirt's launcher pod passes them."""
    parser.add_argument("--name", required=True)
    parser.add_argument("--uid", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--qemu-timeout", default="240s")
    parser.add_argument("--kubevirt-share-dir", default=pod_layout.KUBEVIRT_SHARE_DIR)
    parser.add_argument("--ephemeral-disk-dir", default=pod_layout.EPHEMERAL_DISK_DIR)
    parser.add_argument("--container-disk-dir", default=pod_layout.CONTAINER_DISK_DIR)
    parser.add_argument("--grace-period-seconds", type=int, default=45)
    parser.add_argument("--hook-sidecars", type=int, default=0)
    parser.add_argument("--ovmf-path", default="/usr/share/OVMF")
    parser.add_argument("--disk-memory-limit", type=int, default=2097152000)
    parser.add_argument("--hypervisor", default="kvm")
    parser.add_argument("--run-as-nonroot", action="store_true")
    parser.add_argument("--allow-emulation", action="store_true")
    parser.add_argument("--keep-after-failure", action="store_true")
    parser.add_argument("--simulate-crash", action="store_true")
    parser.add_argument("--libvirt-log-filters", default="")
    parser.add_argument(
        "--migration-target", action="store_true", help="receive the VMI's domain from a live migration"
    )
    parser.add_argument("--libvirt-uri", default="", help="use this libvirt instead of an embedded one (tests)")
