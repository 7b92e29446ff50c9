"""What masquerade costs a guest's traffic (bench.network --guest): one real QEMU guest in a pod's namespace with two
virtio NICs, tap0 behind the launcher's masquerade plumbing and a bare tap, measured by the same client through both
in alternating rounds, and from the host at the pod IP. Everything stays inside namespaces this bench creates."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import log, percentile
from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.launcher import cloudinit
from pykubevirt.node import netns
from pykubevirt.node.pod_network import PodNetwork

REPO = Path(__file__).resolve().parent.parent
GUEST_IMAGE = REPO / "_output" / "guest" / "demo-guest.img"
BARE_HOST, BARE_GUEST = "10.0.3.1", "10.0.3.2"
FILE_MIB = 16
CONNECTS = 20

# In the pod's namespace: the launcher's masquerade (no ports: everything forwarded), a bare tap with its own DHCP
# lease and no default route, then QEMU on both taps until killed.
POD_SIDE = f"""
import asyncio, sys
from pykubevirt.launcher import dhcp_server, masquerade

async def main():
    image, seed, console = sys.argv[1:4]
    pod = masquerade.pod_interface()
    transports = [await masquerade.plumb({{"name": "default", "masquerade": {{}}}}, pod, "bench")]
    batch = "tuntap add mode tap name tapb\\naddr add {BARE_HOST}/24 dev tapb\\nlink set tapb up\\n"
    await masquerade.run_checked(["ip", "-batch", "-"], batch)
    lease = dhcp_server.Lease("{BARE_GUEST}", 24, "", "{BARE_HOST}", pod.mtu)
    transports.append(await dhcp_server.serve("tapb", lease))
    qemu = await asyncio.create_subprocess_exec(
        "qemu-system-x86_64", "-accel", "tcg", "-m", "256", "-display", "none", "-monitor", "none",
        "-serial", "file:" + console, "-snapshot",
        "-drive", "file=" + image + ",if=virtio,format=raw",
        "-drive", "file=" + seed + ",if=virtio,format=raw,readonly=on",
        "-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=n0,mac=02:00:00:00:00:10",
        "-netdev", "tap,id=n1,ifname=tapb,script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=n1,mac=02:00:00:00:00:11",
    )
    print("started", qemu.pid, flush=True)
    await qemu.wait()

asyncio.run(main())
"""

# The client: CONNECTS timed TCP connects to port 80, then one HTTP download of /big, as JSON.
CLIENT = """
import json, socket, sys, time
host, connects = sys.argv[1], int(sys.argv[2])
def connect_time():
    s = socket.socket(); s.settimeout(10)
    t = time.perf_counter(); s.connect((host, 80)); took = time.perf_counter() - t; s.close()
    return took
rtts = [connect_time() for _ in range(connects)]
s = socket.create_connection((host, 80), timeout=30)
s.sendall(b"GET /big HTTP/1.0\\r\\n\\r\\n")
t = time.perf_counter(); total = 0
while True:
    chunk = s.recv(1 << 20)
    if not chunk:
        break
    total += len(chunk)
print(json.dumps({"rtts": rtts, "bytes": total, "seconds": time.perf_counter() - t}))
"""


def _seed_iso(directory: Path) -> Path:
    """A NoCloud disk whose runcmd puts a FILE_MIB file next to the guest's page."""
    user_data = f"#cloud-config\nruncmd:\n  - dd if=/dev/zero of=/www/big bs=1M count={FILE_MIB} 2>/dev/null\n"
    iso = directory / "seed.iso"
    data = cloudinit.CloudInitData(cloudinit.NO_CLOUD, user_data.encode(), b"", {"instance-id": "bench"})
    cloudinit.build_iso(data, iso)
    return iso


async def _client(ns: str | None, host: str, connects: int) -> dict[str, Any]:
    prefix = netns.enter_argv(ns) if ns else []
    out = await netns.run([*prefix, sys.executable, "-c", CLIENT, host, str(connects)])
    result: dict[str, Any] = json.loads(out)
    return result


async def _ready(ns: str | None, host: str, timeout: float = 240.0) -> None:  # noqa: ASYNC109
    """Until the guest serves the whole file at `host` (it boots under TCG, then writes the file)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await _client(ns, host, 0))["bytes"] > FILE_MIB << 20:
                return
        except (netns.NetworkError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the guest did not serve /big at {host}")
        await asyncio.sleep(1)


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    rtts = [r for run in runs for r in run["rtts"]]
    rates = [run["bytes"] / run["seconds"] / (1 << 20) for run in runs]
    return {
        "download_mib_s_median": round(statistics.median(rates), 1),
        "connect_rtt_p50_ms": round(percentile(rtts, 50) * 1000, 3),
        "connect_rtt_p95_ms": round(percentile(rtts, 95) * 1000, 3),
    }


async def measure_guest(rounds: int) -> dict[str, Any]:
    """Download throughput and connect RTT to one guest: bare tap, masquerade, and the pod IP from the host."""
    root = Path(tempfile.mkdtemp(prefix="bench-guest-network-"))
    cidr = choose_cluster_cidr(root)
    network = PodNetwork(cidr, "bench-guest", root / "node")
    uid = str(uuid.uuid4())
    side: asyncio.subprocess.Process | None = None
    try:
        await network.start(cidr.replace(".0.0/16", ".0.0/24"))
        pod_ip = (await network.setup({"metadata": {"uid": uid, "name": "guest", "namespace": "bench"}, "spec": {}}))[0]
        ns = network.netns_of(uid)
        assert ns is not None
        env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}:{REPO}"}
        argv = [*netns.enter_argv(ns), sys.executable, "-c", POD_SIDE]
        side = await asyncio.create_subprocess_exec(
            *argv, str(GUEST_IMAGE), str(_seed_iso(root)), str(root / "console.log"),
            stdout=asyncio.subprocess.PIPE, env=env, start_new_session=True,
        )  # fmt: skip
        assert side.stdout is not None
        log((await side.stdout.readline()).decode().strip())
        paths = {"tap": (ns, BARE_GUEST), "masquerade": (ns, "127.0.0.1"), "pod_ip_from_host": (None, pod_ip)}
        for where, host in paths.values():
            await _ready(where, host)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, (where, host) in paths.items():
                results[name].append(await _client(where, host, CONNECTS))
        figures: dict[str, Any] = {name: _summary(runs) for name, runs in results.items()}
        tap, masq = figures["tap"], figures["masquerade"]
        figures["masquerade_over_tap"] = {
            "download": round(masq["download_mib_s_median"] / tap["download_mib_s_median"], 3),
            "connect_rtt_p50": round(masq["connect_rtt_p50_ms"] / tap["connect_rtt_p50_ms"], 3),
        }
        figures.update(rounds=rounds, file_mib=FILE_MIB, connects_per_round=CONNECTS, accel="tcg")
        log(json.dumps(figures, indent=2))
        return figures
    finally:
        if side is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(side.pid, signal.SIGKILL)  # the pod side and its QEMU, a session of their own
            await side.wait()
        await network.teardown(uid)
        release_cluster_network(root)
        shutil.rmtree(root, ignore_errors=True)
