"""Live migration cost: a VirtualMachineInstanceMigration on `pykubevirt up --nodes 2` against `virsh migrate` by hand.

1. Cluster: a guest printing a counter on its serial console every 100 ms is migrated from one node to the other.
   Measured: VMIM create → Succeeded, and the guest-observed pause (the longest gap, in host time, between two
   consecutive counter lines across the source's and the target's console logs, which a host thread tails).
2. By hand, in the same run: two private libvirtd (`launcher/libvirt_daemon.py`, as a migration target's launcher
   starts them), the same demo disk and memory, and `virsh migrate --live --p2p --persistent --undefinesource
   --copy-storage-inc` from one to the other: what libvirt alone takes, without the control plane.

Run: .venv/bin/python -m bench.migration [--memory 96Mi]
Prints progress on stderr and one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.cluster import DEMO_IMAGE
from tests.support.ports import free_port

from bench.harness import cluster_env, log, machine
from pykubevirt.api import pod_layout
from pykubevirt.api.quantity import Quantity
from pykubevirt.launcher.libvirt_daemon import PrivateLibvirtd

REPO = Path(__file__).resolve().parent.parent
GUEST_IMAGE = REPO / "_output" / "guest" / "demo-guest.img"
COUNTER = re.compile(rb"^counter (\d+) ")
USER_DATA = """#cloud-config
runcmd:
  - (i=0; while :; do i=$((i+1)); echo counter $i $(cut -d' ' -f1 /proc/uptime); usleep 100000; done) &
"""


class Cluster:
    def __init__(self, root: Path) -> None:
        self.data_dir = root / "data"
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.listen = f"127.0.0.1:{free_port()}"

    def env(self) -> dict[str, str]:
        return cluster_env(self.data_dir, self.home, self.listen)

    def run(self, *argv: str, timeout: float = 180, stdin: str | None = None) -> str:
        result = subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout, input=stdin, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
        return result.stdout

    def jsonpath(self, kind: str, name: str, path: str) -> str:
        try:
            return self.run("kubectl", "get", kind, name, "-o", f"jsonpath={path}")
        except RuntimeError:
            return ""


def wait(probe: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


class ConsoleTail(threading.Thread):
    """Host arrival times of counter lines in every console log of one VMI on the cluster's nodes."""

    def __init__(self, data_dir: Path, vmi_uid: str) -> None:
        super().__init__(daemon=True)
        self.data_dir = data_dir
        self.vmi_uid = vmi_uid
        self.lines: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        offsets: dict[Path, int] = {}
        while not self.stop.is_set():
            pattern = f"nodes/*/pods/*/volumes/private/{self.vmi_uid}/{pod_layout.SERIAL_LOG_NAME}"
            for path in self.data_dir.glob(pattern):
                try:
                    with path.open("rb") as log_file:
                        log_file.seek(offsets.get(path, 0))
                        data = log_file.read()
                except OSError:
                    continue
                complete = data[: data.rfind(b"\n") + 1]
                offsets[path] = offsets.get(path, 0) + len(complete)
                now = time.monotonic()
                for line in complete.splitlines():
                    match = COUNTER.match(line.strip())
                    if match:
                        self.lines.append((now, int(match.group(1))))
            time.sleep(0.01)

    def longest_pause(self, since: float) -> float:
        """The longest host-time gap between consecutive counter values after `since`."""
        ordered = sorted({n: t for t, n in self.lines if t >= since}.items())
        gaps = [b[1] - a[1] for a, b in itertools.pairwise(ordered) if b[0] == a[0] + 1]
        return max(gaps, default=0.0)


def guest(name: str, memory: str) -> str:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "domain": {
            "memory": {"guest": memory},
            "devices": {
                "interfaces": [{"name": "default", "masquerade": {}}],
                "disks": [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "ci", "disk": {"bus": "virtio"}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "root", "containerDisk": {"image": DEMO_IMAGE}},
            {"name": "ci", "cloudInitNoCloud": {"userData": USER_DATA}},
        ],
    }
    return json.dumps(
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": name}, "spec": spec}
    )


def cluster_migration(root: Path, memory: str) -> dict[str, Any]:
    cluster = Cluster(root)
    cluster.run("pykubevirt", "image", "import", DEMO_IMAGE, str(GUEST_IMAGE))
    cluster.run("pykubevirt", "up", "--nodes", "2", timeout=300)
    try:
        cluster.run("kubectl", "apply", "-f", "-", stdin=guest("bench-mig", memory))
        wait(lambda: cluster.jsonpath("vmi", "bench-mig", "{.status.phase}") == "Running", "VMI Running", 300)
        uid = cluster.jsonpath("vmi", "bench-mig", "{.metadata.uid}")
        tail = ConsoleTail(cluster.data_dir, uid)
        tail.start()
        wait(lambda: len(tail.lines) >= 20, "the guest counting", 300)
        log("guest counting; migrating")
        vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
        vmim |= {"metadata": {"name": "bench-move"}, "spec": {"vmiName": "bench-mig"}}
        started = time.monotonic()
        cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim))
        wait(
            lambda: cluster.jsonpath("vmim", "bench-move", "{.status.phase}") in ("Succeeded", "Failed"),
            "the migration",
            600,
        )
        total = time.monotonic() - started
        phase = cluster.jsonpath("vmim", "bench-move", "{.status.phase}")
        seen = len(tail.lines)
        wait(lambda: len(tail.lines) >= seen + 20, "the counter on the target", 120)
        tail.stop.set()
        return {"phase": phase, "vmim_total_s": round(total, 2), "guest_pause_s": round(tail.longest_pause(started), 3)}
    finally:
        subprocess.run(["pykubevirt", "down", "--all"], env=cluster.env(), capture_output=True, check=False)


DOMAIN = """<domain type='qemu'>
  <name>benchmig</name>
  <memory unit='KiB'>{kib}</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='/var/lib/libvirt/bench/disk.img'/>
      <target dev='vda' bus='virtio'/></disk>
    <serial type='file'><source path='/var/lib/libvirt/bench/serial.log'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>"""


def virsh(uri: str, *args: str) -> str:
    return subprocess.run(["virsh", "-c", uri, *args], check=True, capture_output=True, text=True).stdout


async def virsh_migration(root: Path, memory: str) -> dict[str, Any]:
    daemons = [
        PrivateLibvirtd(root / name, migration_address="", ports=(49700 + 50 * i, 49749 + 50 * i))
        for i, name in enumerate(("a", "b"))
    ]
    for daemon in daemons:
        await daemon.start()
    try:
        size = GUEST_IMAGE.stat().st_size
        for i, daemon in enumerate(daemons):
            bench_dir = daemon.directory / "lib" / "bench"
            bench_dir.mkdir(parents=True)
            if i == 0:
                shutil.copyfile(GUEST_IMAGE, bench_dir / "disk.img")
            else:
                with (bench_dir / "disk.img").open("wb") as empty:
                    empty.truncate(size)
        kib = int(Quantity.parse(memory).value // 1024)
        xml = root / "domain.xml"
        xml.write_text(DOMAIN.format(kib=kib))
        source, target = daemons
        await asyncio.to_thread(virsh, source.uri, "define", str(xml))
        await asyncio.to_thread(virsh, source.uri, "start", "benchmig")
        serial = source.directory / "lib" / "bench" / "serial.log"

        def booted() -> bool:
            return serial.exists() and b"ready" in serial.read_bytes()

        await asyncio.to_thread(wait, booted, "boot", 300)
        migrate = ("migrate", "--live", "--p2p", "--persistent", "--undefinesource", "--copy-storage-inc")
        started = time.monotonic()
        await asyncio.to_thread(virsh, source.uri, *migrate, "benchmig", target.uri)
        total = time.monotonic() - started
        state = (await asyncio.to_thread(virsh, target.uri, "domstate", "benchmig")).strip()
        await asyncio.to_thread(virsh, target.uri, "destroy", "benchmig")
        return {"virsh_migrate_s": round(total, 2), "target_state": state}
    finally:
        for daemon in daemons:
            await daemon.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="128Mi", help="guest memory (both runs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        root = Path(tmp)
        log("cluster migration")
        cluster = cluster_migration(root / "cluster", args.memory)
        log("virsh migrate by hand")
        # The daemons' sockets must stay within a unix socket path's length: a short directory under /run/pkv.
        short = Path(tempfile.mkdtemp(prefix="bm", dir=pod_layout.SHORT_RUNTIME_ROOT))
        try:
            by_hand = asyncio.run(virsh_migration(short, args.memory))
        finally:
            shutil.rmtree(short, ignore_errors=True)
    print(json.dumps({"bench": "migration", "memory": args.memory, **cluster, **by_hand, "machine": machine()}))
    return 0 if cluster["phase"] == "Succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
