"""Chaos soak: `pykubevirt up --nodes 2` with real guests, while every few seconds a random component is killed
(-9: API server, virt-controller, scheduler, a node agent, a virt-handler, a launcher) or a node is stopped and
resumed (SIGSTOP/SIGCONT of its agent and virt-handler; longer than the fence grace, the supervisor fences it), and
VMs are started, stopped and restarted through virtctl and ConfigMaps written through kubectl at the same time.

At the end, once the faults stop and the cluster has settled, it checks: every VM whose runStrategy wants it running
is Running; no VMI ever had two QEMUs (the process table is polled throughout); no QEMU without a live VMI and no
launcher without a pod; no acknowledged API write lost; no leaked pod directories, runtime dirs or namespaces; every
component answers (API server /healthz, node agents' and virt-handlers' /healthz, the rest running).

Run: .venv/bin/python -m bench.chaos --minutes 30 [--vms 6 --interval 8 --seed 1]
Prints progress on stderr and one JSON line on stdout: kills survived, VM operations done, invariants broken.
The exit code is 1 when an invariant is broken.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.cluster import DEMO_IMAGE
from tests.support.cluster_qemus import ClusterQemus
from tests.support.ports import free_port
from tests.support.small_guest import small_guest

from bench.arguments import at_least, positive
from bench.harness import cluster_env, log
from pykubevirt.api import pod_layout
from pykubevirt.node.pod_dirs import existing_pod_dirs
from pykubevirt.node.processes import is_alive, kill_group

REPO = Path(__file__).resolve().parent.parent
GUEST_IMAGE = REPO / "_output" / "guest" / "demo-guest.img"
CONTROL_PLANE = ("apiserver", "virt-controller", "scheduler")
FAULTS = ("apiserver", "virt-controller", "scheduler", "node-agent", "virt-handler", "launcher", "node-stop")


class Soak:
    """One soak: the cluster, the fault injector, the VM operations, the writes and the QEMU census."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.random = random.Random(args.seed)
        # The VM operations run on their own thread: their own generator keeps the faults' sequence the seed's.
        self.ops_random = random.Random(None if args.seed is None else args.seed + 1)
        self.data_dir = root / "data"
        self.listen = f"127.0.0.1:{free_port()}"
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.vms = [f"chaos-{i}" for i in range(args.vms)]
        self.kills: Counter[str] = Counter()
        self.vm_ops: Counter[str] = Counter()
        self.acknowledged: set[int] = set()
        self.most_qemus: Counter[str] = Counter()
        self.stopped: dict[int, float] = {}  # pid → when to SIGCONT it
        self.seen_pods: set[str] = set()  # every pod directory the nodes had: their runtime dirs must go with them
        self.qemus = ClusterQemus(self.data_dir)  # this cluster's only: other clusters on the host have guests too
        self._done = threading.Event()

    # ------------------------------------------------------------------------------------------------ commands

    def env(self) -> dict[str, str]:
        return cluster_env(self.data_dir, self.home, self.listen)

    def run(self, *argv: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout, input=stdin, check=False
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(list(argv), 124, "", "timed out")

    def get(self, *argv: str) -> Any:
        result = self.run("kubectl", "get", *argv, "-o", "json")
        return json.loads(result.stdout) if result.returncode == 0 else None

    def components(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads((self.data_dir / "run" / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return dict(state.get("components") or {})

    # ------------------------------------------------------------------------------------------------ the soak

    def start(self) -> None:
        log(f"starting `pykubevirt up --nodes 2` in {self.data_dir}")
        for argv in (
            ("pykubevirt", "image", "import", DEMO_IMAGE, str(self.args.image)),
            ("pykubevirt", "up", "--nodes", "2"),
        ):
            result = self.run(*argv, timeout=300)
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)}: {result.stdout}{result.stderr}")
        for name in self.vms:
            self.run("kubectl", "apply", "-f", "-", stdin=small_guest(name))
        self.wait_converged(300)
        log(f"{len(self.vms)} VMs Running")

    def soak(self) -> None:
        threads = [
            threading.Thread(target=loop, daemon=True)
            for loop in (self._census_loop, self._vm_ops_loop, self._writes_loop)
        ]
        for thread in threads:
            thread.start()
        end = time.monotonic() + self.args.minutes * 60
        while time.monotonic() < end:
            self._resume_due()
            self.inject(self.random.choice(FAULTS))
            deadline = time.monotonic() + self.args.interval
            while time.monotonic() < deadline:
                self._resume_due()
                time.sleep(0.5)
        self._done.set()
        for pid in list(self.stopped):
            self.stopped[pid] = 0.0
        self._resume_due()
        for thread in threads[1:]:
            thread.join(timeout=120)
        log(f"faults stopped: {dict(self.kills)}; VM operations: {dict(self.vm_ops)}")

    def inject(self, fault: str) -> None:
        components = self.components()
        node = self.random.choice(["node01", "node02"])
        if fault in CONTROL_PLANE:
            node = ""
        if fault in CONTROL_PLANE or fault in ("node-agent", "virt-handler"):
            name = {"node-agent": f"node-{node}", "virt-handler": f"virt-handler-{node}"}.get(fault, fault)
            pid = int((components.get(name) or {}).get("pid") or 0)
            if pid > 0 and pid not in self.stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    self.kills[fault] += 1
        elif fault == "launcher":
            records = [
                record
                for pod_dir in existing_pod_dirs(self.data_dir / "nodes" / node / "pods")
                for container, record in pod_dir.load_records().items()
                if container == "compute" and is_alive(record.pid, record.ticks)
            ]
            record = self.random.choice(records) if records else None
            if record is not None and kill_group(record.pid, record.ticks):
                self.kills[fault] += 1
        elif fault == "node-stop" and not self.stopped:
            # Sometimes shorter than the fence grace (the node comes back), sometimes longer (it is fenced).
            seconds = self.random.choice([5.0, 15.0, 45.0])
            for name in (f"node-{node}", f"virt-handler-{node}"):
                pid = int((components.get(name) or {}).get("pid") or 0)
                if pid > 0:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                        self.stopped[pid] = time.monotonic() + seconds
            self.kills[f"node-stop-{seconds:.0f}s"] += 1
        log(f"fault: {fault} {node}".rstrip())

    def _resume_due(self) -> None:
        now = time.monotonic()
        for pid, due in list(self.stopped.items()):
            if due <= now:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                del self.stopped[pid]

    def _census_loop(self) -> None:
        while not self._done.wait(0.5):
            for domain, count in self.qemus.count().items():
                self.most_qemus[domain] = max(self.most_qemus[domain], count)
            for node in ("node01", "node02"):
                self.seen_pods.update(d.uid for d in existing_pod_dirs(self.data_dir / "nodes" / node / "pods"))

    def _vm_ops_loop(self) -> None:
        while not self._done.wait(self.ops_random.uniform(3, 8)):
            name = self.ops_random.choice(self.vms)
            vm = self.get("vm", name)
            if vm is None:
                log(f"vm op skipped: {name} could not be read")
                continue
            # What a user would ask of the VM as it stands: virtctl refuses to start a running VM or stop a stopped one.
            halted = vm["spec"].get("runStrategy") == "Halted"
            op = "start" if halted else self.ops_random.choice(["stop", "restart"])
            result = self.run("virtctl", op, name, timeout=30)
            if result.returncode == 0:
                self.vm_ops[op] += 1
                log(f"vm op: virtctl {op} {name}")
            else:
                log(f"vm op failed: virtctl {op} {name}: {(result.stderr or result.stdout).strip()[:200]}")

    def _writes_loop(self) -> None:
        n = 0
        while not self._done.wait(2.0):
            n += 1
            result = self.run("kubectl", "create", "configmap", f"chaos-write-{n}", f"--from-literal=n={n}", timeout=30)
            if result.returncode == 0:
                self.acknowledged.add(n)

    # ------------------------------------------------------------------------------------------------ checks

    def not_converged(self) -> list[str]:
        """VMs not in the state their runStrategy asks for."""
        vms = self.get("vm") or {"items": []}
        vmis = {v["metadata"]["name"]: v for v in (self.get("vmi") or {"items": []})["items"]}
        wrong = []
        for vm in vms["items"]:
            name = vm["metadata"]["name"]
            strategy = vm["spec"].get("runStrategy")
            status = (vm.get("status") or {}).get("printableStatus")
            phase = ((vmis.get(name) or {}).get("status") or {}).get("phase")
            if strategy in ("Always", "RerunOnFailure") and (status != "Running" or phase != "Running"):
                wrong.append(f"{name}: {strategy} but {status}/{phase}")
            if strategy == "Halted" and name in vmis:
                wrong.append(f"{name}: Halted but its VMI is {phase}")
        return wrong

    def wait_converged(self, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        wrong = self.not_converged()
        while wrong and time.monotonic() < deadline:
            time.sleep(2)
            wrong = self.not_converged()
        return wrong

    def check(self) -> dict[str, list[str]]:
        broken: dict[str, list[str]] = {}
        broken["vm_not_in_wanted_state"] = self.wait_converged(self.args.settle)
        broken["two_qemus_for_one_vmi"] = [f"{d}: {n}" for d, n in self.most_qemus.items() if n > 1]
        pods = (self.get("pods", "-A") or {"items": []})["items"]
        pod_uids = {p["metadata"]["uid"] for p in pods}
        vmis = (self.get("vmi") or {"items": []})["items"]
        live = {f"default_{v['metadata']['name']}" for v in vmis if (v.get("status") or {}).get("phase") == "Running"}
        broken["qemu_without_vmi"] = [d for d in self.qemus.count() if d not in live]
        launchers, leaked = [], []
        for node in ("node01", "node02"):
            for pod_dir in existing_pod_dirs(self.data_dir / "nodes" / node / "pods"):
                if pod_dir.uid in pod_uids:
                    continue
                leaked.append(f"{node}: pod dir {pod_dir.uid}")
                if any(is_alive(r.pid, r.ticks) for r in pod_dir.load_records().values()):
                    launchers.append(f"{node}: processes of deleted pod {pod_dir.uid}")
        gone = self.seen_pods - pod_uids
        leaked += [
            f"runtime dir of pod {uid}" for uid in sorted(gone) if Path(pod_layout.short_runtime_dir(uid)).exists()
        ]
        namespaces = (self.get("namespaces") or {"items": []})["items"]
        leaked += [
            f"namespace {n['metadata']['name']} stuck"
            for n in namespaces
            if n.get("status", {}).get("phase") == "Terminating"
        ]
        broken["launcher_without_pod"] = launchers
        broken["leaked"] = leaked
        present = {
            int(cm["metadata"]["name"].rsplit("-", 1)[1])
            for cm in (self.get("configmaps") or {"items": []})["items"]
            if cm["metadata"]["name"].startswith("chaos-write-")
        }
        broken["acknowledged_writes_lost"] = [str(n) for n in sorted(self.acknowledged - present)]
        broken["component_not_answering"] = self.unhealthy()
        return {k: v for k, v in broken.items() if v}

    def unhealthy(self) -> list[str]:
        wrong = [name for name, state in self.components().items() if not state.get("running")]
        if self.run("kubectl", "get", "--raw", "/healthz").stdout.strip() != "ok":
            wrong.append("apiserver /healthz")
        for node in ("node01", "node02"):
            obj = self.get("node", node) or {}
            port = ((obj.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint", {}).get("Port")
            address = ((obj.get("metadata") or {}).get("annotations") or {}).get("pykubevirt.io/virt-handler-address")
            # Each node agent listens on its node's own loopback address, the Node's InternalIP.
            internal = next(
                (a["address"] for a in (obj.get("status") or {}).get("addresses") or [] if a["type"] == "InternalIP"),
                "127.0.0.1",
            )
            for what, url in (
                (f"node-{node}", f"http://{internal}:{port}"),
                (f"virt-handler-{node}", f"http://{address}"),
            ):
                try:
                    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
                        if response.status != 200:
                            wrong.append(f"{what} /healthz {response.status}")
                except OSError as exc:
                    wrong.append(f"{what} /healthz: {exc}")
        return wrong

    def stop(self) -> None:
        self.run("pykubevirt", "down", "--all", timeout=120)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=positive, default=30.0)
    parser.add_argument("--vms", type=at_least(1), default=6)
    parser.add_argument("--interval", type=positive, default=8.0, help="seconds between faults")
    parser.add_argument(
        "--settle", type=positive, default=240.0, help="seconds the cluster gets to converge at the end"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--image", type=Path, default=GUEST_IMAGE, help="the demo guest image (make guest-image)")
    args = parser.parse_args()
    # A SIGTERM (a test's timeout, say) ends the soak through the `finally` below, which takes the cluster down.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    with tempfile.TemporaryDirectory(prefix="pykubevirt-chaos-") as root:
        soak = Soak(args, Path(root))
        try:
            soak.start()
            started = time.monotonic()
            soak.soak()
            broken = soak.check()
            elapsed = time.monotonic() - started
        finally:
            soak.stop()
    summary = {
        "minutes": round(elapsed / 60, 1),
        "kills_survived": sum(soak.kills.values()),
        "kills": dict(soak.kills),
        "vm_operations": sum(soak.vm_ops.values()),
        "vm_operations_by_kind": dict(soak.vm_ops),
        "acknowledged_writes": len(soak.acknowledged),
        "invariants_broken": sum(len(v) for v in broken.values()),
        "broken": broken,
    }
    print(json.dumps(summary), flush=True)
    log(
        f"kills survived: {summary['kills_survived']}, VM operations: {summary['vm_operations']}, "
        f"invariants broken: {summary['invariants_broken']} {broken or ''}"
    )
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
