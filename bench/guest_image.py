"""The demo guest image on its own: its size, and how long plain QEMU (TCG, 128 MiB, no NIC) takes to boot it.

Each run boots a snapshot of the image and times QEMU start → first serial line and → the boot marker
(`pykubevirt-guest: booted`), then kills that QEMU by its PID.

    python -m bench.guest_image --runs 5 [--image _output/guest/demo-guest.img]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench.arguments import at_least, positive
from bench.harness import log, machine
from bench.vm_start import BOOTED, GUEST_IMAGE, stats


def boot_once(image: Path, timeout: float) -> tuple[float, float]:
    """Seconds from QEMU start to its first serial byte and to the boot marker."""
    with tempfile.TemporaryDirectory(prefix="pkv-bench-guest-") as tmp:
        serial = Path(tmp) / "serial.log"
        args = [
            "qemu-system-x86_64", "-machine", "q35", "-accel", "tcg", "-m", "128", "-nographic", "-no-reboot",
            "-monitor", "none", "-nic", "none",
            "-chardev", f"file,id=serial0,path={serial}", "-serial", "chardev:serial0",
            "-drive", f"file={image},if=none,id=boot,format=raw,snapshot=on",
            "-device", "virtio-blk-pci,drive=boot,bootindex=0",
        ]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first = 0.0
        try:
            while time.monotonic() - started < timeout:
                text = serial.read_bytes() if serial.exists() else b""
                if text and not first:
                    first = time.monotonic() - started
                if BOOTED in text:
                    return first, time.monotonic() - started
                if proc.poll() is not None:
                    raise RuntimeError(f"QEMU exited with {proc.returncode} before the boot marker")
                time.sleep(0.02)
            raise RuntimeError(f"no boot marker within {timeout:.0f} s")
        finally:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=at_least(1), default=5)
    parser.add_argument("--image", type=Path, default=GUEST_IMAGE)
    parser.add_argument("--timeout", type=positive, default=120.0)
    args = parser.parse_args()
    size = args.image.stat().st_size
    allocated = args.image.stat().st_blocks * 512
    log(f"image {args.image}: {size / 2**20:.1f} MiB, {allocated / 2**20:.1f} MiB allocated")
    firsts, boots = [], []
    for run in range(1, args.runs + 1):
        first, booted = boot_once(args.image, args.timeout)
        firsts.append(first)
        boots.append(booted)
        log(f"run {run}/{args.runs}: first serial line {first:.2f} s, boot marker {booted:.2f} s")
    figures = {
        "bench": "guest_image",
        "machine": machine(),
        "image_mib": round(size / 2**20, 1),
        "allocated_mib": round(allocated / 2**20, 1),
        "first_serial_line_s": stats(firsts),
        "boot_marker_s": stats(boots),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
