"""Live migration for real: `pykubevirt up --nodes 2`, a guest counting on its serial console every 100 ms, and a
VirtualMachineInstanceMigration that moves it to the other node without a reboot.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.api.quantity import Quantity
from pykubevirt.node.pod_dirs import existing_pod_dirs
from pykubevirt.node.processes import kill_group
from tests.e2e.conftest import UpCluster, started_up_cluster, wait_for
from tests.support.cluster import DEMO_IMAGE
from tests.support.cluster_qemus import ClusterQemus

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


def assert_booted_once(source_log: str, target_log: str) -> None:
    """One boot on the source and none on the target; a failure shows where each console log starts and ends."""
    shown = f"source log ends:\n{source_log[-1500:]}\ntarget log starts:\n{target_log[:1500]}"
    assert source_log.count(BOOTED) <= 1 and BOOTED not in target_log, f"the guest booted once\n{shown}"


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
    # KubeVirt's default (disableTLS unset): both handlers' proxies spoke TLS on the TCP leg, with their certificates.
    for node, said in ((source_node, "migration proxies dial"), (target_node, "migration proxies listen")):
        handler_log = cluster.run("kubectl", "logs", "-n", "kubevirt", f"virt-handler-{node}", check=False).stdout
        assert any(said in line and "with TLS" in line for line in handler_log.splitlines()), handler_log[-2000:]

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
    # A second boot on the target shows where the target's console starts (a guest panic after the hand-over, seen
    # once under stress, reads there).
    assert_booted_once(source_log, after_log)
    assert "pykubevirt-guest: ready" not in after_log
    # The source's launcher exits and its QEMU is gone.
    wait_for(
        lambda: pods_by_node(cluster, uid)[source_node]["compute"] == "terminated", "the source launcher to exit", 60
    )
    assert qemu_of(source["uid"]) == []
    assert len(qemu_of(target["uid"])) == 1
    # QEMU's own log is in each launcher's: the source's QEMU was shut off by libvirt as migrated (virt-handler there
    # did not destroy it when the target took the VMI over), the target's was started to receive the guest.
    source_qemu, target_qemu = (qemu_lines(cluster, pod["name"]) for pod in (source, target))
    assert any(line.endswith("shutting down, reason=migrated") for line in source_qemu), source_qemu[-5:]
    assert not any("shutting down, reason=destroyed" in line for line in source_qemu), source_qemu[-5:]
    assert any("qemu-system-x86_64" in line and " -incoming " in line for line in target_qemu), target_qemu[:3]


def qemu_lines(cluster: UpCluster, pod: str) -> list[str]:
    """The messages the pod's launcher relayed from QEMU's log (`subcomponent: qemu`)."""
    logged = cluster.run("kubectl", "logs", pod, "-c", "compute", check=False).stdout.splitlines()
    records = [json.loads(line) for line in logged if line.startswith("{")]
    return [r["msg"] for r in records if r.get("subcomponent") == "qemu"]


def counting_vm(name: str) -> str:
    template = json.loads(counting_guest(name))["spec"]
    body = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": "Always", "template": {"spec": template}},
    }
    return json.dumps(body)


def migrations_of(cluster: UpCluster, vmi: str) -> set[str]:
    """The names of the VMI's migrations."""
    listed = json.loads(cluster.run("kubectl", "get", "vmim", "-o", "json").stdout)["items"]
    return {m["metadata"]["name"] for m in listed if m["spec"]["vmiName"] == vmi}


@pytest.mark.timeout(900)
def test_a_vm_migrated_away_migrates_back_with_virtctl(two_nodes: UpCluster) -> None:
    """The second move starts from the pod the first one made: a launcher that was a migration's target."""
    cluster, name = two_nodes, "round-trip"
    cluster.run("kubectl", "apply", "-f", "-", stdin=counting_vm(name))
    wait_for(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 180)
    uid = cluster.jsonpath("vmi", name, "{.metadata.uid}")
    nodes = [cluster.jsonpath("vmi", name, "{.status.nodeName}")]
    first = pods_by_node(cluster, uid)[nodes[0]]
    wait_for(lambda: len(COUNTER.findall(console(cluster, first["name"]))) >= 10, "the guest counting", 240)
    done: set[str] = set()
    for hop in (1, 2):
        assert "was scheduled to migrate" in cluster.run("virtctl", "migrate", name).stdout
        wait_for(lambda: migrations_of(cluster, name) - done, f"virtctl's migration {hop}", 30)
        (vmim,) = migrations_of(cluster, name) - done
        phase = wait_final(cluster, vmim, 240)
        described = cluster.run("kubectl", "get", "vmim", vmim, "-o", "yaml").stdout
        assert phase == "Succeeded", described
        done.add(vmim)
        nodes.append(cluster.jsonpath("vmi", name, "{.status.nodeName}"))
        assert cluster.jsonpath("vmi", name, "{.status.migrationState.completed}") == "true", described
    assert nodes[2] == nodes[0] != nodes[1]
    assert cluster.jsonpath("vmi", name, "{.metadata.uid}") == uid
    back = cluster.jsonpath("vmi", name, "{.status.migrationState.targetPod}")
    assert back != first["name"], "a third launcher pod, on the first node again"
    wait_for(lambda: len(COUNTER.findall(console(cluster, back))) >= 5, "the counter back home", 60)
    assert BOOTED not in console(cluster, back)


# The guest reports its online CPUs every 200 ms; busybox has no udev, so the loop onlines a hot-added CPU as udev's
# auto-online rule would (the kernel announces the CPU over ACPI and leaves it offline).
HOTPLUG_USER_DATA = """#cloud-config
runcmd:
  - (while :; do for f in /sys/devices/system/cpu/cpu*/online; do [ "$(cat $f)" = 0 ] && echo 1 >$f; done; \
echo cpus $(grep -c ^processor /proc/cpuinfo); usleep 200000; done) &
"""
CPUS = re.compile(r"^cpus (\d+)", re.M)


# The guest's memory every 200 ms; its virtio_mem driver onlines what the device plugs (the image sets
# auto_online_blocks, as a distribution's udev rule would).
MEMORY_USER_DATA = """#cloud-config
runcmd:
  - (while :; do echo mem $(grep MemTotal /proc/meminfo); usleep 200000; done) &
"""
MEM = re.compile(r"^mem MemTotal: +(\d+) kB", re.M)


def compute_request(cluster: UpCluster, pod: str, resource: str) -> str:
    return cluster.jsonpath("pod", pod, f'{{.spec.containers[?(@.name=="compute")].resources.requests.{resource}}}')


def hotplug_vm(name: str, user_data: str = HOTPLUG_USER_DATA, guest: str = "128Mi") -> str:
    """A VM whose template names its sockets: KubeVirt hotplugs CPUs only for a topology the template sets."""
    body = json.loads(counting_vm(name))
    template = body["spec"]["template"]["spec"]
    template["domain"]["cpu"] = {"sockets": 1}
    template["domain"]["memory"]["guest"] = guest
    template["volumes"][1]["cloudInitNoCloud"]["userData"] = user_data
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
    # The target launcher pod was sized for two vCPUs (at cpuAllocationRatio 10).
    assert [compute_request(cluster, pod["name"], "cpu") for pod in (source, target)] == ["100m", "200m"]
    wait_for(lambda: CPUS.findall(console(cluster, target["name"]))[-1:] == ["2"], "the guest on 2 CPUs", 60)
    source_log = max(source_log, console(cluster, source["name"]), key=len)
    target_log = console(cluster, target["name"])
    assert source_log.count(BOOTED) == 1, source_log[-1500:]
    assert_booted_once(source_log, target_log)
    cluster.run("kubectl", "delete", "vm", name, "--wait=false")


# ------------------------------------------------------------------------------------------------ failures

SLOW = "slow-mover"
# 1 MiB/s: a 128 MiB guest takes minutes to move, long enough to cancel it, kill its target or restart a handler.
SLOW_POLICY = {
    "apiVersion": "migrations.kubevirt.io/v1alpha1",
    "kind": "MigrationPolicy",
    "metadata": {"name": "slow"},
    "spec": {
        "selectors": {"virtualMachineInstanceSelector": {"migration": "slow"}},
        "bandwidthPerMigration": "1Mi",
        "completionTimeoutPerGiB": 100000,
    },
}
MIGRATION_STATE = "{.status.migrationState}"


@pytest.fixture(scope="module")
def slow_guest(two_nodes: UpCluster) -> str:
    """A counting guest whose migrations the `slow` MigrationPolicy keeps at 1 MiB/s; Running and counting."""
    cluster = two_nodes
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(SLOW_POLICY))
    body = json.loads(counting_guest(SLOW))
    body["metadata"]["labels"] = {"migration": "slow"}
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(body))
    wait_for(lambda: cluster.jsonpath("vmi", SLOW, "{.status.phase}") == "Running", "VMI Running", 180)
    migratable = "{.status.conditions[?(@.type=='LiveMigratable')].status}"
    wait_for(lambda: cluster.jsonpath("vmi", SLOW, migratable) == "True", "LiveMigratable", 60)
    wait_for(lambda: counted(cluster) >= 10, "the guest counting", 240)
    return SLOW


def source_pod(cluster: UpCluster) -> str:
    uid = cluster.jsonpath("vmi", SLOW, "{.metadata.uid}")
    return pods_by_node(cluster, uid)[cluster.jsonpath("vmi", SLOW, "{.status.nodeName}")]["name"]


def counted(cluster: UpCluster) -> int:
    """The guest's last counter value on its current launcher's console."""
    values = COUNTER.findall(console(cluster, source_pod(cluster)))
    return int(values[-1][0]) if values else 0


def start_slow_migration(cluster: UpCluster, name: str) -> dict[str, str]:
    """A VMIM of the slow guest, waited for until the source is sending; the nodes, pods and last counter value."""
    node = cluster.jsonpath("vmi", SLOW, "{.status.nodeName}")
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": name}, "spec": {"vmiName": SLOW}}
    cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim))
    try:
        wait_for(lambda: cluster.jsonpath("vmim", name, "{.status.phase}") == "Running", f"{name} Running", 180)
    except AssertionError as exc:
        shown = cluster.run("kubectl", "get", "vmim,vmi", "-o", "yaml", check=False).stdout
        raise AssertionError(f"{exc}\n{shown}") from None
    assert cluster.jsonpath("vmi", SLOW, "{.status.migrationState.migrationPolicyName}") == "slow"
    target_node = cluster.jsonpath("vmi", SLOW, "{.status.migrationState.targetNode}")
    target = pods_by_node(cluster, cluster.jsonpath("vmi", SLOW, "{.metadata.uid}"))[target_node]
    return {"source": node, "target": target_node, "target_pod": target["name"], "target_uid": target["uid"]}


def assert_guest_stayed(cluster: UpCluster, source: str, before: int) -> None:
    """The guest runs on on `source`, one QEMU, its counter still rising (no reboot)."""
    assert cluster.jsonpath("vmi", SLOW, "{.status.phase}") == "Running"
    assert cluster.jsonpath("vmi", SLOW, "{.status.nodeName}") == source
    assert cluster.jsonpath("vmi", SLOW, "{.metadata.labels.kubevirt\\.io/nodeName}") == source
    wait_for(lambda: counted(cluster) > before + 5, "the counter going on on the source", 60)
    assert console(cluster, source_pod(cluster)).count("pykubevirt-guest: ready") == 1
    assert ClusterQemus(cluster.data_dir).count()[f"default_{SLOW}"] == 1


# KubeVirt's migration progress metrics, which the source node's virt-handler serves while the job runs.
MIGRATION_FAMILIES = {
    "kubevirt_vmi_migration_data_bytes_total",
    "kubevirt_vmi_migration_data_processed_bytes",
    "kubevirt_vmi_migration_data_remaining_bytes",
    "kubevirt_vmi_migration_dirty_memory_rate_bytes",
    "kubevirt_vmi_migration_memory_transfer_rate_bytes",
}
HANDLER_ADDRESS = "{.metadata.annotations." + c.HANDLER_ADDRESS_ANNOTATION.replace(".", "\\.") + "}"


def migration_metrics(cluster: UpCluster, node: str) -> dict[str, tuple[dict[str, str], float]]:
    """The slow guest's `kubevirt_vmi_migration_*` samples on `node`'s virt-handler /metrics, by name."""
    address = cluster.jsonpath("node", node, HANDLER_ADDRESS)
    token = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    scrape = urllib.request.Request(f"http://{address}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(scrape, timeout=30) as response:
        text = response.read().decode()
    return {
        sample.name: (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in MIGRATION_FAMILIES and sample.labels.get("name") == SLOW
    }


def wait_final(cluster: UpCluster, name: str, timeout: float = 120) -> str:
    wait_for(
        lambda: cluster.jsonpath("vmim", name, "{.status.phase}") in ("Succeeded", "Failed"), f"{name} to end", timeout
    )
    return cluster.jsonpath("vmim", name, "{.status.phase}")


@pytest.mark.timeout(900)
def test_a_cancelled_migration_leaves_the_guest_running_on_the_source(two_nodes: UpCluster, slow_guest: str) -> None:
    cluster = two_nodes
    # `virtctl migrate-cancel`: the VMIM is deleted, the source aborts libvirt's job, the abort is recorded.
    started = start_slow_migration(cluster, "cancel-by-virtctl")
    # While libvirt's job runs, the source node's virt-handler reports its progress, and the target's does not.
    wait_for(lambda: set(migration_metrics(cluster, started["source"])) == MIGRATION_FAMILIES, "migration metrics", 60)
    progress = migration_metrics(cluster, started["source"])
    labels = {"namespace": "default", "name": SLOW, "node": started["source"]}
    assert all(sample[0] == labels for sample in progress.values()), progress
    total, remaining, processed = (
        progress["kubevirt_vmi_migration_data_" + key][1]
        for key in ("bytes_total", "remaining_bytes", "processed_bytes")
    )
    assert remaining > 0 and total >= remaining, progress

    def moved_on() -> bool:
        now = migration_metrics(cluster, started["source"]).get("kubevirt_vmi_migration_data_processed_bytes")
        return now is not None and now[1] > processed

    wait_for(moved_on, "the processed bytes to rise", 60)
    assert migration_metrics(cluster, started["target"]) == {}
    before = counted(cluster)
    cancelled = cluster.run("virtctl", "migrate-cancel", SLOW)
    assert cancelled.stdout.strip() == f"VM {SLOW} was scheduled to migrate-cancel"
    wait_for(lambda: cluster.jsonpath("vmim", "cancel-by-virtctl", "{.metadata.name}") == "", "the VMIM gone", 120)
    state = json.loads(cluster.jsonpath("vmi", SLOW, MIGRATION_STATE))
    assert state["abortStatus"] == "Succeeded" and state["failed"] is True, state
    assert state["failureReason"] == "Live migration has been aborted", state
    assert "completed" not in state or state["completed"] is False, state
    assert_guest_stayed(cluster, started["source"], before)
    # The job is over: no progress to report.
    assert migration_metrics(cluster, started["source"]) == {}
    # The target pod is gone.
    wait_for(
        lambda: started["target"] not in pods_by_node(cluster, cluster.jsonpath("vmi", SLOW, "{.metadata.uid}")),
        "the target pod gone",
        60,
    )

    # Deleting the VMIM with kubectl does the same; the events tell the story.
    started = start_slow_migration(cluster, "cancel-by-delete")
    uid = cluster.jsonpath("vmim", "cancel-by-delete", "{.metadata.uid}")
    before = counted(cluster)
    cluster.run("kubectl", "delete", "vmim", "cancel-by-delete", "--wait=false")
    wait_for(lambda: cluster.jsonpath("vmim", "cancel-by-delete", "{.metadata.name}") == "", "the VMIM gone", 120)
    state = json.loads(cluster.jsonpath("vmi", SLOW, MIGRATION_STATE))
    assert state["migrationUid"] == uid and state["abortStatus"] == "Succeeded", state
    assert_guest_stayed(cluster, started["source"], before)
    events = cluster.run("kubectl", "get", "events", "--field-selector", f"involvedObject.name={SLOW}").stdout
    assert "VirtualMachineInstance is aborting migration." in events, events
    events = cluster.run("kubectl", "get", "events", "--field-selector", "involvedObject.name=cancel-by-delete").stdout
    assert "source node reported migration failed" in events, events


@pytest.mark.timeout(600)
def test_a_target_that_cannot_be_scheduled_fails_the_migration_with_the_guest_untouched(
    two_nodes: UpCluster, slow_guest: str
) -> None:
    cluster = two_nodes
    source = cluster.jsonpath("vmi", SLOW, "{.status.nodeName}")
    other = next(n for n in cluster.run("kubectl", "get", "node", "-o", "name").stdout.split() if n != f"node/{source}")
    before = counted(cluster)
    cluster.run("kubectl", "cordon", other)
    try:
        vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
        # KubeVirt gives an unschedulable target pod 5 minutes; the annotation shortens that, as KubeVirt's does.
        annotations = {"kubevirt.io/migrationUnschedulablePodTimeoutSeconds": "15"}
        vmim |= {"metadata": {"name": "nowhere", "annotations": annotations}, "spec": {"vmiName": SLOW}}
        cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim))
        uid = cluster.jsonpath("vmi", SLOW, "{.metadata.uid}")
        wait_for(lambda: "" in pods_by_node(cluster, uid), "a target pod, not scheduled", 60)
        target = pods_by_node(cluster, uid)[""]["name"]
        scheduled = '{.status.conditions[?(@.type=="PodScheduled")]}'
        wait_for(lambda: "Unschedulable" in cluster.jsonpath("pod", target, scheduled), "the scheduler's verdict", 60)
        condition = json.loads(cluster.jsonpath("pod", target, scheduled))
        assert condition["message"].startswith("0/2 nodes are available:"), condition
        assert "node(s) were unschedulable" in condition["message"], condition
        assert wait_final(cluster, "nowhere", 90) == "Failed"
        phases = cluster.jsonpath("vmim", "nowhere", "{.status.phaseTransitionTimestamps[*].phase}")
        assert phases == "Pending Scheduling Failed"
    finally:
        cluster.run("kubectl", "uncordon", other)
    events = cluster.run("kubectl", "get", "events", "--field-selector", "involvedObject.name=nowhere").stdout
    assert f"Migration target pod for VMI [default/{SLOW}] is currently unschedulable." in events, events
    assert f"unschedulable pod default/{target} timeout period exceeded" in events, events
    assert "Migration target pod was removed during active migration." in events, events
    # Never handed off: the VMI's migration state is not this migration's, and the guest did not move.
    state = json.loads(cluster.jsonpath("vmi", SLOW, MIGRATION_STATE) or "{}")
    assert state.get("migrationUid") != cluster.jsonpath("vmim", "nowhere", "{.metadata.uid}"), state
    wait_for(lambda: target not in {p["name"] for p in pods_by_node(cluster, uid).values()}, "target pod gone", 60)
    assert_guest_stayed(cluster, source, before)


def launcher_record(cluster: UpCluster, node: str, pod_uid: str) -> tuple[int, int]:
    """The pid and start ticks of the compute container's process (the launcher) of a pod on `node`."""
    for pod_dir in existing_pod_dirs(cluster.data_dir / "nodes" / node / "pods"):
        if pod_dir.uid == pod_uid:
            record = pod_dir.load_records()["compute"]
            return record.pid, record.ticks
    raise AssertionError(f"no pod {pod_uid} on {node}")


@pytest.mark.timeout(600)
def test_a_target_launcher_killed_mid_migration_fails_it_and_the_guest_stays(
    two_nodes: UpCluster, slow_guest: str
) -> None:
    cluster = two_nodes
    started = start_slow_migration(cluster, "target-killed")
    before = counted(cluster)
    pid, ticks = launcher_record(cluster, started["target"], started["target_uid"])
    assert kill_group(pid, ticks)
    assert wait_final(cluster, "target-killed") == "Failed"
    state = json.loads(cluster.jsonpath("vmi", SLOW, MIGRATION_STATE))
    assert state["migrationUid"] == cluster.jsonpath("vmim", "target-killed", "{.metadata.uid}"), state
    # The source ends its libvirt job too: the migration is over on both ends, recorded failed.
    wait_for(
        lambda: json.loads(cluster.jsonpath("vmi", SLOW, MIGRATION_STATE)).get("failed") is True,
        "the source to record the failure",
        90,
    )
    assert_guest_stayed(cluster, started["source"], before)


@pytest.mark.timeout(600)
def test_the_source_handler_restarted_mid_migration_loses_no_guest(two_nodes: UpCluster, slow_guest: str) -> None:
    cluster = two_nodes
    started = start_slow_migration(cluster, "handler-restart")
    before = counted(cluster)
    name = f"virt-handler-{started['source']}"
    pid = int(cluster.state()["components"][name]["pid"])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: int(cluster.state()["components"][name]["pid"] or 0) not in (0, pid), "a new handler", 120)
    phase = wait_final(cluster, "handler-restart", 300)
    node = started["source"] if phase == "Failed" else started["target"]
    assert cluster.jsonpath("vmi", SLOW, "{.status.nodeName}") == node
    if phase == "Failed":
        assert_guest_stayed(cluster, node, before)
    else:
        assert cluster.jsonpath("vmi", SLOW, "{.status.phase}") == "Running"
        wait_for(lambda: counted(cluster) > before + 5, "the counter going on on the target", 60)
        wait_for(lambda: ClusterQemus(cluster.data_dir).count()[f"default_{SLOW}"] == 1, "one QEMU", 60)


@pytest.mark.timeout(300)
def test_a_vmi_bridged_to_the_pod_network_is_refused_a_migration(two_nodes: UpCluster) -> None:
    cluster, name = two_nodes, "bridged"
    body = json.loads(counting_guest(name))
    spec = body["spec"]
    spec["domain"]["devices"] = {"interfaces": [{"name": "default", "bridge": {}}], "disks": []}
    spec["volumes"] = []
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(body))
    reason = "{.status.conditions[?(@.type=='LiveMigratable')].reason}"
    wait_for(lambda: cluster.jsonpath("vmi", name, reason) == "InterfaceNotLiveMigratable", "LiveMigratable False", 180)
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": "move-bridged"}, "spec": {"vmiName": name}}
    refused = cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim), check=False)
    assert refused.returncode != 0
    assert (
        "Cannot migrate VMI, Reason: InterfaceNotLiveMigratable, Message: cannot migrate VMI which does not use "
        "masquerade or a migratable plugin to connect to the pod network"
    ) in refused.stderr, refused.stderr
    cluster.run("kubectl", "delete", "vmi", name, "--wait=false")


# ------------------------------------------------------------------------------------------------ shared storage

# The counter, and each value written to the shared data disk too (synced: the host reads the volume's file).
SHARED_USER_DATA = (
    "#cloud-config\nruncmd:\n"
    "  - (i=0; while :; do i=$((i+1)); echo counter $i $(cut -d' ' -f1 /proc/uptime);"
    ' echo "data $i" > /dev/vdb; sync; usleep 100000; done) &\n'
)
DATA = re.compile(rb"^data (\d+)\n")


def target_qemu_state(pod_uid: str, domain: str) -> str:
    """The target's domain state and QEMU's view, twice a second apart (a moving RIP and block counters tell a
    running guest from a halted one, and an I/O hang from a CPU hang), through its launcher's private libvirtd."""
    socket = f"{pod_layout.short_runtime_dir(pod_uid)}/d/sock/libvirt-sock"
    uri = f"qemu+unix:///system?socket={socket}"
    shown = []
    for round_ in (1, 2):
        for command in (
            ["domstate", "--reason", domain],
            ["qemu-monitor-command", domain, "--hmp", "info status"],
            ["qemu-monitor-command", domain, "--hmp", "info registers"],
            ["qemu-monitor-command", domain, "--hmp", "info blockstats"],
        ):
            done = subprocess.run(["virsh", "-c", uri, *command], capture_output=True, text=True, timeout=30)
            lines = (done.stdout or done.stderr).strip().splitlines()
            kept = [line for line in lines if command[-1] != "info registers" or line.startswith(("RIP", "EFL"))]
            shown.append(f"[{round_}] {' '.join(command[:1] + command[-1:])}: " + " | ".join(kept))
        time.sleep(1.0)
    return "\n".join(shown)


def shared_claim(cluster: UpCluster, name: str, size: str) -> Path:
    """A ReadWriteMany claim of the embedded `shared` class (no node affinity: both nodes mount it); its directory."""
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}}
    claim["spec"] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": size}},
        "storageClassName": "shared",
    }
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(claim))
    wait_for(lambda: cluster.jsonpath("pvc", name, "{.status.phase}") == "Bound", f"{name} Bound", 60)
    volume = cluster.jsonpath("pvc", name, "{.spec.volumeName}")
    return Path(cluster.jsonpath("pv", volume, "{.spec.hostPath.path}"))


@pytest.mark.timeout(600)
def test_a_guest_on_shared_claims_moves_without_a_block_copy(two_nodes: UpCluster, guest_image: Path) -> None:
    cluster, name = two_nodes, "on-shared"
    root = shared_claim(cluster, "on-shared-root", "64Mi")
    data = shared_claim(cluster, "on-shared-data", "16Mi")
    # What an import would do: the raw demo image as the root claim's disk.img.
    shutil.copyfile(guest_image, root / "disk.img")
    body = json.loads(counting_guest(name))
    spec = body["spec"]
    # Every disk shared, the cloud-init one a read-only CD-ROM: KubeVirt's LiveMigration, nothing to copy.
    spec["domain"]["devices"]["disks"] = [
        {"name": "root", "disk": {"bus": "virtio"}},
        {"name": "data", "disk": {"bus": "virtio"}},
        {"name": "cloudinit", "cdrom": {"bus": "sata"}},
    ]
    spec["volumes"] = [
        {"name": "root", "persistentVolumeClaim": {"claimName": "on-shared-root"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "on-shared-data"}},
        {"name": "cloudinit", "cloudInitNoCloud": {"userData": SHARED_USER_DATA}},
    ]
    cluster.run("kubectl", "apply", "-f", "-", stdin=json.dumps(body))
    wait_for(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 180)
    migratable = "{.status.conditions[?(@.type=='LiveMigratable')].status}"
    wait_for(lambda: cluster.jsonpath("vmi", name, migratable) == "True", "LiveMigratable", 60)
    assert cluster.jsonpath("vmi", name, "{.status.migrationMethod}") == "LiveMigration"

    def written() -> int:
        found = DATA.match((data / "disk.img").read_bytes()[:64])
        return int(found.group(1)) if found else 0

    wait_for(lambda: written() >= 10, "the guest writing to the shared claim", 240)
    source_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    vmim = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}
    vmim |= {"metadata": {"name": "move-on-shared"}, "spec": {"vmiName": name}}
    cluster.run("kubectl", "create", "-f", "-", stdin=json.dumps(vmim))
    phase = wait_final(cluster, "move-on-shared", 180)
    assert phase == "Succeeded", cluster.run("kubectl", "get", "vmim,vmi", "-o", "yaml").stdout
    target_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    assert target_node != source_node
    assert cluster.jsonpath("vmim", "move-on-shared", "{.status.migrationState.mode}") == "PreCopy"
    # The source's QEMU is gone; the target's one writes on into the same claim: the data goes on from where it was.
    wait_for(
        lambda: (
            pods_by_node(cluster, cluster.jsonpath("vmi", name, "{.metadata.uid}"))[source_node]["compute"]
            == "terminated"
        ),
        "the source launcher to exit",
        60,
    )
    after_source = written()
    try:
        wait_for(lambda: written() > after_source + 5, "the guest on the target writing to the shared claim", 60)
    except AssertionError:
        # Seen once under the stress run's load, unexplained: the data stopped at the hand-over while the target's
        # domain ran. What the VMI and the target's console show tells a paused guest from a stuck writer.
        target = pods_by_node(cluster, cluster.jsonpath("vmi", name, "{.metadata.uid}"))[target_node]
        vmi = cluster.run("kubectl", "get", "vmi", name, "-o", "yaml").stdout
        shown = console(cluster, target["name"])[-3000:]
        qemu = target_qemu_state(target["uid"], f"default_{name}")
        raise AssertionError(f"data at {written()}\n{vmi}\ntarget console:\n{shown}\ntarget QEMU:\n{qemu}") from None
    assert (root / "disk.img").read_bytes()[:4096] == guest_image.read_bytes()[:4096]
    cluster.run("kubectl", "delete", "vmi", name, "--wait=false")


# A guest needs 1Gi or more for KubeVirt to give it maxGuest (memory hotplug); under TCG its untouched memory costs
# little, and the migration sends zero pages cheaply.
@pytest.mark.timeout(600)
def test_raising_guest_memory_on_a_running_vm_grows_the_guests_memory(two_nodes: UpCluster) -> None:
    cluster, name = two_nodes, "hotmem"
    cluster.run("kubectl", "apply", "-f", "-", stdin=hotplug_vm(name, MEMORY_USER_DATA, guest="1Gi"))
    wait_for(lambda: cluster.jsonpath("vmi", name, "{.status.phase}") == "Running", "VMI Running", 180)
    uid = cluster.jsonpath("vmi", name, "{.metadata.uid}")
    assert cluster.jsonpath("vmi", name, "{.spec.domain.memory.maxGuest}") == "4Gi"
    source_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    source = pods_by_node(cluster, uid)[source_node]
    wait_for(lambda: MEM.findall(console(cluster, source["name"])), "the guest reporting its memory", 240)
    before = int(MEM.findall(console(cluster, source["name"]))[-1])

    patch = '{"spec":{"template":{"spec":{"domain":{"memory":{"guest":"2Gi"}}}}}}'
    cluster.run("kubectl", "patch", "vm", name, "--type", "merge", "-p", patch)
    wait_for(
        lambda: cluster.jsonpath("vmi", name, "{.status.memory.guestRequested}") == "2Gi",
        "status.memory.guestRequested 2Gi",
        300,
    )
    described = cluster.run("kubectl", "get", "vmi", name, "-o", "yaml").stdout
    assert cluster.jsonpath("vmi", name, "{.spec.domain.memory.guest}") == "2Gi", described
    assert cluster.jsonpath("vmi", name, "{.status.memory.guestAtBoot}") == "1Gi", described
    assert "HotMemoryChange" not in cluster.jsonpath("vmi", name, "{.status.conditions[*].type}"), described
    assert cluster.jsonpath("vmi", name, "{.metadata.uid}") == uid, "the same VMI: no restart"
    target_node = cluster.jsonpath("vmi", name, "{.status.nodeName}")
    assert target_node != source_node
    assert "RestartRequired" not in cluster.jsonpath("vm", name, "{.status.conditions[*].type}")

    # The guest's MemTotal grows by the gigabyte the virtio-mem device plugged.
    target = pods_by_node(cluster, uid)[target_node]
    source_memory, target_memory = (compute_request(cluster, pod["name"], "memory") for pod in (source, target))
    assert Quantity.parse(target_memory).value - Quantity.parse(source_memory).value >= 1 << 30, target_memory

    def grown() -> bool:
        seen = MEM.findall(console(cluster, target["name"]))
        return bool(seen) and int(seen[-1]) - before >= 1000 * 1024

    wait_for(grown, "MemTotal to grow by 1Gi", 120)
    # status.memory.guestCurrent follows what the guest's driver plugged (libvirt's currentMemory).
    try:
        wait_for(
            lambda: cluster.jsonpath("vmi", name, "{.status.memory.guestCurrent}") == "2Gi", "guestCurrent 2Gi", 60
        )
    except AssertionError:
        # What libvirt said of the guest's memory on each domain event, beside what the VMI shows.
        compute = cluster.run("kubectl", "logs", target["name"], "-c", "compute", check=False).stdout
        events = "\n".join(line for line in compute.splitlines() if "domain event" in line)
        raise AssertionError(
            f"guestCurrent {cluster.jsonpath('vmi', name, '{.status.memory}')}; the target launcher's events:\n{events}"
        ) from None
    source_log = console(cluster, source["name"])
    assert_booted_once(source_log, console(cluster, target["name"]))
    cluster.run("kubectl", "delete", "vm", name, "--wait=false")
