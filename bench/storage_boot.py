"""The storage benchmark's whole-cluster half: VM create → the guest's first serial line when it boots from a PVC
(the demo image imported by a DataVolume over http) against from its containerDisk, alternating in the same run;
then the virt-controller process's RSS (it runs the storage controller) idle and after `dvs` blank DataVolumes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from bench.harness import log, percentile, rss_mib
from bench.vm_start import GUEST_IMAGE, BenchCluster, demo_vm, vmi_running, wait_gone, wait_serial
from pykubevirt.api import pod_layout
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import DATA_VOLUMES, NAMESPACES, PERSISTENT_VOLUME_CLAIMS, VIRTUAL_MACHINES

NS = "bench"
BOOT_CLAIM = "boot-root"


def pvc_vm(name: str) -> dict[str, Any]:
    """The demo VM with its root disk on the imported claim instead of the containerDisk; nothing else differs."""
    vm = demo_vm(name)
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    volumes[0] = {"name": volumes[0]["name"], "persistentVolumeClaim": {"claimName": BOOT_CLAIM}}
    return vm


def data_volume(name: str, source: dict[str, Any], size: str) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {"source": source, "storage": {"resources": {"requests": {"storage": size}}}},
    }


async def wait_succeeded(client: KubeClient, names: list[str], timeout: float = 300) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            status = (await client.get(DATA_VOLUMES, name, NS)).get("status") or {}
            if status.get("phase") == "Succeeded":
                pending.discard(name)
            elif status.get("phase") == "Failed":
                raise RuntimeError(f"DataVolume {name} failed: {status}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"DataVolumes {sorted(pending)} not Succeeded")
        await asyncio.sleep(0.2)


async def first_line(cluster: BenchCluster, client: KubeClient, vm: dict[str, Any]) -> float:
    """Seconds from VM create to the first complete line on the guest's serial console; the VM is deleted after."""
    name = vm["metadata"]["name"]
    started = time.monotonic()
    await client.create(VIRTUAL_MACHINES, vm, NS)
    vmi = await vmi_running(client, NS, name)
    pod_uid = next(iter(vmi["status"]["activePods"]))
    serial = Path(pod_layout.serial_log(str(cluster.pods_dir), pod_uid, vmi["metadata"]["uid"]))
    elapsed = await wait_serial(serial, None) - started
    await client.delete(VIRTUAL_MACHINES, name, NS)
    await wait_gone(client, NS, name)
    return elapsed


async def boot_runs(cluster: BenchCluster, client: KubeClient, image_url: str, runs: int) -> dict[str, Any]:
    """containerDisk and PVC boots alternate (one warm-up of each first) so load drift hits both alike."""
    started = time.monotonic()
    await client.create(DATA_VOLUMES, data_volume(BOOT_CLAIM, {"http": {"url": image_url}}, "64Mi"), NS)
    await wait_succeeded(client, [BOOT_CLAIM])
    log(f"boot image imported into claim {BOOT_CLAIM} in {time.monotonic() - started:.2f}s")
    container_disk, pvc = [], []
    for i in range(runs + 1):
        cd = await first_line(cluster, client, demo_vm(f"cd-{i}"))
        pv = await first_line(cluster, client, pvc_vm(f"pvc-{i}"))
        warm = " (warm-up)" if i == 0 else ""
        log(f"boot {i}{warm}: containerDisk {cd:.2f}s, PVC {pv:.2f}s to the first serial line")
        if i > 0:
            container_disk.append(cd)
            pvc.append(pv)
    cd50, pv50 = percentile(container_disk, 50), percentile(pvc, 50)
    return {
        "runs": runs,
        "container_disk_first_line_s": {"p50": round(cd50, 2), "min": round(min(container_disk), 2)},
        "pvc_first_line_s": {"p50": round(pv50, 2), "min": round(min(pvc), 2)},
        "pvc_vs_container_disk_p50": round(pv50 / cd50, 3),
    }


async def controller_rss(cluster: BenchCluster, client: KubeClient, count: int) -> dict[str, Any]:
    """virt-controller's RSS idle, then with `count` blank DataVolumes imported and Succeeded (then deleted)."""
    pid = cluster.pid("virt-controller")
    idle = rss_mib(pid)
    names = [f"blank-{i}" for i in range(count)]
    started = time.monotonic()
    for name in names:
        await client.create(DATA_VOLUMES, data_volume(name, {"blank": {}}, "16Mi"), NS)
    await wait_succeeded(client, names)
    elapsed = time.monotonic() - started
    await asyncio.sleep(2)  # the informers' last events settle
    loaded = rss_mib(pid)
    for name in names:
        await client.delete(DATA_VOLUMES, name, NS)
    for name in names:
        with contextlib.suppress(NotFound):  # the DataVolume's deletion may have taken it
            await client.delete(PERSISTENT_VOLUME_CLAIMS, name, NS)
    log(f"{count} blank DataVolumes Succeeded in {elapsed:.1f}s; virt-controller RSS {idle:.1f} → {loaded:.1f} MiB")
    return {
        "dvs": count,
        "all_succeeded_s": round(elapsed, 1),
        "virt_controller_rss_mib": [round(idle, 1), round(loaded, 1)],
        "extra_rss_mib": round(loaded - idle, 1),
        "extra_rss_per_dv_kib": round((loaded - idle) * 1024 / count, 1) if count else None,
    }


async def cluster_figures(root: Path, image_url: str, runs: int, dvs: int) -> dict[str, Any]:
    if not GUEST_IMAGE.exists():
        raise SystemExit(f"{GUEST_IMAGE} is missing: run `make guest-image` first")
    cluster = BenchCluster(root, {})
    try:
        # Inside the try: a cluster that fails to come up still has components to stop.
        client = await cluster.start()
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        rss = await controller_rss(cluster, client, dvs)
        boot = await boot_runs(cluster, client, image_url, runs)
        return {"boot": boot, "controller": rss}
    finally:
        await cluster.stop()


def demo_image_copy(directory: Path) -> Path:
    """The demo guest image where the file server serves it (a copy: the bench owns its directory)."""
    target = directory / "demo-guest.img"
    target.write_bytes(GUEST_IMAGE.read_bytes())
    return target
