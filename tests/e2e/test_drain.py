"""`kubectl drain` for real: two LiveMigrate guests move to the other node, a None guest is shut down, as KubeVirt.

`pykubevirt up --nodes 2`, real QEMU guests; kubectl drain's evictions meet KubeVirt's eviction webhook (429 while
the evacuation migrations run), and the drain ends once the migrated-away launchers have completed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import UpCluster, started_up_cluster, wait_for
from tests.support.cluster import DEMO_IMAGE

pytestmark = pytest.mark.e2e

MOVERS = ("mover-a", "mover-b")
STAYS = "stays"


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory, guest_image: Path) -> Iterator[UpCluster]:
    with started_up_cluster(tmp_path_factory, guest_image, "drain", nodes=2) as cluster:
        yield cluster


def guest(name: str, strategy: str) -> str:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "evictionStrategy": strategy,
        "domain": {
            "memory": {"guest": "128Mi"},
            # Masquerade: KubeVirt migrates no VMI bridged to the pod network.
            "devices": {
                "interfaces": [{"name": "default", "masquerade": {}}],
                "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [{"name": "root", "containerDisk": {"image": DEMO_IMAGE}}],
    }
    body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": name}, "spec": spec}
    return json.dumps(body)


@pytest.mark.timeout(1200)
def test_kubectl_drain_moves_live_migrate_guests_and_stops_the_others(two_nodes: UpCluster) -> None:
    cluster = two_nodes
    nodes = cluster.run("kubectl", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
    assert len(nodes) == 2, nodes
    drained, other = nodes
    # Every guest starts on the node to drain.
    cluster.run("kubectl", "cordon", other)
    for name in MOVERS:
        cluster.run("kubectl", "apply", "-f", "-", stdin=guest(name, "LiveMigrate"))
    cluster.run("kubectl", "apply", "-f", "-", stdin=guest(STAYS, "None"))
    for name in (*MOVERS, STAYS):
        wait_for(lambda n=name: cluster.jsonpath("vmi", n, "{.status.phase}") == "Running", f"{name} Running", 240)
        assert cluster.jsonpath("vmi", name, "{.status.nodeName}") == drained
    migratable = "{.status.conditions[?(@.type=='LiveMigratable')].status}"
    for name in MOVERS:
        wait_for(lambda n=name: cluster.jsonpath("vmi", n, migratable) == "True", f"{name} LiveMigratable", 60)
    cluster.run("kubectl", "uncordon", other)

    result = cluster.run(
        "kubectl",
        "drain",
        drained,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=600s",
        check=False,
        timeout=660,
    )
    migrations = cluster.run("kubectl", "get", "vmim", "-o", "yaml", check=False).stdout
    assert result.returncode == 0, (result.stdout, result.stderr, migrations)
    assert f"node/{drained} cordoned" in result.stdout
    assert f"node/{drained} drained" in result.stdout
    assert "Eviction triggered evacuation of VMI" in result.stderr

    for name in MOVERS:
        assert cluster.jsonpath("vmi", name, "{.status.nodeName}") == other, migrations
        assert cluster.jsonpath("vmi", name, "{.status.phase}") == "Running"
        assert cluster.jsonpath("vmi", name, "{.status.migrationState.completed}") == "true"
        assert cluster.jsonpath("vmi", name, "{.status.evacuationNodeName}") == ""
    listed = json.loads(cluster.run("kubectl", "get", "vmim", "-o", "json").stdout)["items"]
    assert sorted(m["spec"]["vmiName"] for m in listed) == sorted(MOVERS)
    for vmim in listed:
        assert vmim["metadata"]["name"].startswith("kubevirt-evacuation-")
        assert vmim["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == drained
        assert vmim["status"]["phase"] == "Succeeded"
    # The None guest went down with its launcher.
    assert cluster.jsonpath("vmi", STAYS, "{.status.phase}") in ("Succeeded", "Failed", "")
    assert cluster.jsonpath("node", drained, "{.spec.unschedulable}") == "true"
    cluster.run("kubectl", "uncordon", drained)
