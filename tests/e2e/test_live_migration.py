"""Live migration for real: `pykubevirt up --nodes 2`, a guest counting on its serial console every 100 ms, and a
VirtualMachineInstanceMigration that moves it to the other node without a reboot.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster, started_up_cluster, wait_for
from tests.support.cluster import DEMO_IMAGE

pytestmark = pytest.mark.e2e

BOOTED = "pykubevirt-guest: booted"
COUNTER = re.compile(r"^counter (\d+) (\d+)\.\d+", re.M)
PHASES = "Pending Scheduling Scheduled PreparingTarget TargetReady Running Succeeded"
# The guest's runcmd: a counter and the guest's uptime, ten times a second, on the serial console.
USER_DATA = """#cloud-config
runcmd:
  - (i=0; while :; do i=$((i+1)); echo counter $i $(cut -d' ' -f1 /proc/uptime); usleep 100000; done) &
"""


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory, guest_image: Path) -> Iterator[UpCluster]:
    with started_up_cluster(tmp_path_factory, guest_image, "migration", nodes=2) as cluster:
        yield cluster


def counting_guest(name: str) -> str:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "domain": {
            "memory": {"guest": "128Mi"},
            "devices": {
                # Masquerade: KubeVirt migrates no VMI bridged to the pod network (InterfaceNotLiveMigratable).
                "interfaces": [{"name": "default", "masquerade": {}}],
                "disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "cloudinit", "disk": {"bus": "virtio"}},
                ],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "root", "containerDisk": {"image": DEMO_IMAGE}},
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": USER_DATA}},
        ],
    }
    body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": name}, "spec": spec}
    return json.dumps(body)


def pods_by_node(cluster: UpCluster, vmi_uid: str) -> dict[str, dict[str, str]]:
    """Name, uid, phase and the compute container's state of each of the VMI's launcher pods, by node."""
    selector = f"kubevirt.io=virt-launcher,kubevirt.io/created-by={vmi_uid}"
    listed = json.loads(cluster.run("kubectl", "get", "pod", "-l", selector, "-o", "json").stdout)
    return {
        p["spec"].get("nodeName", ""): {
            "name": p["metadata"]["name"],
            "uid": p["metadata"]["uid"],
            "phase": p["status"].get("phase", ""),
            "compute": next(
                (
                    next(iter(cs.get("state") or {}), "")
                    for cs in p["status"].get("containerStatuses") or []
                    if cs.get("name") == "compute"
                ),
                "",
            ),
        }
        for p in listed["items"]
    }


def console(cluster: UpCluster, pod: str) -> str:
    return cluster.run("kubectl", "logs", pod, "-c", "guest-console-log", check=False).stdout


def qemu_of(pod_uid: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if b"qemu-system" in cmdline and pod_uid.encode() in cmdline:
                found.append(int(entry))
    return found


# The module's cluster (and, when the image is stale, the guest image build) count against the test's timeout.
@pytest.mark.timeout(900)
def test_a_counting_guest_migrates_to_the_other_node_without_a_reboot(two_nodes: UpCluster) -> None:
    cluster, name = two_nodes, "counter"
    cluster.run("kubectl", "apply", "-f", "-", stdin=counting_guest(name))
    wait_for(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 180)
    uid = cluster.jsonpath("vmi", name, "{.metadata.uid}")
    source_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    source = pods_by_node(cluster, uid)[source_node]
    wait_for(lambda: len(COUNTER.findall(console(cluster, source["name"]))) >= 20, "the guest counting", 240)

    source_log = console(cluster, source["name"])
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": "move-counter"}, "spec": {"vmiName": name}}
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(vmim))
    wait_for(
        lambda: cluster.jsonpath("vmim", "move-counter", "{.status.phase}") in ("Succeeded", "Failed"),
        "the migration to end",
        240,
    )
    described = cluster.run("kubectl", "get", "vmim", "move-counter", "-o", "yaml").stdout
    assert cluster.jsonpath("vmim", "move-counter", "{.status.phase}") == "Succeeded", described
    phases = cluster.jsonpath("vmim", "move-counter", "{.status.phaseTransitionTimestamps[*].phase}")
    assert phases == PHASES

    target_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    assert target_node != source_node
    # Each node has a loopback address of its own; the source dialled the target's.
    internal_ip = '{.status.addresses[?(@.type=="InternalIP")].address}'
    source_ip, target_ip = (cluster.jsonpath("node", node, internal_ip) for node in (source_node, target_node))
    assert source_ip != target_ip and ipaddress.ip_address(target_ip).is_loopback, (source_ip, target_ip)
    assert cluster.jsonpath("vmi", name, "{.status.migrationState.targetNodeAddress}") == target_ip
    assert cluster.jsonpath("vmi", name, "{.metadata.labels.kubevirt\\.io/nodeName}") == target_node
    assert cluster.jsonpath("vmi", name, "{.status.migrationState.completed}") == "true"
    assert cluster.jsonpath("vmi", name, "{.status.migrationState.sourceNode}") == source_node
    assert cluster.jsonpath("vmi", name, "{.status.migrationMethod}") == "BlockMigration"
    assert cluster.jsonpath("vmi", name, "{.status.phase}") == "Running"

    pods = pods_by_node(cluster, uid)
    target = pods[target_node]
    # The counter goes on on the target's console: same guest (uptime continues), no second boot.
    wait_for(lambda: len(COUNTER.findall(console(cluster, target["name"]))) >= 10, "the counter on the target", 60)
    # The source's console as last seen (its pod's log may be gone with the pod once the launcher exited).
    source_log = max(source_log, console(cluster, source["name"]), key=len)
    before = [(int(n), int(up)) for n, up in COUNTER.findall(source_log)]
    assert source_log.count("pykubevirt-guest: ready") == 1
    after_log = console(cluster, target["name"])
    after = [(int(n), int(up)) for n, up in COUNTER.findall(after_log)]
    assert after[0][0] > before[-1][0] and after[0][1] >= before[-1][1], (before[-3:], after[:3])
    assert BOOTED not in after_log and "pykubevirt-guest: ready" not in after_log
    # The source's launcher exits and its QEMU is gone.
    wait_for(
        lambda: pods_by_node(cluster, uid)[source_node]["compute"] == "terminated", "the source launcher to exit", 60
    )
    assert qemu_of(source["uid"]) == []
    assert len(qemu_of(target["uid"])) == 1


# The guest reports its online CPUs every 200 ms; busybox has no udev, so the loop onlines a hot-added CPU as udev's
# auto-online rule would (the kernel announces the CPU over ACPI and leaves it offline).
HOTPLUG_USER_DATA = """#cloud-config
runcmd:
  - (while :; do for f in /sys/devices/system/cpu/cpu*/online; do [ "$(cat $f)" = 0 ] && echo 1 >$f; done; \
echo cpus $(grep -c ^processor /proc/cpuinfo); usleep 200000; done) &
"""
CPUS = re.compile(r"^cpus (\d+)", re.M)


def hotplug_vm(name: str) -> str:
    """A VM whose template names its sockets: KubeVirt hotplugs CPUs only for a topology the template sets."""
    template = json.loads(counting_guest(name))["spec"]
    template["domain"]["cpu"] = {"sockets": 1}
    template["volumes"][1]["cloudInitNoCloud"]["userData"] = HOTPLUG_USER_DATA
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": "Always", "template": {"spec": template}},
    }
    return json.dumps(body)


@pytest.mark.timeout(600)
def test_raising_sockets_on_a_running_vm_plugs_a_cpu_into_the_guest(two_nodes: UpCluster) -> None:
    cluster, name = two_nodes, "hotcpu"
    cluster.run("kubectl", "apply", "-f", "-", stdin=hotplug_vm(name))
    wait_for(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 180)
    uid = cluster.jsonpath("vmi", name, "{.metadata.uid}")
    assert cluster.jsonpath("vmi", name, "{.spec.domain.cpu.maxSockets}") == "4"
    source_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    source = pods_by_node(cluster, uid)[source_node]
    wait_for(lambda: CPUS.findall(console(cluster, source["name"]))[-1:] == ["1"], "the guest on 1 CPU", 240)
    source_log = console(cluster, source["name"])

    patch = '{"spec":{"template":{"spec":{"domain":{"cpu":{"sockets":2}}}}}}'
    cluster.run("kubectl", "patch", "vm", name, "--type", "merge", "-p", patch)
    # The VMI takes the new sockets, a workload-update migration moves it to a launcher pod sized for them, and the
    # target plugs the vCPU: currentCPUTopology follows and the condition goes.
    wait_for(
        lambda: cluster.jsonpath("vmi", name, "{.status.currentCPUTopology.sockets}") == "2",
        "currentCPUTopology.sockets 2",
        240,
    )
    described = cluster.run("kubectl", "get", "vmi", name, "-o", "yaml").stdout
    assert cluster.jsonpath("vmi", name, "{.spec.domain.cpu.sockets}") == "2", described
    assert "HotVCPUChange" not in cluster.jsonpath("vmi", name, "{.status.conditions[*].type}"), described
    migrations = json.loads(cluster.run("kubectl", "get", "vmim", "-o", "json").stdout)["items"]
    mine = [m for m in migrations if m["spec"]["vmiName"] == name]
    assert len(mine) == 1 and mine[0]["metadata"]["name"].startswith("kubevirt-workload-update-"), mine
    wait_for(
        lambda: cluster.jsonpath("vmim", mine[0]["metadata"]["name"], "{.status.phase}") == "Succeeded",
        "the hotplug migration",
        60,
    )
    assert cluster.jsonpath("vmi", name, "{.metadata.uid}") == uid, "the same VMI: no restart"
    target_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    assert target_node != source_node
    conditions = cluster.jsonpath("vm", name, "{.status.conditions[*].type}")
    assert "RestartRequired" not in conditions, cluster.run("kubectl", "get", "vm", name, "-o", "yaml").stdout

    target = pods_by_node(cluster, uid)[target_node]
    wait_for(lambda: CPUS.findall(console(cluster, target["name"]))[-1:] == ["2"], "the guest on 2 CPUs", 60)
    source_log = max(source_log, console(cluster, source["name"]), key=len)
    target_log = console(cluster, target["name"])
    assert source_log.count(BOOTED) == 1 and BOOTED not in target_log, "the guest booted once"
    cluster.run("kubectl", "delete", "vm", name, "--wait=false")
