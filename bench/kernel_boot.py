"""Direct kernel boot against disk boot, through the whole embedded cluster, in the same run.

The disk VM is the demo VM (containerDisk: SeaBIOS, then syslinux reads the kernel and initrd from the guest's FAT
disk); the kernel VM is the same VM with its root disk replaced by `firmware.kernelBoot` on the demo guest's kernel
image (QEMU loads the kernel and initrd itself). Both keep the cloud-init disk and the network. The two alternate (one
warm-up of each first) and each is timed from VM create to Running, to the first serial line and to the boot marker.

    python -m bench.kernel_boot --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.arguments import at_least
from bench.harness import log, machine
from bench.vm_start import BOOTED, GUEST_IMAGE, REPO, BenchCluster, demo_vm, stats, vmi_running, wait_gone, wait_serial
from pykubevirt.api import pod_layout
from pykubevirt.cli.cluster_layout import pykubevirt_argv
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import NAMESPACES, VIRTUAL_MACHINES

NS = "bench"
KERNEL_IMAGE = "pykubevirt.local/demo-guest-kernel:1.0"
KERNEL_ARGS = "console=ttyS0 panic=-1 quiet no_timer_check"  # the guest's syslinux APPEND line


def kernel_vm(name: str) -> dict[str, Any]:
    """The demo VM booting the kernel image instead of its root disk; nothing else differs."""
    vm = demo_vm(name)
    spec = vm["spec"]["template"]["spec"]
    root = spec["volumes"][0]["name"]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != root]
    spec["domain"]["devices"]["disks"] = [d for d in spec["domain"]["devices"]["disks"] if d["name"] != root]
    container = {"image": KERNEL_IMAGE, "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.gz"}
    spec["domain"]["firmware"] = {"kernelBoot": {"kernelArgs": KERNEL_ARGS, "container": container}}
    return vm


def publish_kernel_image(images_dir: Path) -> None:
    """The kernel image as users publish it: scripts/import-kernel-image.sh into the node's image store."""
    env = {**os.environ, "PYKUBEVIRT": " ".join(pykubevirt_argv()), "KERNEL_IMAGE": KERNEL_IMAGE}
    script = [str(REPO / "scripts" / "import-kernel-image.sh"), str(GUEST_IMAGE), "--images-dir", str(images_dir)]
    subprocess.run(script, check=True, capture_output=True, timeout=120, env=env)


async def one_boot(cluster: BenchCluster, client: KubeClient, vm: dict[str, Any]) -> dict[str, float]:
    """Seconds from VM create to Running, the first serial line and the boot marker; the VM is deleted after."""
    name = vm["metadata"]["name"]
    started = time.monotonic()
    await client.create(VIRTUAL_MACHINES, vm, NS)
    vmi = await vmi_running(client, NS, name)
    t_running = time.monotonic()
    pod_uid = next(iter(vmi["status"]["activePods"]))
    serial = Path(pod_layout.serial_log(str(cluster.pods_dir), pod_uid, vmi["metadata"]["uid"]))
    t_line = await wait_serial(serial, None)
    t_booted = await wait_serial(serial, BOOTED)
    await client.delete(VIRTUAL_MACHINES, name, NS)
    await wait_gone(client, NS, name)
    return {"running": t_running - started, "first_line": t_line - started, "booted": t_booted - started}


def summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    return {
        "running_s": stats([s["running"] for s in samples]),
        "first_serial_line_s": stats([s["first_line"] for s in samples]),
        "boot_marker_s": stats([s["booted"] for s in samples]),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pkv-bench-") as tmp:
        cluster = BenchCluster(Path(tmp) / "cluster", {})
        client = await cluster.start()
        try:
            publish_kernel_image(cluster.layout.images_dir)
            await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            disk, kernel = [], []
            for i in range(args.runs + 1):  # run 0 of each warms up (image pulls, page cache) and is not counted
                for label, make, samples in (("disk", demo_vm, disk), ("kernel", kernel_vm, kernel)):
                    figures = await one_boot(cluster, client, make(f"{label}-{i}"))
                    if i > 0:
                        samples.append(figures)
                    warm = " (warm-up)" if i == 0 else ""
                    log(f"{label} {i}{warm}: Running {figures['running']:.2f}s, first serial line "
                        f"{figures['first_line']:.2f}s, booted {figures['booted']:.2f}s")  # fmt: skip
        finally:
            await cluster.stop()
    result: dict[str, Any] = {"runs": args.runs, "disk_boot": summary(disk), "kernel_boot": summary(kernel)}
    for key in ("first_serial_line_s", "boot_marker_s"):
        saved = result["disk_boot"][key]["p50"] - result["kernel_boot"][key]["p50"]
        result[f"kernel_boot_saves_{key.removesuffix('_s')}_p50_s"] = round(saved, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--runs", type=at_least(1), default=5, help="measured boots of each kind (plus one warm-up each)"
    )
    args = parser.parse_args()
    if not GUEST_IMAGE.exists():
        raise SystemExit(f"{GUEST_IMAGE} is missing: run `make guest-image` first")
    figures = asyncio.run(run(args))
    print(json.dumps({"bench": "kernel_boot", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
