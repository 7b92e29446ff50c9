#!/usr/bin/env bash
# Publishes the demo guest's kernel and initrd as a kernel-boot container image in a node's image store:
# pykubevirt.local/demo-guest-kernel:1.0 with /boot/vmlinuz and /boot/initrd.gz, what `firmware.kernelBoot.container`
# names (examples/vm-kernel-boot.yaml). They are read from the built image (make guest-image), so the guest build
# stays as it is. Usage: scripts/import-kernel-image.sh [GUEST_IMAGE] [pykubevirt image import options...]
# PYKUBEVIRT overrides the command (default: pykubevirt on PATH). Needs mtools (mcopy), which the guest build uses.
set -euo pipefail

GUEST=${1:-_output/guest/demo-guest.img}
shift || true
REF=${KERNEL_IMAGE:-pykubevirt.local/demo-guest-kernel:1.0}
read -r -a PYKUBEVIRT_CMD <<<"${PYKUBEVIRT:-pykubevirt}"
[ -f "$GUEST" ] || { echo "import-kernel-image: $GUEST missing (make guest-image)" >&2; exit 1; }
command -v mcopy >/dev/null || { echo "import-kernel-image: missing host tool mcopy (run scripts/setup-host.sh)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The FAT filesystem of the guest image holds the kernel and initrd syslinux and systemd-boot load.
mcopy -n -i "$GUEST" ::vmlinuz ::initrd.gz "$tmp/"
"${PYKUBEVIRT_CMD[@]}" image import "$REF" --file "/boot/vmlinuz=$tmp/vmlinuz" --file "/boot/initrd.gz=$tmp/initrd.gz" "$@"
