"""The raw libvirt side of bench/migration.py: `virsh migrate` between two private libvirtd, no control plane.

Two daemons as a migration target's launcher starts them (`launcher/libvirt_daemon.py`), the demo disk, the same
cloud-init ticker (and dirtying loop) as the cluster's guest, and `virsh migrate --live --p2p --persistent
--undefinesource --copy-storage-inc` from one to the other. Measured: the `virsh migrate` call, the ticker's gaps,
and the job statistics libvirt keeps on the target (bytes, downtime).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import libvirt

from bench.migration_ticker import ConsoleTail
from pykubevirt.api.quantity import Quantity
from pykubevirt.launcher.cloudinit import CloudInitData, build_iso
from pykubevirt.launcher.libvirt_daemon import PrivateLibvirtd

DOMAIN = """<domain type='qemu'>
  <name>benchmig</name>
  <memory unit='KiB'>{kib}</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/bench/disk.img'/>
      <target dev='vda' bus='virtio'/></disk>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/bench/ci.iso'/>
      <target dev='vdb' bus='virtio'/><readonly/></disk>
    <serial type='file'><source path='/var/lib/libvirt/bench/serial.log'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>"""

# The statistics both runs report, by libvirt's names (bytes and milliseconds).
JOB_FIELDS = ("time_elapsed", "downtime", "data_processed", "memory_processed", "disk_processed", "memory_iteration")


def completed_job(uri: str, name: str) -> dict[str, int]:
    """The last migration job's statistics as the target's libvirt recorded them (`virsh domjobinfo --completed`)."""
    try:
        conn = libvirt.open(uri)
    except libvirt.libvirtError:
        return {}
    try:
        stats = conn.lookupByName(name).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    except libvirt.libvirtError:
        return {}
    finally:
        conn.close()
    return {key: int(stats[key]) for key in JOB_FIELDS if key in stats}


def virsh(uri: str, *args: str) -> str:
    return subprocess.run(["virsh", "-c", uri, *args], check=True, capture_output=True, text=True).stdout


def wait(probe: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


async def virsh_migration(root: Path, image: Path, memory: str, user_data: str, base_port: int) -> dict[str, Any]:
    daemons = [
        PrivateLibvirtd(root / name, migration_address="", ports=(base_port + 50 * i, base_port + 49 + 50 * i))
        for i, name in enumerate(("a", "b"))
    ]
    for daemon in daemons:
        await daemon.start()
    try:
        iso = root / "ci.iso"
        meta = {"instance-id": "benchmig", "local-hostname": "benchmig"}
        await asyncio.to_thread(build_iso, CloudInitData("noCloud", user_data.encode(), b"", meta), iso)
        size = image.stat().st_size
        for i, daemon in enumerate(daemons):
            bench_dir = daemon.directory / "lib" / "bench"
            bench_dir.mkdir(parents=True)
            shutil.copyfile(iso, bench_dir / "ci.iso")
            if i == 0:
                shutil.copyfile(image, bench_dir / "disk.img")
            else:
                with (bench_dir / "disk.img").open("wb") as empty:
                    empty.truncate(size)
        kib = int(Quantity.parse(memory).value // 1024)
        xml = root / "domain.xml"
        xml.write_text(DOMAIN.format(kib=kib))
        source, target = daemons
        serials = [d.directory / "lib" / "bench" / "serial.log" for d in daemons]
        tail = ConsoleTail(lambda: [p for p in serials if p.exists()])
        tail.start()
        await asyncio.to_thread(virsh, source.uri, "define", str(xml))
        await asyncio.to_thread(virsh, source.uri, "start", "benchmig")
        await asyncio.to_thread(wait, lambda: len(tail.ticks) >= 300, "the guest ticking", 300)
        migrate = ("migrate", "--live", "--p2p", "--persistent", "--undefinesource", "--copy-storage-inc")
        started = time.time()
        await asyncio.to_thread(virsh, source.uri, *migrate, "--migrate-disks", "vda", "benchmig", target.uri)
        ended = time.time()
        await asyncio.to_thread(wait, lambda: tail.count_since(ended) >= 100, "the ticker on the target", 120)
        tail.stop.set()
        state = (await asyncio.to_thread(virsh, target.uri, "domstate", "benchmig")).strip()
        job = await asyncio.to_thread(completed_job, target.uri, "benchmig")
        await asyncio.to_thread(virsh, target.uri, "destroy", "benchmig")
        result: dict[str, Any] = {"total_s": round(ended - started, 2), "target_state": state, "job": job}
        result |= tail.gaps(started, time.time())
        result["host_gap_before_s"] = tail.gaps(started - 3, started)["host_gap_s"]
        return result
    finally:
        for daemon in daemons:
            await daemon.stop()
