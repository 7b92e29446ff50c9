"""DataVolume import throughput: a sparse qcow2 served over http on loopback, DataVolume create → Succeeded (the
storage controller, the scheduler and a node agent running the real importer pod), against fetching the same file
with curl and converting it with `qemu-img convert` in the same run (qcow2 needs random access, so qemu-img cannot
read it from a pipe: the baseline downloads, then converts, as CDI's scratch-space path does). Baseline and import
alternate and the best of each counts. The peak RSS of the import pod's processes (the importer and its qemu-img)
is sampled twice a second in one more, untimed, import: the /proc scan costs CPU the timed ones should not lose.
Then, through the whole embedded cluster with real QEMU (bench/storage_boot.py): VM create → first serial line
booting from a PVC against from a containerDisk, and virt-controller's extra RSS after `--dvs` DataVolumes.

Run: .venv/bin/python -m bench.storage [--size-mib 1024 --data-mib 128 --boot-runs 5 --dvs 50]
     .venv/bin/python -m bench.storage --quick     (small sizes, one run of each: a smoke run of a minute or two)
Prints progress on stderr and one JSON line with the figures on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.apiserver_process import APIServerProcess
from tests.support.storage_plane import storage_plane

from bench.arguments import at_least
from bench.harness import log, machine, rss_mib
from bench.storage_boot import cluster_figures, demo_image_copy
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import DATA_VOLUMES, NAMESPACES

MI = 1024 * 1024


def make_image(root: Path, size_mib: int, data_mib: int) -> Path:
    """A sparse qcow2 of `size_mib` virtual MiB holding `data_mib` MiB of data spread over it."""
    raw = root / "source.raw"
    with raw.open("wb") as out:
        out.truncate(size_mib * MI)
        step = max(size_mib // max(data_mib, 1), 1)
        block = os.urandom(MI)
        for i in range(0, size_mib, step)[:data_mib]:
            out.seek(i * MI)
            out.write(block)
    image = root / "source.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(image)], check=True)
    raw.unlink()
    return image


def baseline(url: str, root: Path) -> float:
    """curl the image, then qemu-img convert it to raw: seconds."""
    download, out = root / "baseline.qcow2", root / "baseline.raw"
    started = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-o", str(download), url], check=True)
    subprocess.run(["qemu-img", "convert", "-t", "writeback", "-O", "raw", str(download), str(out)], check=True)
    with out.open("rb+") as disk:
        os.fsync(disk.fileno())  # the importer makes its image durable before calling it disk.img
    elapsed = time.perf_counter() - started
    download.unlink()
    out.unlink()
    return elapsed


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def pod_processes(marker: str) -> list[int]:
    """The processes whose command line mentions `marker` (the importer) and their children (its qemu-img)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    importers = {pid for pid in parents if marker in _cmdline(pid)}
    return [pid for pid, parent in parents.items() if pid in importers or parent in importers]


async def sample_rss(stop: asyncio.Event, peaks: dict[str, float]) -> None:
    """Peak RSS of the import pod's processes; /proc is scanned twice a second (the scan itself costs CPU)."""
    while not stop.is_set():
        total = importer = qemu = 0.0
        for pid in await asyncio.to_thread(pod_processes, "cdi-importer"):
            with contextlib.suppress(OSError):
                rss = rss_mib(pid)
                command = _cmdline(pid)
                total += rss
                if "qemu-img" in command:
                    qemu += rss
                elif "exit_recorder" not in command:
                    importer += rss
        peaks["pod"] = max(peaks.get("pod", 0.0), total)
        peaks["importer"] = max(peaks.get("importer", 0.0), importer)
        peaks["qemu_img"] = max(peaks.get("qemu_img", 0.0), qemu)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


def file_server(directory: Path) -> tuple[subprocess.Popen[str], int]:
    """`python -m http.server` on a free loopback port, as its own process (stopped by its PID)."""
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline().split("port ")[1].split()[0])


async def import_once(admin: KubeClient, url: str, size_mib: int, name: str) -> float:
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"http": {"url": url}},
            "storage": {"resources": {"requests": {"storage": f"{size_mib}Mi"}}},
        },
    }
    started = time.perf_counter()
    await admin.create(DATA_VOLUMES, dv, "bench")
    phase = ""
    # A watch, not polling: the figure has no poll delay and the API server no extra load while the import runs.
    while True:
        async for event in admin.watch(DATA_VOLUMES, "bench", field_selector=f"metadata.name={name}"):
            status = event.object.get("status") or {}
            if status.get("phase") != phase:
                phase = str(status.get("phase"))
                log(f"  {time.perf_counter() - started:6.2f}s {phase} {status.get('progress', '')}")
            if phase == "Succeeded":
                return time.perf_counter() - started


async def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pykubevirt-bench-storage-"))
    log(f"making a {args.size_mib} MiB qcow2 with {args.data_mib} MiB of data under {root}")
    image = make_image(root, args.size_mib, args.data_mib)
    serve = root / "serve"
    serve.mkdir()
    image.rename(serve / image.name)
    server_process, port = file_server(serve)
    url = f"http://127.0.0.1:{port}/{image.name}"
    server = APIServerProcess(root / "apiserver").start()
    try:
        async with storage_plane(server, root, "bench-node") as plane:
            admin = plane.admin
            await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
            figures: dict[str, Any] = {"size_mib": args.size_mib, "data_mib": args.data_mib}
            figures["qcow2_file_mib"] = round((serve / image.name).stat().st_size / MI, 1)
            baselines, imports = [], []
            peaks: dict[str, float] = {}
            for attempt in range(args.repeat):
                log(f"baseline {attempt + 1}: curl + qemu-img convert")
                baselines.append(await asyncio.to_thread(baseline, url, root))
                log(f"import {attempt + 1}: DataVolume create → Succeeded")
                imports.append(await import_once(admin, url, args.size_mib, f"bench-{attempt}"))
                await admin.delete(DATA_VOLUMES, f"bench-{attempt}", "bench")
            log("one more import, untimed, for the import pod's peak RSS")
            stop = asyncio.Event()
            sampler = asyncio.create_task(sample_rss(stop, peaks))
            await import_once(admin, url, args.size_mib, "bench-rss")
            stop.set()
            await sampler
            await admin.delete(DATA_VOLUMES, "bench-rss", "bench")
            best_baseline, best_import = min(baselines), min(imports)
            figures.update(
                baseline_curl_convert_s=round(best_baseline, 2),
                dv_import_s=round(best_import, 2),
                dv_import_mib_per_s=round(args.size_mib / best_import, 1),
                baseline_mib_per_s=round(args.size_mib / best_baseline, 1),
                dv_vs_baseline=round(best_baseline / best_import, 2),
                import_pod_peak_rss_mib=round(peaks.get("pod", 0.0), 1),
                importer_peak_rss_mib=round(peaks.get("importer", 0.0), 1),
                qemu_img_peak_rss_mib=round(peaks.get("qemu_img", 0.0), 1),
            )
        if args.boot_runs:
            demo = demo_image_copy(serve)
            figures.update(
                await cluster_figures(
                    root / "cluster", f"http://127.0.0.1:{port}/{demo.name}", args.boot_runs, args.dvs
                )
            )
        return figures
    finally:
        server.stop()
        server_process.terminate()
        server_process.wait()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument(
        "--size-mib", type=at_least(1), default=1024, help="virtual size of the qcow2 (and of the DataVolume)"
    )
    parser.add_argument(
        "--data-mib", type=at_least(0), default=128, help="MiB of data in it, spread over the virtual size"
    )
    parser.add_argument(
        "--repeat", type=at_least(1), default=3, help="imports and baselines each; the best is reported"
    )
    parser.add_argument(
        "--boot-runs", type=at_least(0), default=5, help="measured boots of each kind (0: no cluster part)"
    )
    parser.add_argument("--dvs", type=at_least(0), default=50, help="blank DataVolumes for virt-controller's extra RSS")
    parser.add_argument("--quick", action="store_true", help="256 MiB image, 32 MiB data, one run of each, 5 DVs")
    args = parser.parse_args()
    if args.quick:
        args.size_mib, args.data_mib, args.repeat, args.boot_runs, args.dvs = 256, 32, 1, 1, 5
    if args.data_mib > args.size_mib:
        parser.error(f"--data-mib {args.data_mib} does not fit in --size-mib {args.size_mib}")
    figures = asyncio.run(run(args))
    print(json.dumps({"benchmark": "storage", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
