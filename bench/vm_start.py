"""VM start latency and memory per VM, through the whole embedded cluster, against raw libvirt in the same run.

(a) raw libvirt: define + create of the demo VM's domain XML on a `qemu:///embed` connection in this process;
(b) VM create → VMI `Running` through pykubevirt; (c) VM create → the guest's first serial line (and its boot marker).
Then the memory of running VMs (launcher, QEMU, and virt-handler / node agent growth per VM), and a density run:
`--density` VMIs on one node with launchers on libvirt's test driver, time to all Running and total RSS.

    python -m bench.vm_start --runs 10 --density 200
    python -m bench.vm_start --runs 0 --density 1000     # the density run alone
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import libvirt
import yaml

from bench.arguments import at_least
from bench.harness import cpu_seconds, load_average, log, machine, percentile, pss_mib, rss_mib
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.api import pod_layout
from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.component_process import ComponentProcess
from pykubevirt.cli.kubeconfig_command import write_node_kubeconfig
from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import NAMESPACES, NODES, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.vmi_from_vm import vmi_from_vm
from pykubevirt.handler.launcher_client import LauncherClient
from pykubevirt.launcher import disks
from pykubevirt.launcher.converter import ConverterContext, convert
from pykubevirt.launcher.domain_manager import embed_uri, register_event_loop
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.teardown import kill_node_pods

REPO = Path(__file__).resolve().parent.parent
DEMO = yaml.safe_load((REPO / "examples" / "vm-demo.yaml").read_text())
IMAGE = str(DEMO["spec"]["template"]["spec"]["volumes"][0]["containerDisk"]["image"])
GUEST_IMAGE = REPO / "_output" / "guest" / "demo-guest.img"
BOOTED = b"pykubevirt-guest: booted"
KUBEVIRT_LAUNCHER_BUDGET_MIB = 240  # KubeVirt's fixed memory overhead reserved per virt-launcher pod
# The kubeconfigs the API server writes for its components as it starts.
COMPONENT_KUBECONFIGS = ("scheduler", "virt-api", "virt-controller", "virt-handler")


def demo_vm(name: str) -> dict[str, Any]:
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": name}
    vm["spec"]["template"]["metadata"]["labels"]["kubevirt.io/domain"] = name
    vm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 5
    return vm


def stats(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 50), 3), "p95": round(percentile(values, 95), 3)}


# ------------------------------------------------------------------------------------------------ the cluster


class BenchCluster:
    """`pykubevirt up`'s components (ClusterLayout) as child processes of the benchmark."""

    def __init__(self, root: Path, extra: dict[str, tuple[str, ...]]) -> None:
        self.layout = ClusterLayout(root, listen="127.0.0.1:0", extra_args=extra)
        self.processes: dict[str, ComponentProcess] = {}
        self.client: KubeClient | None = None

    async def start(self) -> KubeClient:
        store = ImageStore(self.layout.images_dir)
        store.import_file(IMAGE, GUEST_IMAGE)
        for component in self.layout.components():
            self.processes[component.name] = ComponentProcess(component).start()
            if component.name == "apiserver":
                await self._wait_for(self._apiserver_wrote_kubeconfigs, 30, "the API server")
                # The node agents' own identities, as the supervisor writes them before it starts them; only once
                # the API server has written its components' tokens, or its last save of tokens.csv drops them.
                for node in self.layout.node_names:
                    write_node_kubeconfig(self.layout, node)
        self.client = KubeClient(load_kubeconfig(self.layout.kubeconfig), qps=0)
        await self._wait_for_nodes()
        return self.client

    def _apiserver_wrote_kubeconfigs(self) -> bool:
        return all(self.layout.component_kubeconfig(c).exists() for c in COMPONENT_KUBECONFIGS)

    async def _wait_for(self, probe: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        while not probe():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not come up")
            await asyncio.sleep(0.05)

    async def _wait_for_nodes(self) -> None:
        assert self.client is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            nodes = (await self.client.list(NODES))["items"]
            if nodes and all(
                (n["metadata"].get("labels") or {}).get("kubevirt.io/schedulable") == "true" for n in nodes
            ):
                return
            await asyncio.sleep(0.2)
        raise TimeoutError("the node never became schedulable")

    def pid(self, name: str) -> int:
        return self.processes[name].pid

    @property
    def pods_dir(self) -> Path:
        return self.layout.node_dir(self.layout.node_names[0]) / "pods"

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        for process in reversed(list(self.processes.values())):
            process.stop()
        # Whatever launchers and guests the stopped node agent left behind.
        for node in self.layout.node_names:
            kill_node_pods(self.layout.node_dir(node))


async def vmi_running(client: KubeClient, ns: str, name: str, timeout: float = 120) -> dict[str, Any]:  # noqa: ASYNC109
    """The VMI once its phase is Running, from a watch (no polling delay in the figure)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        async for event in client.watch(VIRTUAL_MACHINE_INSTANCES, ns, field_selector=f"metadata.name={name}"):
            if (event.object.get("status") or {}).get("phase") == "Running":
                return event.object
    raise TimeoutError(f"VMI {ns}/{name} not Running")


async def wait_serial(path: Path, needle: bytes | None, timeout: float = 120) -> float:  # noqa: ASYNC109
    """When the serial log first holds a complete line (needle None) or `needle`; polled every 20 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            content = path.read_bytes()
        except FileNotFoundError:
            content = b""
        if (needle is None and b"\n" in content.strip(b"\r\n\x00 ")) or (needle is not None and needle in content):
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise TimeoutError(f"serial log {path} never showed {needle!r}")


# ------------------------------------------------------------------------------------------------ (b) and (c)


async def pykubevirt_runs(cluster: BenchCluster, client: KubeClient, runs: int) -> dict[str, Any]:
    ns = "bench"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    running, first_line, booted = [], [], []
    launcher_rss, launcher_pss, qemu_rss = [], [], []
    for i in range(runs + 1):  # run 0 warms up (KVM probe cache, page cache) and is not counted
        name = f"start-{i}"
        started = time.monotonic()
        await client.create(VIRTUAL_MACHINES, demo_vm(name), ns)
        vmi = await vmi_running(client, ns, name)
        t_running = time.monotonic()
        pod_uid = next(iter(vmi["status"]["activePods"]))
        serial = Path(pod_layout.serial_log(str(cluster.pods_dir), pod_uid, vmi["metadata"]["uid"]))
        t_line = await wait_serial(serial, None)
        t_booted = await wait_serial(serial, BOOTED)
        socket = Path(pod_layout.launcher_socket(str(cluster.pods_dir), pod_uid))
        launcher_pid = int((await LauncherClient(socket).request("ping"))["pid"])
        qemu_pid_file = Path(pod_layout.embed_root(pod_uid)) / "run" / "qemu" / f"{ns}_{name}.pid"
        qemu_pid = int(qemu_pid_file.read_text())
        if i > 0:
            running.append(t_running - started)
            first_line.append(t_line - started)
            booted.append(t_booted - started)
            launcher_rss.append(rss_mib(launcher_pid))
            launcher_pss.append(pss_mib(launcher_pid))
            qemu_rss.append(rss_mib(qemu_pid))
        log(f"run {i}: Running {t_running - started:.2f}s, first serial line {t_line - started:.2f}s, "
            f"booted {t_booted - started:.2f}s")  # fmt: skip
        await client.delete(VIRTUAL_MACHINES, name, ns)
        await wait_gone(client, ns, name)
    return {
        "running_s": stats(running),
        "first_serial_line_s": stats(first_line),
        "boot_marker_s": stats(booted),
        "launcher_rss_mib": stats(launcher_rss),
        "launcher_pss_mib": stats(launcher_pss),
        "qemu_rss_mib": stats(qemu_rss),
    }


async def wait_gone(client: KubeClient, ns: str, name: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            await client.get(VIRTUAL_MACHINE_INSTANCES, name, ns)
        except NotFound:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"VMI {ns}/{name} was not deleted")


async def per_vm_growth(cluster: BenchCluster, client: KubeClient, count: int) -> dict[str, Any]:
    """virt-handler and node agent RSS growth per running VM (`count` VMs running at once)."""
    ns = "bench"
    handler_pid = cluster.pid(f"virt-handler-{cluster.layout.node_names[0]}")
    agent_pid = cluster.pid(f"node-{cluster.layout.node_names[0]}")
    handler_before, agent_before = rss_mib(handler_pid), rss_mib(agent_pid)
    names = [f"mem-{i}" for i in range(count)]
    for name in names:
        await client.create(VIRTUAL_MACHINES, demo_vm(name), ns)
    for name in names:
        await vmi_running(client, ns, name)
    await asyncio.sleep(2)
    handler_after, agent_after = rss_mib(handler_pid), rss_mib(agent_pid)
    for name in names:
        await client.delete(VIRTUAL_MACHINES, name, ns)
    for name in names:
        await wait_gone(client, ns, name)
    return {
        "vms": count,
        "handler_rss_mib": [round(handler_before, 1), round(handler_after, 1)],
        "handler_per_vm_mib": round((handler_after - handler_before) / count, 2),
        "node_agent_rss_mib": [round(agent_before, 1), round(agent_after, 1)],
        "node_agent_per_vm_mib": round((agent_after - agent_before) / count, 2),
    }


# ------------------------------------------------------------------------------------------------ (a) raw libvirt


async def raw_libvirt_runs(work: Path, runs: int) -> dict[str, Any]:
    """The demo VM's domain XML (same converter, same prepared disks) defined and started on plain libvirt."""
    register_event_loop()
    vm = demo_vm("raw")
    vm["metadata"].update(namespace="bench", uid="00000000-0000-4000-8000-000000000001")
    vmi = vmi_from_vm(vm, ClusterConfig())
    vmi["metadata"]["uid"] = "00000000-0000-4000-8000-000000000002"
    vmi.setdefault("status", {})
    mutate_vmi(vmi, AdmissionContext(), operation="CREATE")
    root = Path(tempfile.mkdtemp(prefix="r", dir="/run"))
    ctx = ConverterContext(
        use_emulation=True,
        private_dir=str(root / "private"),
        ephemeral_disk_dir=str(work / "ephemeral"),
        container_disk_dir=str(work / "container-disks"),
        libvirt_runtime_dir=str(work / "libvirt-runtime"),
        network_mode="user",
        direct_io=disks.direct_io_supported(work),
    )
    (root / "private" / vmi["metadata"]["uid"]).mkdir(parents=True)
    backing = ImageStore(work / "images")
    backing.import_file(IMAGE, GUEST_IMAGE)
    image = backing.lookup(IMAGE)
    assert image is not None
    conn = await asyncio.to_thread(libvirt.open, embed_uri(root / "lv"))
    define_create, first_line, booted = [], [], []
    try:
        for i in range(runs + 1):
            overlay = work / "ephemeral" / "disk-data" / "rootdisk" / "disk.qcow2"
            overlay.unlink(missing_ok=True)
            container_disks = {"rootdisk": await disks.prepare_container_disk(image, overlay)}
            iso = work / "ephemeral" / "cloud-init-data" / "bench" / "raw" / "noCloud.iso"
            await disks.prepare_cloud_init(vmi, "noCloud", iso)
            xml = convert(vmi, replace(ctx, container_disks=container_disks))
            serial = root / "private" / vmi["metadata"]["uid"] / pod_layout.SERIAL_LOG_NAME
            serial.unlink(missing_ok=True)
            started = time.monotonic()
            dom = await asyncio.to_thread(conn.defineXML, xml)
            await asyncio.to_thread(dom.create)
            t_created = time.monotonic()
            t_line = await wait_serial(serial, None)
            t_booted = await wait_serial(serial, BOOTED)
            if i > 0:
                define_create.append(t_created - started)
                first_line.append(t_line - started)
                booted.append(t_booted - started)
            log(f"raw {i}: define+create {t_created - started:.3f}s, first serial line {t_line - started:.2f}s")
            await asyncio.to_thread(dom.destroy)
            await asyncio.to_thread(dom.undefine)
    finally:
        conn.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "define_create_s": stats(define_create),
        "first_serial_line_s": stats(first_line),
        "boot_marker_s": stats(booted),
    }


# ------------------------------------------------------------------------------------------------ density


STEADY_WINDOW_SECONDS = 10.0


def mem_available_mib() -> float:
    """The machine's MemAvailable: what all the pods' processes together took, shared pages counted once."""
    text = Path("/proc/meminfo").read_text()
    return int(text.split("MemAvailable:")[1].split()[0]) / 1024


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def settled(
    pids: dict[str, int], *, quiet_cpu_s: float = 0.05, window_s: float = 2.0, limit_s: float = 30.0
) -> None:
    """Return once the processes together used under `quiet_cpu_s` of CPU in `window_s`: their start-up work (first
    lists, image store, node status) is then not counted as the VMIs' cost. Gives up after `limit_s`."""
    deadline = time.monotonic() + limit_s
    used = sum(cpu_seconds(pid) for pid in pids.values())
    while time.monotonic() < deadline:
        await asyncio.sleep(window_s)
        now = sum(cpu_seconds(pid) for pid in pids.values())
        if now - used < quiet_cpu_s:
            return
        used = now
    log(f"density: the node's agents were still busy after {limit_s:.0f}s; measuring from here")


async def wait_all_running(
    count: int,
    running: set[str],
    done: asyncio.Event,
    creating: asyncio.Task[None],
    started: float,
    memory_floor_mib: float,
) -> float:
    """Wait until `count` VMIs run; the running VMIs integrated over time (what the agents' periodic syncs scale
    with). MemoryError when the machine's available memory falls under the floor first."""
    pod_seconds = 0.0
    last_report = 0.0
    while not done.is_set():
        await asyncio.sleep(0.25)
        pod_seconds += 0.25 * len(running)
        if creating.done():
            creating.result()  # a create that failed ends the run with its error
        if time.monotonic() - last_report > 10:
            last_report = time.monotonic()
            log(
                f"density: {len(running)}/{count} Running after {time.monotonic() - started:.0f}s, "
                f"{mem_available_mib():.0f} MiB available"
            )
        if mem_available_mib() < memory_floor_mib:
            raise MemoryError(
                f"stopped with {len(running)}/{count} VMIs Running after {time.monotonic() - started:.0f}s: only "
                f"{mem_available_mib():.0f} MiB of the machine's memory left"
            )
        if time.monotonic() - started > 1800:
            raise TimeoutError(f"only {len(running)}/{count} VMIs Running after 30 minutes")
    return pod_seconds


async def density_run(
    root: Path, count: int, *, fork_server: bool = True, memory_floor_mib: float = 1536
) -> dict[str, Any]:
    """`count` VMIs on one node, launchers on libvirt's test driver (no QEMU): time to all Running, total RSS.
    Stops with an error before the machine's available memory falls under `memory_floor_mib`."""
    extra = {
        "virt-controller": ("--launcher-libvirt-uri", "test:///default"),
        "node": (
            *("--max-pods", str(count + 10), "--capacity-override", f"memory={count}Gi"),
            *("--capacity-override", f"cpu={count // 5 + 2}"),  # 100m a launcher, with room for the others
            "--fork-server" if fork_server else "--no-fork-server",
        ),
    }
    cluster = BenchCluster(root, extra)
    client = await cluster.start()
    node = cluster.layout.node_names[0]
    agents = {"node_agent": cluster.pid(f"node-{node}"), "virt_handler": cluster.pid(f"virt-handler-{node}")}
    try:
        await settled(agents)
        idle = {k: (rss_mib(pid), cpu_seconds(pid)) for k, pid in agents.items()}
        available_before = mem_available_mib()
        ns = "density"
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        template = demo_vm("x")["spec"]["template"]
        running: set[str] = set()
        done = asyncio.Event()

        async def follow() -> None:
            while not done.is_set():
                async for event in client.watch(VIRTUAL_MACHINE_INSTANCES, ns):
                    if (event.object.get("status") or {}).get("phase") == "Running":
                        running.add(event.object["metadata"]["name"])
                        if len(running) >= count:
                            done.set()
                            return

        watcher = asyncio.create_task(follow())
        started = time.monotonic()

        async def create_all() -> None:
            for i in range(count):
                vmi = {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "metadata": {"name": f"dense-{i:04d}"},
                    "spec": copy.deepcopy(template["spec"]),
                }
                await client.create(VIRTUAL_MACHINE_INSTANCES, vmi, ns)

        # The memory floor is watched from the first create: pods start while the rest are still being created.
        creating = asyncio.create_task(create_all())
        try:
            pod_seconds = await wait_all_running(count, running, done, creating, started, memory_floor_mib)
        except MemoryError as exc:
            log(f"density: {exc}")
            watcher.cancel()
            return {
                "vmis": count,
                "fork_server": fork_server,
                "stopped": str(exc),
                "running_when_stopped": len(running),
                "stopped_after_s": round(time.monotonic() - started, 1),
                "machine_memory_per_running_vmi_mib": round(
                    (available_before - mem_available_mib()) / max(len(running), 1), 2
                ),
            }
        finally:
            creating.cancel()
        elapsed = time.monotonic() - started
        watcher.cancel()
        pids = await launcher_pids(cluster.pods_dir)
        # The agents' and launchers' steady cost with every VMI running (the node agent syncs each pod every 10 s):
        # it grows with the pods and the run's length, so it is told apart from the cost of a start.
        at_end = {k: cpu_seconds(pid) for k, pid in agents.items()}
        launchers_at_end = {pid: cpu_seconds(pid) for pid in pids}
        await asyncio.sleep(STEADY_WINDOW_SECONDS)
        steady = {k: (cpu_seconds(pid) - at_end[k]) / STEADY_WINDOW_SECONDS / count for k, pid in agents.items()}
        launcher_steady = [(cpu_seconds(pid) - used) / STEADY_WINDOW_SECONDS for pid, used in launchers_at_end.items()]
        used_per_vmi = (available_before - mem_available_mib()) / count
        launchers = [rss_mib(pid) for pid in pids]
        launchers_pss = [pss_mib(pid) for pid in pids]
        recorders_pss = [pss_mib(parent_pid(pid)) for pid in pids]
        components = {name: round(rss_mib(p.pid), 1) for name, p in cluster.processes.items()}
        per_vmi = {
            k: {
                "rss_mib": round((rss_mib(pid) - idle[k][0]) / count, 3),
                "cpu_s": round((at_end[k] - idle[k][1]) / count, 4),
                "steady_cpu_ms_per_vmi_second": round(steady[k] * 1000, 4),
                "start_cpu_s": round((at_end[k] - idle[k][1] - steady[k] * pod_seconds) / count, 4),
            }
            for k, pid in agents.items()
        }
        return {
            "vmis": count,
            "fork_server": fork_server,
            "all_running_s": round(elapsed, 1),
            "machine_memory_per_vmi_mib": round(used_per_vmi, 2),
            "load_average": load_average(),
            "per_vmi": per_vmi,
            "cpu_s": {name: round(cpu_seconds(p.pid), 1) for name, p in cluster.processes.items()},
            "launchers_measured": len(launchers),
            "launcher_steady_cpu_ms_per_second": round(1000 * sum(launcher_steady) / max(len(pids), 1), 4),
            "launcher_rss_mib": stats(launchers),
            "launchers_total_rss_mib": round(sum(launchers), 1),
            "launcher_pss_mib": stats(launchers_pss),
            "launchers_total_pss_mib": round(sum(launchers_pss), 1),
            "exit_recorder_pss_mib": stats(recorders_pss),
            "components_rss_mib": components,
            "total_rss_mib": round(sum(launchers) + sum(components.values()), 1),
        }
    finally:
        await cluster.stop()


async def launcher_pids(pods_dir: Path) -> list[int]:
    """The pid of each pod's launcher, as it answers a ping (a pod without a launcher yet is not counted)."""
    pids = []
    for pod_dir in pods_dir.iterdir():
        socket = Path(pod_layout.launcher_socket(str(pods_dir), pod_dir.name))
        try:
            pids.append(int((await LauncherClient(socket).request("ping"))["pid"]))
        except Exception:
            continue
    return pids


# ------------------------------------------------------------------------------------------------ main


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pkv-bench-") as tmp:
        work = Path(tmp)
        if args.runs == 0:
            figures["density"] = await density_run(work / "density", args.density, fork_server=args.fork_server)
            return figures
        figures["raw_libvirt"] = await raw_libvirt_runs(work / "raw", args.runs)
        cluster = BenchCluster(work / "cluster", {})
        client = await cluster.start()
        try:
            figures["pykubevirt"] = await pykubevirt_runs(cluster, client, args.runs)
            figures["per_vm_growth"] = await per_vm_growth(cluster, client, args.concurrent)
        finally:
            await cluster.stop()
        if args.density:
            figures["density"] = await density_run(work / "density", args.density, fork_server=args.fork_server)
    raw = figures["raw_libvirt"]["define_create_s"]["p50"]
    ours = figures["pykubevirt"]["running_s"]["p50"]
    figures["ratio_running_vs_raw_define_create_p50"] = round(ours / raw, 2) if raw else None
    launcher = figures["pykubevirt"]["launcher_rss_mib"]["p50"]
    per_vm = launcher + max(0.0, figures["per_vm_growth"]["handler_per_vm_mib"])
    figures["overhead_per_vm_mib"] = round(per_vm + max(0.0, figures["per_vm_growth"]["node_agent_per_vm_mib"]), 1)
    figures["kubevirt_launcher_budget_mib"] = KUBEVIRT_LAUNCHER_BUDGET_MIB
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--runs", type=at_least(0), default=10, help="measured starts per path (+1 warm-up); 0: density only"
    )
    parser.add_argument("--concurrent", type=at_least(1), default=5, help="VMs running at once for the per-VM growth")
    parser.add_argument(
        "--density", type=at_least(0), default=200, help="VMIs of the test-driver density run (0: skip)"
    )
    parser.add_argument(
        "--fork-server",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the node forks launchers from its preloaded Python (--no-fork-server: a fresh interpreter each)",
    )
    args = parser.parse_args()
    if args.runs == 0 and args.density == 0:
        parser.error("--runs 0 leaves only the density run: give it --density N")
    if not GUEST_IMAGE.exists():
        raise SystemExit(f"{GUEST_IMAGE} is missing: run `make guest-image` first")
    figures = asyncio.run(run(args))
    print(json.dumps({"bench": "vm_start", "machine": machine(), **figures}))


if __name__ == "__main__":
    main()
