"""`pykubevirt up` / `status` / `down`: a supervised embedded cluster whose components restart after kill -9 and
whose guests outlive the control plane."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from tests.e2e.conftest import UpCluster, wait_for
from tests.paths import REPO
from tests.support.waiting import consistently_sync

pytestmark = pytest.mark.e2e

DEMO = str(REPO / "examples" / "vm-demo.yaml")
COMPONENTS = ("apiserver", "virt-controller", "scheduler", "node-node01", "virt-handler-node01", "webconsole")
# Where the node's virt-handler listens, as a kubectl jsonpath.
HANDLER_ADDRESS = "{.metadata.annotations." + c.HANDLER_ADDRESS_ANNOTATION.replace(".", "\\.") + "}"


def demo_qemu_pid(cluster: UpCluster) -> int:
    pod_uid = cluster.jsonpath("vmi", "demo", "{.status.activePods}").split('"')[1]
    pid_file = Path(pod_layout.embed_root(pod_uid)) / "run" / "qemu" / "default_demo.pid"
    return int(pid_file.read_text())


def ensure_demo(cluster: UpCluster) -> None:
    """The demo VM applied (idempotent) and its VMI Running, whichever test runs first."""
    cluster.run("kubectl", "apply", "-f", DEMO)
    wait_for(lambda: cluster.jsonpath("vmi", "demo", "{.status.phase}") == "Running", "the demo VMI Running", 120)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_up_twice_is_a_no_op_and_status_shows_components_and_nodes(up_cluster: UpCluster) -> None:
    again = up_cluster.run("pykubevirt", "up")
    assert "already running" in again.stdout
    status = up_cluster.run("pykubevirt", "status").stdout
    for component in COMPONENTS:
        line = next(x for x in status.splitlines() if x.startswith(component + " "))
        assert line.split()[1] == "Running", status
    node_line = next(x for x in status.splitlines() if x.startswith("node01 "))
    assert node_line.split()[1:3] == ["Ready", "true"], status


def test_components_are_pods_whose_logs_kubectl_reads(up_cluster: UpCluster) -> None:
    pods = up_cluster.run("kubectl", "get", "pods", "-n", "kubevirt", "--no-headers").stdout
    names = {line.split()[0]: line.split()[2] for line in pods.splitlines()}
    assert names == {
        "virt-api-node01": "Running",
        "virt-controller-node01": "Running",
        "virt-handler-node01": "Running",
    }
    for label in ("virt-api", "virt-controller", "virt-handler"):
        selected = up_cluster.run(
            "kubectl", "get", "pods", "-n", "kubevirt", "-l", f"kubevirt.io={label}", "-o", "name"
        )
        assert selected.stdout.strip() == f"pod/{label}-node01"
    logs = up_cluster.run("kubectl", "logs", "-n", "kubevirt", "-l", "kubevirt.io=virt-handler", "--tail=100").stdout
    assert "virt-handler starting on node node01" in logs
    scheduler = up_cluster.run("kubectl", "get", "pods", "-n", "kube-system", "-l", "component=kube-scheduler")
    assert "kube-scheduler-node01" in scheduler.stdout


def test_every_component_killed_is_restarted_and_the_guest_keeps_running(up_cluster: UpCluster) -> None:
    ensure_demo(up_cluster)
    uid = up_cluster.jsonpath("vmi", "demo", "{.metadata.uid}")
    qemu = demo_qemu_pid(up_cluster)
    old_address = up_cluster.jsonpath("node", "node01", HANDLER_ADDRESS)
    console_file = up_cluster.data_dir / "run" / "webconsole-address"
    console_address, console_written = console_file.read_text(), console_file.stat().st_mtime_ns
    for component in COMPONENTS:
        before = up_cluster.state()["components"][component]
        os.kill(before["pid"], signal.SIGKILL)

        def restarted(name: str = component, old: int = before["pid"]) -> bool:
            now = up_cluster.state()["components"][name]
            return bool(now["running"]) and now["pid"] != old and alive(now["pid"])

        wait_for(restarted, f"{component} to be restarted")
        assert up_cluster.state()["components"][component]["restarts"] == before["restarts"] + 1
        assert alive(qemu), f"killing {component} took the guest down"
    # The restarted web console took its old port back: the URL `up` printed still works.
    wait_for(
        lambda: console_file.stat().st_mtime_ns != console_written and console_file.read_text() == console_address,
        "the restarted web console on its old address",
    )
    # The restarted control plane still drives the same guest, once the new virt-handler has said where it listens.
    wait_for(lambda: up_cluster.jsonpath("node", "node01", HANDLER_ADDRESS) not in ("", old_address), "virt-handler")
    wait_for(lambda: up_cluster.jsonpath("vmi", "demo", "{.status.phase}") == "Running", "VMI Running")
    assert up_cluster.jsonpath("vmi", "demo", "{.metadata.uid}") == uid
    up_cluster.run("virtctl", "pause", "vm", "demo")
    wait_for(lambda: up_cluster.jsonpath("vm", "demo", "{.status.printableStatus}") == "Paused", "Paused")
    up_cluster.run("virtctl", "unpause", "vm", "demo")
    wait_for(lambda: up_cluster.jsonpath("vm", "demo", "{.status.printableStatus}") == "Running", "Running again")
    assert alive(qemu)


def test_down_and_up_leave_the_running_guest_alone(up_cluster: UpCluster) -> None:
    ensure_demo(up_cluster)
    uid = up_cluster.jsonpath("vmi", "demo", "{.metadata.uid}")
    qemu = demo_qemu_pid(up_cluster)
    old_address = up_cluster.jsonpath("node", "node01", HANDLER_ADDRESS)
    down = up_cluster.run("pykubevirt", "down")
    assert "running guests keep running" in down.stdout
    assert up_cluster.run("pykubevirt", "status", check=False).returncode == 1
    assert alive(qemu)
    up_cluster.run("pykubevirt", "up")
    # The new virt-handler has said where it listens, so it has started and synced; the guest stays as it was.
    wait_for(lambda: up_cluster.jsonpath("node", "node01", HANDLER_ADDRESS) not in ("", old_address), "virt-handler")

    def guest_untouched() -> bool:
        assert up_cluster.jsonpath("vmi", "demo", "{.metadata.uid}") == uid
        assert up_cluster.jsonpath("vmi", "demo", "{.status.phase}") == "Running"
        assert alive(qemu)
        return True

    consistently_sync(guest_untouched, for_=3, interval=0.5)


def test_down_all_stops_every_guest(up_cluster: UpCluster) -> None:
    ensure_demo(up_cluster)
    qemu = demo_qemu_pid(up_cluster)
    uid = up_cluster.jsonpath("vmi", "demo", "{.metadata.uid}")
    assert "every guest" in up_cluster.run("pykubevirt", "down", "--all").stdout
    wait_for(lambda: not alive(qemu), "QEMU to be gone", timeout=15)
    # Up again: the old VMI fails with its dead launcher and the Always VM comes back with a new guest.
    up_cluster.run("pykubevirt", "up")

    def replaced() -> bool:
        vmi = up_cluster.jsonpath("vmi", "demo", "{.metadata.uid} {.status.phase}").split()
        return len(vmi) == 2 and vmi[0] != uid and vmi[1] == "Running"

    wait_for(replaced, "a new demo VMI Running", timeout=120)
    assert alive(demo_qemu_pid(up_cluster))
