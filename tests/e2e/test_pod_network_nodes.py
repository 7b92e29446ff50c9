"""VM to VM across two embedded nodes: each node has its own bridge and podCIDR, joined in the cluster's namespace;
a bridge-bound guest on one node fetches the page of a bridge-bound guest on the other at its pod IP."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.client.resources import VIRTUAL_MACHINES
from tests.e2e.test_pod_network import bridge_vm
from tests.e2e.test_vm_lifecycle import delete_vm
from tests.support.cluster import ClusterView, EmbeddedCluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Iterator[EmbeddedCluster]:
    """This module's cluster has two nodes."""
    running = EmbeddedCluster.start(tmp_path_factory.mktemp("cluster2"), images_dir, node_count=2)
    yield running
    running.stop()


def pinned(vm: dict[str, object], node: str) -> dict[str, object]:
    vm["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # type: ignore[index]
    return vm


async def test_a_guest_reaches_a_guest_on_the_other_node_at_its_pod_ip(kube: ClusterView) -> None:
    first, second = kube.cluster.nodes[:2]
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, pinned(bridge_vm("server"), first.name), ns)
    server = await kube.wait_vmi_phase(ns, "server", "Running")
    server_pod = await kube.launcher_pod(server)
    server_ip = server_pod["status"]["podIP"]
    assert server["status"]["nodeName"] == first.name

    fetch = f"while ! wget -q -O /tmp/peer http://{server_ip}/; do sleep 1; done && echo peer-page $(cat /tmp/peer) &"
    await kube.admin.create(VIRTUAL_MACHINES, pinned(bridge_vm("client", fetch), second.name), ns)
    client = await kube.wait_vmi_phase(ns, "client", "Running")
    client_pod = await kube.launcher_pod(client)
    assert client["status"]["nodeName"] == second.name
    # Two nodes, two podCIDRs: the page crosses from one node's bridge to the other's.
    client_ip = client_pod["status"]["podIP"]
    assert ipaddress.ip_network(f"{client_ip}/24", strict=False) != ipaddress.ip_network(
        f"{server_ip}/24", strict=False
    )
    await kube.wait_serial(second, client_pod, client, f"pykubevirt-guest: eth0 {client_ip}", timeout=180)
    await kube.wait_serial(second, client_pod, client, "peer-page pykubevirt-guest server", timeout=120)
    await delete_vm(kube, ns, "client")
    await delete_vm(kube, ns, "server")
