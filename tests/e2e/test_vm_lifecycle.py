"""Real guests through the whole stack: VM → virt-controller → scheduler → node agent → virt-launcher (QEMU under
qemu:///embed, TCG here) → virt-handler → VMI status. Every component is its own process."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.client.resources import EVENTS, NODES, VIRTUAL_MACHINES
from pykubevirt.handler.launcher_client import LauncherClient
from pykubevirt.node.pod_network import ClusterNetwork, pod_netns
from tests.paths import REPO
from tests.support.cluster import ClusterView
from tests.support.waiting import consistently, eventually

pytestmark = pytest.mark.e2e

BOOTED = "pykubevirt-guest: booted"
DEMO = yaml.safe_load((REPO / "examples" / "vm-demo.yaml").read_text())


def demo_vm(
    name: str, *, run_strategy: str = "Always", user_data: str | None = None, grace: int = 10
) -> dict[str, Any]:
    """The demo VM renamed, with its own user-data and grace period."""
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": name}
    vm["spec"]["runStrategy"] = run_strategy
    template = vm["spec"]["template"]
    template["metadata"]["labels"]["kubevirt.io/domain"] = name
    template["spec"]["terminationGracePeriodSeconds"] = grace
    if user_data is not None:
        for volume in template["spec"]["volumes"]:
            if "cloudInitNoCloud" in volume:
                volume["cloudInitNoCloud"]["userData"] = user_data
    return vm


async def test_always_vm_boots_and_cloud_init_reaches_the_guest(kube: ClusterView) -> None:
    ns = await kube.namespace()
    user_data = "#cloud-config\nhostname: e2e-host\nruncmd:\n  - echo marker-from-user-data\n"
    await kube.admin.create(VIRTUAL_MACHINES, demo_vm("booter", user_data=user_data), ns)
    vmi = await kube.wait_vmi_phase(ns, "booter", "Running")
    await kube.wait_printable(ns, "booter", "Running")
    assert vmi["status"]["nodeName"] == kube.node.name
    pod = await kube.launcher_pod(vmi)
    # The demo VM's bridge binding: the guest holds its pod's IP.
    assert vmi["status"]["interfaces"][0]["ipAddress"] == pod["status"]["podIP"]
    console = await kube.wait_serial(kube.node, pod, vmi, "marker-from-user-data")
    assert BOOTED in console
    assert "pykubevirt-guest: hostname e2e-host" in console
    await cpu_seconds_rise_in_the_handlers_metrics(kube, ns, "booter")


async def cpu_seconds_rise_in_the_handlers_metrics(kube: ClusterView, ns: str, name: str) -> None:
    """virt-handler's /metrics reports the running guest's CPU time (libvirt's bulk stats of real QEMU), rising."""
    node = await kube.admin.get(NODES, kube.node.name)
    address = node["metadata"]["annotations"][c.HANDLER_ADDRESS_ANNOTATION]

    headers = {"Authorization": f"Bearer {kube.cluster.server.token()}"}

    async def cpu_seconds() -> float | None:
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.get(f"http://{address}/metrics") as response,
        ):
            text = await response.text()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, sample.labels.get("namespace"), sample.labels.get("name"))
                if key == ("kubevirt_vmi_cpu_usage_seconds_total", ns, name):
                    return float(sample.value)
        return None

    first = await eventually(cpu_seconds)

    async def risen() -> bool:
        now = await cpu_seconds()
        return now is not None and now > first

    await eventually(risen)


# ------------------------------------------------------------------------------------------------ helpers


def qemu_pid(pod: dict[str, Any], vmi: dict[str, Any]) -> int:
    """The guest's QEMU process, from the pid file of the launcher's embedded libvirt."""
    name = f"{vmi['metadata']['namespace']}_{vmi['metadata']['name']}"
    pid_file = Path(pod_layout.embed_root(pod["metadata"]["uid"])) / "run" / "qemu" / f"{name}.pid"
    return int(pid_file.read_text().strip())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


async def launcher_pid(kube: ClusterView, pod: dict[str, Any]) -> int:
    socket = Path(pod_layout.launcher_socket(str(kube.node.pods_dir), pod["metadata"]["uid"]))
    answer = await LauncherClient(socket).request("ping")
    return int(answer["pid"])


async def delete_vm(kube: ClusterView, ns: str, name: str) -> None:
    await kube.admin.delete(VIRTUAL_MACHINES, name, ns)
    await eventually(lambda: _gone(kube, ns, name), timeout=60)


async def _gone(kube: ClusterView, ns: str, name: str) -> bool:
    return await kube.vm(ns, name) is None and await kube.vmi(ns, name) is None


# ------------------------------------------------------------------------------------------------ lifecycle


async def test_deleting_the_vmi_shuts_the_guest_down_by_acpi_and_the_vm_starts_a_new_one(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, demo_vm("acpi"), ns)
    first = await kube.wait_vmi_phase(ns, "acpi", "Running")
    pod = await kube.launcher_pod(first)
    await kube.wait_serial(kube.node, pod, first, BOOTED)
    phases = kube.watch_phases(ns, "acpi")
    # Held open: the launcher's pod ends with the guest, and its log with it, maybe before the next poll.
    console = kube.hold_serial(kube.node, pod, first)
    try:
        await kube.run("kubectl", "delete", "vmi", "acpi", "-n", ns, "--wait=false")
        # The guest saw the power button: an ACPI shutdown, not a destroy.
        await kube.wait_serial(kube.node, pod, first, "power button, powering off", timeout=30, held=console)
        await kube.wait_vmi_phase(ns, "acpi", "Running", other_than_uid=first["metadata"]["uid"])
        assert phases.phases(first["metadata"]["uid"])[-1] == "Succeeded"
    finally:
        console.close()
        await phases.close()
    events = await kube.events(ns, "acpi")
    assert ("Normal", "ShuttingDown") in events
    await delete_vm(kube, ns, "acpi")


async def test_a_guest_ignoring_acpi_is_destroyed_when_its_grace_period_ends(kube: ClusterView) -> None:
    ns = await kube.namespace()
    deaf = "#cloud-config\nruncmd:\n  - killall acpid\n  - echo acpi-ignored\n"
    vm = demo_vm("deaf", run_strategy="Manual", user_data=deaf, grace=3)
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    await kube.run("virtctl", "start", "deaf", "-n", ns)
    vmi = await kube.wait_vmi_phase(ns, "deaf", "Running")
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, "acpi-ignored")
    phases = kube.watch_phases(ns, "deaf")
    # Held open: the pod, and its log with it, may be gone by the time the VM shows Stopped.
    held = kube.hold_serial(kube.node, pod, vmi)
    try:
        started = time.monotonic()
        _, out, _ = await kube.run("virtctl", "stop", "deaf", "-n", ns)
        assert out.strip() == "VM deaf was scheduled to stop"
        await kube.wait_printable(ns, "deaf", "Stopped", timeout=60)
        assert time.monotonic() - started >= 3
        assert "Failed" in phases.phases(vmi["metadata"]["uid"])
        console = held.read().decode(errors="replace")
    finally:
        held.close()
        await phases.close()
    assert "acpi-ignored" in console and "powering off" not in console
    await delete_vm(kube, ns, "deaf")


async def test_pause_and_unpause_show_in_the_printable_status(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, demo_vm("pauser"), ns)
    vmi = await kube.wait_vmi_phase(ns, "pauser", "Running")
    await kube.wait_printable(ns, "pauser", "Running")
    _, out, _ = await kube.run("virtctl", "pause", "vm", "pauser", "-n", ns)
    assert out.strip() == "VMI pauser was scheduled to pause"
    await kube.wait_printable(ns, "pauser", "Paused", timeout=30)
    paused = await kube.vmi(ns, "pauser")
    assert paused is not None
    condition = next(x for x in paused["status"]["conditions"] if x["type"] == "Paused")
    assert condition["reason"] == "PausedByUser"
    _, out, _ = await kube.run("virtctl", "unpause", "vm", "pauser", "-n", ns)
    assert out.strip() == "VMI pauser was scheduled to unpause"
    await kube.wait_printable(ns, "pauser", "Running", timeout=30)
    resumed = await kube.vmi(ns, "pauser")
    assert resumed is not None and resumed["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert all(x["type"] != "Paused" for x in resumed["status"].get("conditions") or [])
    await delete_vm(kube, ns, "pauser")


async def test_rerun_on_failure_restarts_a_crashed_guest(kube: ClusterView) -> None:
    ns = await kube.namespace()
    vm = demo_vm("crasher", run_strategy="RerunOnFailure", user_data="#cloud-config\nruncmd:\n  - crash\n")
    vm["spec"]["template"]["spec"]["domain"]["devices"]["panicDevices"] = [{"model": "isa"}]
    phases = kube.watch_phases(ns, "crasher")
    try:
        await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
        first = await kube.wait_vmi_phase(ns, "crasher", "Failed")
        # RerunOnFailure: a new VMI replaces the failed one.
        await kube.wait_vmi_phase(ns, "crasher", "Scheduled", other_than_uid=first["metadata"]["uid"])
    finally:
        await phases.close()
    assert "Running" in phases.phases(first["metadata"]["uid"])
    await delete_vm(kube, ns, "crasher")  # the guest panics at every boot: no more VMIs, no more panics
    # KubeVirt's report of each panic: a warning event, and the counter on virt-handler's /metrics. A Linux guest's
    # pvpanic gives libvirt no details to note in QEMU's log.

    async def reported() -> tuple[list[str], int, dict[tuple[str, str], float]] | None:
        events = (await kube.admin.list(EVENTS, ns, field_selector="involvedObject.name=crasher"))["items"]
        panics = [e for e in events if (e.get("type"), e.get("reason")) == ("Warning", "GuestPanicked")]
        counted = await guest_os_panics(kube, ns, "crasher")
        total = sum(int(e.get("count") or 1) for e in panics)
        return (
            ([str(e.get("message")) for e in panics], total, counted)
            if total and counted.get(("unknown", "unknown")) == total
            else None
        )

    messages, total, counted = await eventually(reported)
    assert set(messages) == {"GuestPanicked (details unavailable)"}, messages
    assert counted == {("unknown", "unknown"): float(total)}, counted


async def guest_os_panics(kube: ClusterView, ns: str, name: str) -> dict[tuple[str, str], float]:
    """`kubevirt_vmi_guest_os_panic_total` of the VMI on the node's virt-handler /metrics, by (type, bugcheck_code)."""
    node = await kube.admin.get(NODES, kube.node.name)
    address = node["metadata"]["annotations"][c.HANDLER_ADDRESS_ANNOTATION]
    headers = {"Authorization": f"Bearer {kube.cluster.server.token()}"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.get(f"http://{address}/metrics") as response,
    ):
        text = await response.text()
    return {
        (sample.labels["type"], sample.labels["bugcheck_code"]): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kubevirt_vmi_guest_os_panic_total"
        and (sample.labels.get("namespace"), sample.labels.get("name")) == (ns, name)
    }


async def test_rerun_on_failure_leaves_a_guest_that_powered_off_stopped(kube: ClusterView) -> None:
    ns = await kube.namespace()
    vm = demo_vm("quitter", run_strategy="RerunOnFailure", user_data="#cloud-config\nruncmd:\n  - poweroff\n")
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    vmi = await kube.wait_vmi_phase(ns, "quitter", "Succeeded")
    await kube.wait_printable(ns, "quitter", "Stopped")

    # KubeVirt deletes the succeeded VMI and starts no other.
    async def stays_stopped() -> bool:
        after = await kube.vmi(ns, "quitter")
        assert after is None or after["metadata"]["uid"] == vmi["metadata"]["uid"], "a new VMI after a clean poweroff"
        assert (await kube.vm(ns, "quitter") or {})["status"]["printableStatus"] == "Stopped"
        return True

    await consistently(stays_stopped, for_=3, interval=0.2)
    await delete_vm(kube, ns, "quitter")


async def test_a_killed_launcher_fails_the_vmi_and_takes_its_qemu_along(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, demo_vm("victim", run_strategy="Manual"), ns)
    await kube.run("virtctl", "start", "victim", "-n", ns)
    vmi = await kube.wait_vmi_phase(ns, "victim", "Running")
    pod = await kube.launcher_pod(vmi)
    qemu = qemu_pid(pod, vmi)
    os.kill(await launcher_pid(kube, pod), signal.SIGKILL)
    failed = await kube.wait_vmi_phase(ns, "victim", "Failed", timeout=60)
    assert failed["metadata"]["uid"] == vmi["metadata"]["uid"]
    await eventually(lambda: _dead(qemu), timeout=30)
    await kube.wait_printable(ns, "victim", "Stopped")
    await delete_vm(kube, ns, "victim")


async def _dead(pid: int) -> bool:
    return not alive(pid)


async def node_process_marks(kube: ClusterView) -> tuple[str, int]:
    """What a restarted virt-handler and node agent each change on their Node: the handler address, the log port."""
    node = await kube.admin.get(NODES, kube.node.name)
    address = str((node["metadata"].get("annotations") or {}).get(c.HANDLER_ADDRESS_ANNOTATION) or "")
    port = int(((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint", {}).get("Port") or 0)
    return address, port


def network_plumbing(kube: ClusterView, pod: dict[str, Any]) -> dict[str, str]:
    """What the pod's network is made of: its namespace's devices (ifindexes included, so anything re-made shows),
    addresses and nft rules (without counters), the peer of its eth0 on the node bridge, and its IP leases."""
    name = pod_netns(pod["metadata"]["uid"])

    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    links = run("ip", "-n", name, "-o", "link")
    # The pod's veth (KubeVirt's bridge binding renames it eth0-nic): its peer's ifindex in the cluster namespace.
    peer = re.search(r"eth0(?:-nic)?@if(\d+):", links)
    assert peer, links
    cluster = ClusterNetwork(kube.cluster.layout.cluster_cidr).netns
    leases = kube.node.data_dir / "cni" / "ipam" / "pykubevirt"
    return {
        "links": links,
        "addresses": run("ip", "-n", name, "-o", "addr"),
        "rules": run("ip", "netns", "exec", name, "nft", "-s", "list", "ruleset"),
        "peer": next(
            line for line in run("ip", "-n", cluster, "-o", "link").splitlines() if line.startswith(f"{peer[1]}:")
        ),
        "leases": " ".join(sorted(f.name for f in leases.iterdir() if pod["metadata"]["uid"] in f.read_text())),
    }


async def guest_page(address: str) -> str | None:
    """The guest's httpd page at an address, or None while it does not answer."""
    with contextlib.suppress(OSError, asyncio.TimeoutError):
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(f"http://{address}/") as response:
            return await response.text()
    return None


async def test_restarting_node_agent_and_handler_keeps_the_guest_running(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, demo_vm("survivor"), ns)
    vmi = await kube.wait_vmi_phase(ns, "survivor", "Running")
    pod = await kube.launcher_pod(vmi)
    # The graceful stop below needs a guest that handles the power button, which it promises only once booted (a
    # VMI is Running as soon as QEMU runs; under load the guest's init can take longer than the grace period).
    await kube.wait_serial(kube.node, pod, vmi, BOOTED)
    qemu = qemu_pid(pod, vmi)
    launcher = await launcher_pid(kube, pod)
    # The demo VM's bridge binding: the guest serves its page at the pod IP.
    pod_ip = pod["status"]["podIP"]
    page = await eventually(lambda: guest_page(pod_ip), timeout=60, interval=0.5)
    assert page.startswith("pykubevirt-guest ")
    plumbing = network_plumbing(kube, pod)
    # One host-local lease per family the pod has (dual-stack where the host has IPv6).
    assert plumbing["leases"] == " ".join(sorted(entry["ip"] for entry in pod["status"]["podIPs"]))
    node = kube.node
    old_address, old_port = await node_process_marks(kube)
    node.agent.stop(signal.SIGKILL)
    kube.cluster.restart_handler(node, signal.SIGKILL)
    # The data path is the kernel's and QEMU's: with the agent dead, the guest still answers.
    assert await guest_page(pod_ip) == page
    node.agent.start()

    async def both_back() -> bool:
        # The agent registers its new log port, then re-adopts its pods; the new handler beats once it serves.
        address, port = await node_process_marks(kube)
        return bool(address) and address != old_address and port > 0 and port != old_port

    await eventually(both_back, timeout=60)
    assert alive(qemu) and alive(launcher)
    after = await kube.vmi(ns, "survivor")
    assert after is not None and after["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert after["status"]["phase"] == "Running"
    restarted = await kube.launcher_pod(after)
    assert restarted["status"]["phase"] == "Running"
    assert restarted["status"]["containerStatuses"][0]["restartCount"] == 0
    assert restarted["status"]["podIP"] == pod_ip
    # The restarted agent adopted the pod's network as it was: no CNI ADD again, no new veth, tap or lease, and the
    # launcher's nft rules untouched; the guest still answers at its address.
    assert network_plumbing(kube, pod) == plumbing
    assert await guest_page(pod_ip) == page
    # The re-started handler still drives the guest: a graceful stop reaches it.
    with kube.hold_serial(kube.node, pod, vmi) as console:
        await kube.run("kubectl", "delete", "vmi", "survivor", "-n", ns, "--wait=false")
        await kube.wait_serial(kube.node, pod, vmi, "power button, powering off", timeout=30, held=console)
    await delete_vm(kube, ns, "survivor")


async def test_an_image_neither_local_nor_pullable_shows_err_image_pull_then_back_off(kube: ClusterView) -> None:
    ns = await kube.namespace()
    vm = demo_vm("nopull")
    vm["spec"]["template"]["spec"]["volumes"][0]["containerDisk"]["image"] = "localhost:1/missing/disk:1.0"
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    await kube.wait_printable(ns, "nopull", "ErrImagePull", timeout=60)
    await kube.wait_printable(ns, "nopull", "ImagePullBackOff", timeout=60)
    await delete_vm(kube, ns, "nopull")
