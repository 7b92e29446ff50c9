"""The embedded cluster's layout (components, their command lines and log files) and their mirror pods. Pure."""

from __future__ import annotations

import sys
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.cli.cluster_layout import ClusterLayout
from pykubevirt.cli.mirror_pods import mirror_pod, mirror_status

LAYOUT = ClusterLayout(Path("/data"), node_count=2, listen="127.0.0.1:7443", extra_args={"node": ("--max-pods", "9")})


def test_components_start_with_the_api_server_and_have_one_agent_and_handler_per_node() -> None:
    names = [c.name for c in LAYOUT.components()]
    assert names == [
        "apiserver",
        "virt-controller",
        "scheduler",
        "node-node01",
        "virt-handler-node01",
        "node-node02",
        "virt-handler-node02",
        "webconsole",
    ]


def test_the_web_console_serves_on_loopback_for_the_admin_kubeconfig_and_records_its_address() -> None:
    console = LAYOUT.components()[-1]
    assert console.argv[3:] == (
        "webconsole", "--kubeconfig", "/data/apiserver/kubeconfig", "--listen", "127.0.0.1:0",
        "--address-file", "/data/run/webconsole-address",
    )  # fmt: skip
    assert console.pod is None and console.log_file == Path("/data/logs/webconsole.log")


def test_command_lines_use_this_interpreter_and_the_component_kubeconfigs() -> None:
    apiserver, controller, _, agent, handler, *_ = LAYOUT.components()
    assert apiserver.argv == (
        sys.executable, "-m", "pykubevirt.cli.main", "apiserver", "--data-dir", "/data/apiserver",
        "--listen", "127.0.0.1:7443",
    )  # fmt: skip
    assert controller.argv[-6:] == (
        "--kubeconfig", "/data/apiserver/virt-controller.kubeconfig", "--embedded-storage", "/data/storage",
        "--metrics-address-file", "/data/run/virt-controller-metrics",
    )  # fmt: skip
    assert agent.argv[3:] == (
        "node", "--name", "node01", "--data-dir", "/data/nodes/node01",
        "--kubeconfig", "/data/apiserver/node-node01.kubeconfig",
        "--images-dir", "/data/images", "--node-ip", LAYOUT.node_ip("node01"), "--max-pods", "9",
    )  # fmt: skip
    assert handler.argv[-7:] == (
        "--kubeconfig", "/data/apiserver/virt-handler.kubeconfig", "--node-ip", LAYOUT.node_ip("node01"),
        "--certificates-dir", "/data/kubevirt-pki", "--create-certificates",
    )  # fmt: skip


def test_pod_components_log_where_their_node_agent_serves_mirror_pod_logs() -> None:
    handler2 = LAYOUT.handler("node02")
    assert handler2.pod is not None and handler2.pod.name == "virt-handler-node02"
    expected = pod_layout.mirror_log_file("/data/nodes/node02", "kubevirt", "virt-handler-node02", "virt-handler")
    assert str(handler2.log_file) == expected
    # The control plane is shown on the first node; node agents are no pods (as the kubelet is none).
    assert str(LAYOUT.controller().log_file).startswith("/data/nodes/node01/mirror-logs/")
    assert LAYOUT.node_agent("node01").pod is None
    assert LAYOUT.node_agent("node01").log_file == Path("/data/logs/node-node01.log")


def test_mirror_pod_is_bound_to_its_node_and_marked_as_a_mirror() -> None:
    pod = mirror_pod(LAYOUT.handler("node02"), "node02")
    assert pod["metadata"]["namespace"] == "kubevirt"
    assert pod["metadata"]["labels"] == {"kubevirt.io": "virt-handler"}
    assert pod_layout.MIRROR_ANNOTATION in pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == "node02"
    assert pod["spec"]["containers"][0]["name"] == "virt-handler"
    # Another command line is another config hash, so a stale mirror pod gets replaced.
    other = ClusterLayout(Path("/elsewhere"), node_count=2)
    assert (
        mirror_pod(other.handler("node02"), "node02")["metadata"]["annotations"][pod_layout.MIRROR_ANNOTATION]
        != pod["metadata"]["annotations"][pod_layout.MIRROR_ANNOTATION]
    )


def test_mirror_status_follows_the_process() -> None:
    component = LAYOUT.controller()
    running = mirror_status(
        component, {"running": True, "pid": 42, "restarts": 2, "startedAt": "2026-01-01T00:00:00Z"}, "now"
    )
    container = running["containerStatuses"][0]
    assert running["phase"] == "Running"
    assert container["containerID"] == "process://42"
    assert container["restartCount"] == 2 and container["ready"] is True
    assert {c["type"]: c["status"] for c in running["conditions"]}["Ready"] == "True"
    down = mirror_status(
        component, {"running": False, "restarts": 3, "lastExit": {"exitCode": -9, "finishedAt": "t"}}, "now"
    )
    assert down["phase"] == "Pending"
    assert down["containerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert down["containerStatuses"][0]["lastState"]["terminated"]["exitCode"] == -9
    assert {c["type"]: c["status"] for c in down["conditions"]}["Ready"] == "False"
