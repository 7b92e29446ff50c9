"""The supervisor's fence against a real API server and real processes: a node silent past the grace has its agent
and virt-handler killed and held down, is tainted out-of-service with a Fenced condition, comes back once its pods
are gone, and is untainted when it heartbeats; a single hung component is only restarted; new components get time."""

from __future__ import annotations

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


async def register(admin: KubeClient) -> None:
    await admin.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node01"}})


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
