"""A pod's sandbox network as the pod worker sees it: no pod network, IPs a restarted agent kept, a failed set-up."""

from __future__ import annotations

from typing import Any, cast

from pykubevirt.client.api import KubeClient
from pykubevirt.client.events import EventRecorder
from pykubevirt.node.pod_network import PodNetwork
from pykubevirt.node.sandbox_network import SandboxNetwork

POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-1"}}


class FakeNetwork:
    def __init__(self, recorded: list[str] | None) -> None:
        self.recorded = recorded
        self.pod_cidr = ""
        self.torn_down: list[str] = []

    def recorded_ips(self, uid: str) -> list[str] | None:
        return self.recorded

    def netns_of(self, uid: str) -> str:
        return f"netns-{uid}"

    async def teardown(self, uid: str) -> None:
        self.torn_down.append(uid)


class UnreachableClient:
    async def get(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise OSError("connection refused")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def event(self, obj: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append((event_type, reason, message))


def sandbox(network: FakeNetwork | None, recorder: Recorder | None = None) -> SandboxNetwork:
    return SandboxNetwork(
        cast(KubeClient, UnreachableClient()),
        "node-1",
        cast(PodNetwork, network),
        cast(EventRecorder, recorder or Recorder()),
        "uid-1",
    )


async def test_without_a_pod_network_a_pod_runs_in_the_nodes_namespace_and_reports_no_ips() -> None:
    net = sandbox(None)
    assert await net.ensure(POD)
    assert net.netns() is None
    assert net.reported_ips() is None
    await net.teardown()


async def test_a_restarted_agent_keeps_the_ips_it_recorded_without_a_new_set_up() -> None:
    network = FakeNetwork(["10.0.0.5", "fd00::5"])
    net = sandbox(network)
    assert await net.ensure(POD)
    assert net.netns() == "netns-uid-1"
    assert net.reported_ips() == ["10.0.0.5", "fd00::5"]
    net.host_network = True
    assert net.reported_ips() is None
    net.host_network = False
    await net.teardown()
    assert network.torn_down == ["uid-1"]
    assert net.netns() is None
    assert net.reported_ips() == []


async def test_a_failed_set_up_is_reported_once_per_message_and_keeps_the_sandbox_unready() -> None:
    recorder = Recorder()
    net = sandbox(FakeNetwork(None), recorder)
    assert net.reported_ips() == []
    assert not await net.ensure(POD)
    assert not await net.ensure(POD)
    assert net.problem == "connection refused"
    message = "Failed to create pod sandbox: connection refused"
    assert recorder.events == [("Warning", "FailedCreatePodSandBox", message)]
    assert net.netns() is None
