"""Live migration cost: a VirtualMachineInstanceMigration on `pykubevirt up --nodes 2` against `virsh migrate` by hand.

For each guest size (`--memory`) and load (`--load idle,dirty`), in the same run and alternately:
1. Cluster: a guest ticking on its serial console every 10 ms (and, for `dirty`, rewriting `--dirty-fraction` of its
   memory in a loop) is migrated from one node to the other. Measured: VMIM create → Succeeded; when each phase and
   each `migrationState` step reached a watching client; the target launcher's private libvirtd start; the ticker's
   gaps (`bench/migration_ticker.py`); libvirt's job statistics on the target (bytes moved, downtime).
2. By hand (`bench/migration_by_hand.py`): the same disk, memory, ticker and load moved with `virsh migrate` between
   two private libvirtd: what libvirt alone takes.
`--compare-src DIR` also brings up a cluster from another source tree (e.g. `git archive <commit> src`): each case then
runs on it ("before"), on ours, and by hand, one after the other, so a change is measured before and after in one
run under the same load.

Run: .venv/bin/python -m bench.migration [--memory 128Mi,512Mi] [--load idle,dirty] [--compare-src DIR]
Prints progress on stderr and one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
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

from bench.arguments import comma_separated, fraction, memory_size, one_of
from bench.harness import cluster_env, log, machine
from bench.migration_by_hand import completed_job, virsh_migration
from bench.migration_ticker import ConsoleTail, user_data
from pykubevirt.api import pod_layout
from pykubevirt.api.quantity import Quantity
from pykubevirt.launcher.protocol import domain_name

REPO = Path(__file__).resolve().parent.parent
GUEST_IMAGE = REPO / "_output" / "guest" / "demo-guest.img"
PHASES = ("Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded")
VMI_STEPS = (
    ("handed_off", "{.status.migrationState.targetNode}"),
    ("target_listening", "{.status.migrationState.targetNodeAddress}"),
    ("source_started", "{.status.migrationState.startTimestamp}"),
    ("completed", "{.status.migrationState.completed}"),
)
LIBVIRTD_READY = re.compile(r"private libvirtd \d+ ready in ([\d.]+)s")


class Cluster:
    def __init__(self, root: Path, src: Path | None) -> None:
        self.data_dir = root / "data"
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.listen = f"127.0.0.1:{free_port()}"
        self.src = src

    def env(self) -> dict[str, str]:
        env = cluster_env(self.data_dir, self.home, self.listen)
        if self.src is not None:
            env["PYTHONPATH"] = f"{self.src}:{REPO}"
        return env

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


class Watch(threading.Thread):
    """`kubectl get -w -o jsonpath=…`: when each distinct line reached this client (wall time).

    A watch the API server ends (a loaded host) is opened again."""

    def __init__(self, cluster: Cluster, *argv: str) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.argv = ["kubectl", "get", *argv, "-w"]
        self.lines: list[tuple[float, str]] = []
        self.closed = threading.Event()
        self.process: subprocess.Popen[bytes] | None = None

    def run(self) -> None:
        while not self.closed.is_set():
            self.process = subprocess.Popen(
                self.argv, env=self.cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                line = raw.decode(errors="replace").strip()
                if not self.lines or self.lines[-1][1] != line:
                    self.lines.append((time.time(), line))
            self.process.wait()
            time.sleep(0.2)

    def first(self, predicate: Any) -> float | None:
        return next((t for t, line in self.lines if predicate(line)), None)

    def close(self) -> None:
        self.closed.set()
        if self.process is not None:
            self.process.terminate()
        self.join(timeout=5)


def wait(probe: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def guest(name: str, memory: str, data: str) -> str:
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
            {"name": "ci", "cloudInitNoCloud": {"userData": data}},
        ],
    }
    return json.dumps(
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": name}, "spec": spec}
    )


def phase_timeline(started: float, move: str, target_pod: str, watches: tuple[Watch, Watch, Watch]) -> dict[str, float]:
    """Seconds after the VMIM's create when each phase, `migrationState` step and target pod state was seen."""
    vmims, vmis, pods = watches
    timeline: dict[str, float] = {}
    for p in PHASES:
        at = vmims.first(lambda s, p=p: s.split() == [move, p])
        if at is not None:
            timeline[p] = round(at - started, 2)
    for i, (step, _) in enumerate(VMI_STEPS):
        at = vmis.first(lambda s, i=i: len(s.split("|")) > i and s.split("|")[i] not in ("", "false"))
        if at is not None and at >= started:
            timeline[step] = round(at - started, 2)
    seen = pods.first(lambda s: s.split()[:1] == [target_pod])
    ready = pods.first(lambda s: s.split() == [target_pod, "True"])
    if seen is not None:
        timeline["target_pod_created"] = round(seen - started, 2)
    if ready is not None:
        timeline["target_pod_ready"] = round(ready - started, 2)
    return timeline


def migrate_once(cluster: Cluster, name: str, memory: str, data: str) -> dict[str, Any]:
    """One guest started, ticking, migrated, measured and deleted."""
    cluster.run("kubectl", "apply", "-f", "-", stdin=guest(name, memory, data))
    wait(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 300)
    uid = cluster.jsonpath("vmi", name, "{.metadata.uid}")
    pattern = f"nodes/*/pods/*/volumes/private/{uid}/{pod_layout.SERIAL_LOG_NAME}"
    tail = ConsoleTail(lambda: list(cluster.data_dir.glob(pattern)))
    tail.start()
    wait(lambda: len(tail.ticks) >= 300, "the guest ticking", 300)
    move = f"{name}-move"
    phase_path = '{.metadata.name} {.status.phase}{"\\n"}'
    vmims = Watch(cluster, "vmim", "-o", f"jsonpath={phase_path}")
    steps = "|".join(path for _, path in VMI_STEPS)
    vmis = Watch(cluster, "vmi", name, "-o", f'jsonpath={steps}{{"\\n"}}')
    pod_path = '{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}'
    pods = Watch(cluster, "pods", "-o", f"jsonpath={pod_path}")
    for watch in (vmims, vmis, pods):
        watch.start()
    try:
        time.sleep(1.0)  # the watches' initial lists are in
        log(f"  {name}: ticking; migrating")
        vmim: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
        vmim |= {"metadata": {"name": move}, "spec": {"vmiName": name}}
        started = time.time()
        cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim))
        final = ("Succeeded", "Failed")
        polls = itertools.count()

        def finished() -> bool:
            if vmims.first(lambda s: s.split()[:1] == [move] and s.split()[-1] in final) is not None:
                return True
            # Every 2 s a plain read too, in case the watch missed the end.
            return next(polls) % 40 == 39 and cluster.jsonpath("vmim", move, "{.status.phase}") in final

        wait(finished, "VMIM", 240)
        ended = vmims.first(lambda s: s.split()[:1] == [move] and s.split()[-1] in final) or time.time()
        phase = cluster.jsonpath("vmim", move, "{.status.phase}")
        wait(lambda: tail.count_since(ended) >= 100, "the ticker on the target", 120)
    finally:
        tail.stop.set()
        for watch in (vmims, vmis, pods):
            watch.close()
    target_pod = cluster.jsonpath("vmim", move, "{.status.migrationState.targetPod}")
    timeline = phase_timeline(started, move, target_pod, (vmims, vmis, pods))
    result: dict[str, Any] = {"phase": phase, "total_s": round(ended - started, 2), "timeline": timeline}
    result |= tail.gaps(started, time.time())
    result["host_gap_before_s"] = tail.gaps(started - 3, started)["host_gap_s"]
    pod_uid = cluster.jsonpath("pod", target_pod, "{.metadata.uid}")
    daemon_dir = Path(pod_layout.short_runtime_dir(pod_uid)) / "d"
    uri = f"qemu+unix:///system?socket={daemon_dir / 'sock' / 'libvirt-sock'}"
    result["job"] = completed_job(uri, domain_name("default", name))
    try:
        logs = cluster.run("kubectl", "logs", target_pod, "-c", "compute")
        match = LIBVIRTD_READY.search(logs)
        if match:
            result["target_libvirtd_start_s"] = float(match.group(1))
    except RuntimeError:
        pass
    cluster.run("kubectl", "delete", "vmi", name, "--wait=false")
    cluster.run("kubectl", "delete", "vmim", move, "--wait=false")
    return result


def cases(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(memory, load, MiB the loop dirties) for each combination asked for."""
    out = []
    for memory in args.memory.split(","):
        for load in args.load.split(","):
            mib = int(Quantity.parse(memory).value * args.dirty_fraction / 2**20) if load == "dirty" else 0
            out.append((memory, load, mib))
    return out


def start_cluster(root: Path, src: Path | None, label: str) -> Cluster:
    cluster = Cluster(root / label, src)
    cluster.run("pykubevirt", "image", "import", DEMO_IMAGE, str(GUEST_IMAGE))
    cluster.run("pykubevirt", "up", "--nodes", "2", timeout=300)
    return cluster


def cluster_case(cluster: Cluster, name: str, memory: str, data: str) -> dict[str, Any]:
    """One cluster migration; a case that fails (a loaded host) is recorded as such and the run goes on."""
    try:
        return migrate_once(cluster, name, memory, data)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        log(f"  {name}: {exc}")
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            cluster.run("kubectl", "delete", "vmi", name, "--wait=false")
        return {"phase": "Error", "error": str(exc)[:300]}


def by_hand_case(memory: str, data: str) -> dict[str, Any]:
    short = Path(tempfile.mkdtemp(prefix="bm", dir=pod_layout.SHORT_RUNTIME_ROOT))
    try:
        return asyncio.run(virsh_migration(short, GUEST_IMAGE, memory, data, 49700))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        return {"error": str(exc)[:300]}
    finally:
        shutil.rmtree(short, ignore_errors=True)


def run(root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every case on each cluster in turn (before, ours), then by hand: the variants alternate within the run."""
    clusters: list[tuple[str, Cluster]] = []
    results = []
    try:
        if args.compare_src is not None:
            clusters.append(("before", start_cluster(root, args.compare_src.resolve(), "before")))
        clusters.append(("ours", start_cluster(root, None, "ours")))
        for i, (memory, load, mib) in enumerate(cases(args)):
            data = user_data(mib)
            entry: dict[str, Any] = {"memory": memory, "load": load, "dirty_mib": mib}
            for label, cluster in clusters:
                log(f"{label}: cluster migration {memory} {load}")
                entry[f"load_avg_{label}"] = round(os.getloadavg()[0], 1)
                entry[label] = cluster_case(cluster, f"bench-{i}", memory, data)
            if not args.skip_by_hand:
                log(f"virsh migrate {memory} {load}")
                entry["load_avg_by_hand"] = round(os.getloadavg()[0], 1)
                entry["by_hand"] = by_hand_case(memory, data)
                for label, _ in clusters:
                    if "total_s" in entry[label] and "total_s" in entry["by_hand"]:
                        ratio = entry[label]["total_s"] / max(entry["by_hand"]["total_s"], 0.01)
                        entry[f"ratio_{label}"] = round(ratio, 2)
            log(json.dumps(entry))
            results.append(entry)
    finally:
        for _, cluster in clusters:
            subprocess.run(["pykubevirt", "down", "--all"], env=cluster.env(), capture_output=True, check=False)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--memory", type=comma_separated(memory_size), default="128Mi,512Mi", help="guest memory sizes, comma-separated"
    )
    parser.add_argument(
        "--load",
        type=comma_separated(one_of("idle", "dirty")),
        default="idle,dirty",
        help="idle and/or dirty (a memory-dirtying loop)",
    )
    # The demo guest runs from its initramfs: a quarter of a 128 MiB guest rewritten in tmpfs gets it OOM-killed.
    parser.add_argument(
        "--dirty-fraction", type=fraction, default=0.0625, help="share of guest memory the loop rewrites"
    )
    parser.add_argument("--compare-src", type=Path, help="another src/ tree, run first as the 'before' cluster")
    parser.add_argument("--skip-by-hand", action="store_true", help="no virsh migrate runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-migration-") as tmp:
        root = Path(tmp)
        results = run(root, args)
    load = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps({"bench": "migration", "results": results, "load_avg_end": load, "machine": machine()}))
    return 0 if all(r["ours"].get("phase") == "Succeeded" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
