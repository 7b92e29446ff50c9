"""The cluster-mode e2e: `pykubevirt apiserver --plain` + `kubectl apply -k deploy/` + the components started the
way the manifests start them (tests/support/cluster_mode.py), each under its own service account and RBAC.

Every KubeVirt behaviour comes from the deployed components: admission through virt-api's webhook configurations,
`virtctl start/stop/pause/unpause` through the APIService. The node agent stands in for the kubelet and the
embedded scheduler for kube-scheduler; a real QEMU guest boots.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pykubevirt.api.constants import HANDLER_ADDRESS_ANNOTATION
from pykubevirt.apiserver.security import NODES_GROUP, node_user, write_user_kubeconfig
from pykubevirt.cli.cluster_layout import pykubevirt_argv
from pykubevirt.cli.up_command import node_schedulable
from pykubevirt.node.teardown import kill_node_pods
from tests.paths import REPO
from tests.support.apiserver_process import APIServerProcess, kubectl, kubectl_env
from tests.support.cluster_mode import ClusterMode, PodProcess
from tests.support.node_agent_process import NodeAgentProcess
from tests.support.small_guest import small_guest
from tests.support.waiting import eventually_sync

NODE = "node-1"
VIRTCTL = str(Path(sys.executable).parent / "virtctl")


@dataclass
class PlainCluster:
    server: APIServerProcess
    home: Path
    harness: ClusterMode

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(self.server, self.home, *args, stdin=stdin, check=check, timeout=120)

    def virtctl(self, *args: str) -> str:
        env = {**kubectl_env(self.server, self.home), "PATH": os.environ.get("PATH", "")}
        result = subprocess.run([VIRTCTL, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def vm_status(self, name: str) -> str:
        """The VM's printable status, the STATUS column of `kubectl get vm`."""
        return self.kubectl("get", "vm", name, "-o", "jsonpath={.status.printableStatus}").stdout

    def vmi_condition(self, name: str, kind: str) -> str:
        """The status of one of the VMI's conditions, "" when it has none of that type."""
        path = f'jsonpath={{.status.conditions[?(@.type=="{kind}")].status}}'
        return self.kubectl("get", "vmi", name, "-o", path).stdout

    def vmi_phase(self, name: str) -> str:
        result = self.kubectl("get", "vmi", name, "-o", "jsonpath={.status.phase}", check=False)
        return result.stdout if result.returncode == 0 else ""


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Iterator[PlainCluster]:
    root = tmp_path_factory.mktemp("plain-cluster")
    home = root / "home"
    server = APIServerProcess(root / "apiserver", "--plain").start()
    node_dir = root / "nodes" / NODE
    kubeconfig = write_user_kubeconfig(server.data_dir, root / f"{NODE}.kubeconfig", node_user(NODE), [NODES_GROUP])
    agent = NodeAgentProcess(kubeconfig, NODE, node_dir, images_dir)
    scheduler_log = (root / "scheduler.log").open("ab")
    scheduler = subprocess.Popen(
        pykubevirt_argv(
            "scheduler", "--kubeconfig", str(server.data_dir / "scheduler.kubeconfig"), "--retry-interval", "2"
        ),
        stdout=scheduler_log,
        stderr=subprocess.STDOUT,
    )
    harness = ClusterMode(server, home, root / "pods", NODE, host_paths={"/var/lib/kubelet/pods": node_dir / "pods"})
    try:
        agent.start()
        kubectl(server, home, "apply", "-f", str(REPO / "deploy" / "crds"))
        manifests = harness.apply(REPO / "deploy")
        for workload in manifests:
            if workload["kind"] in ("Deployment", "DaemonSet"):
                harness.start_workload(workload, wait=False)
        harness.wait_ready()
        kubectl(
            server, home, "wait", "--for=condition=Available", "apiservice/v1.subresources.kubevirt.io", "--timeout=60s"
        )

        def schedulable() -> bool:
            result = kubectl(server, home, "get", "node", NODE, "-o", "json", check=False)
            return result.returncode == 0 and node_schedulable(json.loads(result.stdout))

        eventually_sync(schedulable, timeout=90)
        yield PlainCluster(server, home, harness)
    finally:
        harness.stop()
        agent.stop()
        scheduler.terminate()
        scheduler.wait(timeout=10)
        scheduler_log.close()
        server.stop()
        kill_node_pods(node_dir)


def test_a_vm_reaches_running_through_webhooks_and_the_aggregated_api(plain_cluster: PlainCluster) -> None:
    plain_cluster.kubectl("apply", "-f", "-", stdin=small_guest("plain-vm"))
    eventually_sync(lambda: plain_cluster.vmi_phase("plain-vm") == "Running", timeout=180, interval=0.5)
    vmi = json.loads(plain_cluster.kubectl("get", "vmi", "plain-vm", "-o", "json").stdout)
    # virt-api's mutating webhook defaulted the VMI that virt-controller created.
    assert vmi["spec"]["domain"]["machine"] == {"type": "q35"}
    assert vmi["status"]["nodeName"] == NODE
    assert "was scheduled to stop" in plain_cluster.virtctl("stop", "plain-vm")
    eventually_sync(lambda: plain_cluster.vmi_phase("plain-vm") == "", timeout=120, interval=0.5)
    assert "was scheduled to start" in plain_cluster.virtctl("start", "plain-vm")
    eventually_sync(lambda: plain_cluster.vmi_phase("plain-vm") == "Running", timeout=180, interval=0.5)

    # pause and unpause go through the APIService to virt-api, which asks the node's virt-handler: over mutual TLS,
    # with the certificates virt-controller's leader issued into Secrets and the kubelet's volumes delivered.
    def handler_address() -> str:
        node = json.loads(plain_cluster.kubectl("get", "node", NODE, "-o", "json").stdout)
        return str(node["metadata"].get("annotations", {}).get(HANDLER_ADDRESS_ANNOTATION, ""))

    assert eventually_sync(handler_address, timeout=60).startswith("https://")
    for secret in ("kubevirt-ca", "kubevirt-virt-handler-certs", "kubevirt-virt-handler-server-certs"):
        plain_cluster.kubectl("-n", "kubevirt", "get", "secret", secret)
    assert plain_cluster.virtctl("pause", "vm", "plain-vm").strip() == "VMI plain-vm was scheduled to pause"
    eventually_sync(lambda: plain_cluster.vm_status("plain-vm") == "Paused", timeout=60, interval=0.5)
    assert plain_cluster.vmi_condition("plain-vm", "Paused") == "True"
    assert plain_cluster.virtctl("unpause", "vm", "plain-vm").strip() == "VMI plain-vm was scheduled to unpause"
    eventually_sync(lambda: plain_cluster.vm_status("plain-vm") == "Running", timeout=60, interval=0.5)
    assert plain_cluster.vmi_condition("plain-vm", "Paused") == ""


def says_leader(replica: PodProcess) -> bool:
    """What virt-controller's readiness endpoint says of this replica: leading with its caches filled."""
    probe = replica.container["readinessProbe"]["httpGet"]
    url = f"http://127.0.0.1:{replica.ports[probe['port']]}{probe['path']}"
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
        return bool(json.load(reply)["apiserver"]["leader"] == "true")


def test_killing_the_leading_virt_controller_hands_over_to_the_other_replica(plain_cluster: PlainCluster) -> None:
    def holder() -> str:
        lease = plain_cluster.kubectl("-n", "kubevirt", "get", "lease", "virt-controller", "-o", "json", check=False)
        return str(json.loads(lease.stdout)["spec"].get("holderIdentity") or "") if lease.returncode == 0 else ""

    leader = eventually_sync(holder, timeout=60)
    replicas = [p for p in plain_cluster.harness.pods if p.name.startswith("virt-controller-")]
    assert sorted(p.name for p in replicas) == ["virt-controller-0", "virt-controller-1"]
    leading = next(p for p in replicas if p.name == leader)
    # Both replicas are ready (their readiness probe, KubeVirt's /leader, answers 200); it tells which one leads.
    assert eventually_sync(lambda: [says_leader(p) for p in replicas] == [p is leading for p in replicas])
    assert leading.process is not None
    killed = time.monotonic()
    leading.process.send_signal(signal.SIGKILL)  # no chance to release the lease: the other waits it out
    leading.process.wait()
    successor = eventually_sync(lambda: (h := holder()) != leader and h, timeout=30, interval=0.2)
    took = time.monotonic() - killed
    assert successor in {p.name for p in replicas} - {leader}
    # deploy/'s lease: 10 s from the last renewal, then the candidate's next 2 s retry; the issue's bound is 15 s.
    assert took < 15.0, f"handed over after {took:.1f}s"
    assert eventually_sync(lambda: says_leader(next(p for p in replicas if p.name == successor)))
    print(f"virt-controller leadership handed over {took:.1f}s after SIGKILL")
