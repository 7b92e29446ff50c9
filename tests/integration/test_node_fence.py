"""The supervisor's fence against a real API server and real processes: a node silent past the grace has its agent
and virt-handler killed and held down, is tainted out-of-service with a Fenced condition, comes back once its pods
are gone, and is untainted when it heartbeats; a single hung component is only restarted; new components get time;
a node `up --nodes N` leaves out is fenced at once, and a fence an earlier supervisor left is released by beats."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio

from pykubevirt.api import constants as c
from pykubevirt.api.timestamps import format_time
from pykubevirt.cli.cluster_layout import ClusterLayout, Component
from pykubevirt.cli.component_process import ComponentProcess
from pykubevirt.cli.node_fence import NodeFencer
from pykubevirt.cli.supervisor import Supervised
from pykubevirt.client.api import STRATEGIC_MERGE_PATCH, KubeClient
from pykubevirt.client.resources import NAMESPACES, NODES, PODS
from pykubevirt.node.pod_dirs import ContainerRecord, PodDir
from pykubevirt.node.processes import start_ticks
from pykubevirt.node.registration import NodeRegistration
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import eventually
from tests.support.watching import watching

GRACE = 30.0
NAMES = ("apiserver", "node-node01", "virt-handler-node01")


@pytest_asyncio.fixture
async def admin(fresh_apiserver: APIServerProcess) -> AsyncIterator[KubeClient]:
    client = client_for(fresh_apiserver)
    yield client
    await client.close()


Entries = Callable[..., dict[str, Supervised]]


@pytest.fixture
def entries(tmp_path: Path) -> Iterator[Entries]:
    """Components as the supervisor holds them, each a real process that has been up `up_for` seconds."""
    started: list[Supervised] = []

    def make(up_for: float = 100.0) -> dict[str, Supervised]:
        found = {}
        for name in NAMES:
            component = Component(name, ("sleep", "600"), tmp_path / f"{name}.log", node="node01")
            entry = Supervised(component, ComponentProcess(component).start())
            entry.started_monotonic = time.monotonic() - up_for
            found[name] = entry
            started.append(entry)
        return found

    yield make
    for entry in started:
        entry.process.stop(signal.SIGKILL)


async def beat(admin: KubeClient, *, agent: datetime, handler: datetime) -> None:
    """The node's two heartbeats as of the given moments: Ready's lastHeartbeatTime and virt-handler's annotation."""
    await admin.patch(NODES, "node01", {"metadata": {"annotations": {c.HEARTBEAT_ANNOTATION: format_time(handler)}}})
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": format_time(agent)}
    status = {"status": {"conditions": [ready]}}
    await admin.patch(NODES, "node01", status, patch_type=STRATEGIC_MERGE_PATCH, subresource="status")


async def register(admin: KubeClient, name: str = "node01") -> None:
    await admin.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def fenced_state(node: dict[str, object]) -> tuple[list[str], dict[str, str]]:
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    assert isinstance(spec, dict) and isinstance(status, dict)
    taints = [f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in spec.get("taints") or []]
    fenced = next((x for x in status.get("conditions") or [] if x["type"] == "Fenced"), {})
    return taints, {k: fenced[k] for k in ("status", "reason") if k in fenced}


async def test_a_silent_node_is_fenced_held_down_released_and_untainted(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    supervised = entries()
    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(supervised.values()), grace=GRACE)
    await register(admin)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await beat(admin, agent=long_ago, handler=long_ago)
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vms"}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "virt-launcher-x"},
        "spec": {"nodeName": "node01", "containers": [{"name": "compute", "image": "i"}]},
    }
    await admin.create(PODS, pod, "vms")

    await fencer.check(admin)
    for name in NAMES[1:]:
        assert not supervised[name].process.running() and supervised[name].held
    assert supervised["apiserver"].process.running()
    taints, fenced = fenced_state(await admin.get(NODES, "node01"))
    assert taints == ["node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"]
    assert fenced == {"status": "True", "reason": "NodeUnresponsive"}

    await fencer.check(admin)  # its launcher pod is still there: the node stays down
    assert all(supervised[name].held for name in NAMES[1:])
    await admin.delete(PODS, "virt-launcher-x", "vms", grace_period_seconds=0)
    await fencer.check(admin)
    assert not any(supervised[name].held for name in NAMES[1:])
    assert fenced_state(await admin.get(NODES, "node01"))[0], "tainted until the node heartbeats again"

    now = datetime.now(UTC)
    await beat(admin, agent=now, handler=now)
    await fencer.check(admin)
    taints, fenced = fenced_state(await admin.get(NODES, "node01"))
    assert (taints, fenced) == ([], {"status": "False", "reason": "NodeRecovered"})
    assert fencer.fenced == {} and fencer.fences == 1


async def test_a_fenced_node_says_why_before_it_is_tainted(admin: KubeClient, entries: Entries, tmp_path: Path) -> None:
    """Whoever sees the out-of-service taint (virt-controller failing the node's VMIs, a user) sees its reason too."""
    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(entries().values()), grace=GRACE)
    await register(admin)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await beat(admin, agent=long_ago, handler=long_ago)
    versions: list[tuple[list[str], dict[str, str]]] = []
    async with watching(admin, NODES, None, "node01", lambda node: versions.append(fenced_state(node))):
        await fencer.check(admin)
        await eventually(lambda: versions and versions[-1][0])
    tainted = [fenced for taints, fenced in versions if taints]
    assert tainted and all(fenced == {"status": "True", "reason": "NodeUnresponsive"} for fenced in tainted), versions


async def test_one_hung_component_is_restarted_not_fenced(admin: KubeClient, entries: Entries, tmp_path: Path) -> None:
    supervised = entries()
    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(supervised.values()), grace=GRACE)
    await register(admin)
    now = datetime.now(UTC)
    await beat(admin, agent=now, handler=now - timedelta(seconds=GRACE + 10))
    await fencer.check(admin)  # as when the whole node stopped and the agent's last beat was a little later
    assert all(entry.process.running() for entry in supervised.values())
    await beat(admin, agent=now, handler=now - timedelta(minutes=5))
    await fencer.check(admin)
    handler, agent = supervised["virt-handler-node01"], supervised["node-node01"]
    assert not handler.process.running() and not handler.held, "killed for the supervisor to restart"
    assert agent.process.running()
    assert fenced_state(await admin.get(NODES, "node01")) == ([], {})


async def test_no_verdict_on_components_younger_than_the_grace(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    """After `up` or a restart the heartbeats are old through nobody's fault: the components get the grace first."""
    supervised = entries(up_for=5.0)
    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(supervised.values()), grace=GRACE)
    await register(admin)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await beat(admin, agent=long_ago, handler=long_ago)
    await fencer.check(admin)
    assert all(entry.process.running() and not entry.held for entry in supervised.values())
    assert fenced_state(await admin.get(NODES, "node01")) == ([], {})


async def test_a_node_up_leaves_out_is_fenced_at_once_and_its_leftover_guest_killed(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    """`up --nodes 1` on a data dir that ran two: node02 will never beat again, so its VMs must move now."""
    data = tmp_path / "data"
    for name in ("node01", "node02"):
        (data / "nodes" / name).mkdir(parents=True)
        await register(admin, name)
    now = datetime.now(UTC)
    await beat(admin, agent=now, handler=now)
    # A guest `pykubevirt down` (without --all) left running on node02, recorded as its pod's container.
    guest = await asyncio.create_subprocess_exec("sleep", "600", start_new_session=True)
    try:
        pod = PodDir(data / "nodes" / "node02" / "pods", "uid-1")
        pod.save_record(ContainerRecord("compute", pid=guest.pid, ticks=start_ticks(guest.pid) or 0))
        fencer = NodeFencer(ClusterLayout(data, node_count=1), list(entries(up_for=1.0).values()), grace=GRACE)

        await fencer.check(admin)
        assert await asyncio.wait_for(guest.wait(), 10) == -signal.SIGKILL
    finally:
        if guest.returncode is None:
            guest.kill()
    taints, fenced = fenced_state(await admin.get(NODES, "node02"))
    assert taints == ["node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"]
    assert fenced == {"status": "True", "reason": "NodeNotStarted"}
    assert fenced_state(await admin.get(NODES, "node01")) == ([], {}), "the started node is not touched"
    assert fencer.fences == 1
    await fencer.check(admin)
    assert fencer.fences == 1, "fenced once, not at every check"


async def test_a_fence_left_by_an_earlier_supervisor_is_released_once_the_node_beats(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    """The taint outlives the supervisor that set it: the next one, which starts the node again, takes it off."""
    await register(admin)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await beat(admin, agent=long_ago, handler=long_ago)
    earlier = NodeFencer(ClusterLayout(tmp_path / "data"), list(entries().values()), grace=GRACE)
    await earlier.check(admin)
    assert fenced_state(await admin.get(NODES, "node01"))[1]["status"] == "True"

    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(entries(up_for=1.0).values()), grace=GRACE)
    await fencer.check(admin)
    assert fenced_state(await admin.get(NODES, "node01"))[0], "tainted while only the earlier beats are there"
    now = datetime.now(UTC) + timedelta(seconds=1)
    await beat(admin, agent=now, handler=now)
    await fencer.check(admin)
    assert fenced_state(await admin.get(NODES, "node01")) == ([], {"status": "False", "reason": "NodeRecovered"})


async def test_an_out_of_service_taint_of_the_admins_own_is_left_alone(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    await register(admin)
    taint = {"key": c.OUT_OF_SERVICE_TAINT, "value": "nodeshutdown", "effect": "NoExecute"}
    await admin.patch(NODES, "node01", {"spec": {"taints": [taint]}})
    now = datetime.now(UTC)
    await beat(admin, agent=now, handler=now)
    fencer = NodeFencer(ClusterLayout(tmp_path / "data"), list(entries().values()), grace=GRACE)
    await fencer.check(admin)
    assert fenced_state(await admin.get(NODES, "node01"))[0] == [
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
    ]


async def test_a_node_agent_registering_again_keeps_the_fences_condition(
    admin: KubeClient, entries: Entries, tmp_path: Path
) -> None:
    """As the kubelet's, the agent's status writes merge conditions by type: the next supervisor must still see why
    the node is tainted, or it cannot tell its own fence from an admin's taint."""
    await register(admin)
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await beat(admin, agent=long_ago, handler=long_ago)
    await NodeFencer(ClusterLayout(tmp_path / "data"), list(entries().values()), grace=GRACE).check(admin)

    registered = await NodeRegistration(admin, "node01", tmp_path / "agent", log_port=10250).register()
    conditions = {x["type"]: x["status"] for x in registered["status"]["conditions"]}
    assert conditions["Fenced"] == "True" and conditions["Ready"] == "True"
