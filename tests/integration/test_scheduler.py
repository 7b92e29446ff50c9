"""The embedded scheduler and node lifecycle loop, run in-process against a real API server with fake Node objects."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.client.api import STRATEGIC_MERGE_PATCH, KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import EVENTS, NODES, PODS
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.node.node_lifecycle import NodeLifecycle
from pykubevirt.node.scheduler import Scheduler
from tests.support.apiserver_process import KUBECTL, APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import consistently, eventually

NS = "default"
HOSTNAME = "kubernetes.io/hostname"
KUBEVIRT_LABELS = {"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64"}
DEVICES: dict[str, Any] = {
    "devices.kubevirt.io/kvm": "1k",
    "devices.kubevirt.io/tun": "1k",
    "devices.kubevirt.io/vhost-net": "1k",
}


def _stamp(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_manifest(
    name: str,
    *,
    memory: str = "8Gi",
    cpu: str = "4",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    heartbeat: datetime | None = None,
    ready: str = "True",
    **extra: str,
) -> Object:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi", **extra}
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    ready_condition = {
        "type": "Ready",
        "status": ready,
        "reason": "KubeletReady",
        "message": "node agent is posting ready status",
        "lastHeartbeatTime": _stamp(heartbeat),
        "lastTransitionTime": _stamp(heartbeat),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": allocatable, "allocatable": allocatable, "conditions": [ready_condition]},
    }


def pod_manifest(name: str, memory: str = "100Mi", cpu: str = "100m", **spec: Any) -> Object:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "example.org/app:1",
                    "resources": {"requests": {"memory": memory, "cpu": cpu}},
                }
            ],
            **spec,
        },
    }


@contextlib.asynccontextmanager
async def running(*components: Scheduler | NodeLifecycle) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(component.run()) for component in components]
    try:
        await asyncio.wait_for(
            asyncio.gather(*(i.synced.wait() for c in components for i in c.controller.informers)), 20
        )
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for component in components:
            if isinstance(component, Scheduler):
                await component.recorder.flush()


@pytest.fixture
async def admin(fresh_apiserver: APIServerProcess) -> AsyncIterator[KubeClient]:
    client = client_for(fresh_apiserver)
    yield client
    await client.close()


@pytest.fixture
async def scheduler_client(fresh_apiserver: APIServerProcess) -> AsyncIterator[KubeClient]:
    client = client_for(fresh_apiserver, "scheduler")
    yield client
    await client.close()


async def node_of(admin: KubeClient, name: str) -> str:
    pod = await admin.get(PODS, name, NS)
    return str(pod["spec"].get("nodeName") or "")


def scheduled_condition(pod: Object) -> dict[str, Any]:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return dict(condition)
    return {}


async def wait_bound(admin: KubeClient, *names: str, timeout: float = 10.0) -> dict[str, str]:  # noqa: ASYNC109
    async def probe() -> dict[str, str] | None:
        nodes = {name: await node_of(admin, name) for name in names}
        return nodes if all(nodes.values()) else None

    return await eventually(probe, timeout=timeout)


async def wait_condition(admin: KubeClient, name: str, **wanted: str) -> dict[str, Any]:
    last: dict[str, Any] = {}

    async def probe() -> dict[str, Any] | None:
        nonlocal last
        last = scheduled_condition(await admin.get(PODS, name, NS))
        return last if all(last.get(k) == v for k, v in wanted.items()) else None

    try:
        return await eventually(probe, timeout=10)
    except AssertionError:
        raise AssertionError(f"PodScheduled of {name} is {last}, wanted {wanted}") from None


async def test_binds_by_capacity_selector_taints_and_cordons(admin: KubeClient, scheduler_client: KubeClient) -> None:
    worker = {"role": "worker"}
    for node in (
        node_manifest("n-big", memory="4Gi", labels=worker),
        node_manifest("n-small", memory="2Gi", labels=worker),
        node_manifest(
            "n-tainted",
            memory="64Gi",
            labels=worker,
            taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
        ),
        node_manifest("n-cordoned", memory="64Gi", labels=worker, unschedulable=True),
        node_manifest("n-other", memory="64Gi"),
    ):
        await admin.create(NODES, node)
    scheduler = Scheduler(scheduler_client)
    async with running(scheduler):
        names = [f"p{i}" for i in range(4)]
        for name in names:
            await admin.create(PODS, pod_manifest(name, memory="1500Mi", nodeSelector=worker), NS)

        async def settled() -> list[Object] | None:
            pods = [await admin.get(PODS, name, NS) for name in names]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            rejected = [p for p in pods if scheduled_condition(p).get("reason") == "Unschedulable"]
            return pods if len(bound) == 3 and len(rejected) == 1 else None

        pods = await eventually(settled, timeout=10)
        placement = sorted(str(p["spec"].get("nodeName") or "") for p in pods)
        assert placement == ["", "n-big", "n-big", "n-small"]
        (waiting,) = [p for p in pods if not p["spec"].get("nodeName")]
        condition = scheduled_condition(waiting)
        assert condition["status"] == "False"
        assert condition["message"] == (
            "0/5 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable, 2 Insufficient memory."
        )

        async def failed_events() -> list[Object] | None:
            selector = f"involvedObject.name={waiting['metadata']['name']}"
            items: list[Object] = (await admin.list(EVENTS, NS, field_selector=selector))["items"]
            return items or None

        events = await eventually(failed_events)
        assert {e["reason"] for e in events} == {"FailedScheduling"}
        assert events[-1]["message"] == condition["message"] and events[-1]["type"] == "Warning"

        # Freeing room on n-big wakes the pending pod at once (no need to wait for the periodic retry).
        victim = next(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == "n-big")
        await admin.delete(PODS, victim, NS, grace_period_seconds=0)
        name = waiting["metadata"]["name"]
        assert await wait_bound(admin, name, timeout=5) == {name: "n-big"}
        assert (await wait_condition(admin, name, status="True")).get("reason") is None

        async def scheduled_events() -> list[str] | None:
            selector = f"involvedObject.name={name},reason=Scheduled"
            return [e["message"] for e in (await admin.list(EVENTS, NS, field_selector=selector))["items"]] or None

        assert await eventually(scheduled_events) == [f"Successfully assigned {NS}/{name} to n-big"]


async def test_affinity_tolerations_and_ignored_pods(admin: KubeClient, scheduler_client: KubeClient) -> None:
    gpu_taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    await admin.create(NODES, node_manifest("zone-a", labels={"zone": "a", "cores": "8"}))
    await admin.create(NODES, node_manifest("zone-b", labels={"zone": "b", "cores": "16"}))
    await admin.create(NODES, node_manifest("gpu", labels={"zone": "b", "cores": "64"}, taints=[gpu_taint]))
    scheduler = Scheduler(scheduler_client)
    async with running(scheduler):
        affinity = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["nowhere"]}]},
                    ]
                }
            }
        }
        await admin.create(PODS, pod_manifest("to-b", affinity=affinity), NS)
        many_cores = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["32"]}]}]
                }
            }
        }
        tolerant = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        await admin.create(PODS, pod_manifest("to-gpu", affinity=many_cores, tolerations=tolerant), NS)
        await admin.create(PODS, pod_manifest("not-tolerant", affinity=many_cores), NS)
        await admin.create(PODS, pod_manifest("other-scheduler", schedulerName="my-scheduler"), NS)
        await admin.create(PODS, pod_manifest("explicit", schedulerName="default-scheduler"), NS)
        assert await wait_bound(admin, "to-b", "to-gpu", "explicit") == {
            "to-b": "zone-b",
            "to-gpu": "gpu",
            "explicit": "zone-a",
        }
        condition = await wait_condition(admin, "not-tolerant", reason="Unschedulable")
        assert condition["message"] == (
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, "
            "2 node(s) didn't match Pod's node affinity/selector."
        )

        async def left_to_its_scheduler() -> bool:
            other = await admin.get(PODS, "other-scheduler", NS)
            return not other["spec"].get("nodeName") and not scheduled_condition(other)

        await consistently(left_to_its_scheduler, for_=0.3)


def pod_terms(kind: str, *terms: dict[str, Any], preferred: int = 0) -> dict[str, Any]:
    """A pod affinity (kind podAffinity or podAntiAffinity) with these terms, required or (weight > 0) preferred."""
    if preferred:
        weighted = [{"weight": preferred, "podAffinityTerm": t} for t in terms]
        return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": weighted}}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def labelled(manifest: Object, **labels: str) -> Object:
    manifest["metadata"]["labels"] = labels
    return manifest


async def test_pod_affinity_and_anti_affinity(admin: KubeClient, scheduler_client: KubeClient) -> None:
    """kube-scheduler's InterPodAffinity: replicas spread by required anti-affinity until no host is left, a pod that
    must be near another waits for it, a placed pod's anti-affinity keeps others away, preferences steer."""
    for name in ("n1", "n2"):
        await admin.create(NODES, node_manifest(name, labels={"topology.kubernetes.io/zone": "z"}))
    apart = pod_terms("podAntiAffinity", {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME})
    scheduler = Scheduler(scheduler_client, retry_interval=60)  # only pod events can wake the waiting pods in time
    async with running(scheduler):
        for name in ("web-1", "web-2"):
            await admin.create(PODS, labelled(pod_manifest(name, affinity=apart), app="web"), NS)
            await wait_bound(admin, name)
        assert {await node_of(admin, "web-1"), await node_of(admin, "web-2")} == {"n1", "n2"}
        await admin.create(PODS, labelled(pod_manifest("web-3", affinity=apart), app="web"), NS)
        message = "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
        await wait_condition(admin, "web-3", reason="Unschedulable", message=message)
        # Its pair gone, a host is free again.
        host = await node_of(admin, "web-1")
        await admin.delete(PODS, "web-1", NS, grace_period_seconds=0)
        assert await wait_bound(admin, "web-3", timeout=5) == {"web-3": host}

        near_db = pod_terms("podAffinity", {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME})
        await admin.create(PODS, pod_manifest("cache", affinity=near_db), NS)
        message = "0/2 nodes are available: 2 node(s) didn't match pod affinity rules."
        await wait_condition(admin, "cache", reason="Unschedulable", message=message)
        await admin.create(PODS, labelled(pod_manifest("db", nodeName="n2"), app="db"), NS)
        assert await wait_bound(admin, "cache", timeout=5) == {"cache": "n2"}

        # A guard keeps batch pods off its host, though they say nothing about it.
        no_batch = pod_terms(
            "podAntiAffinity", {"labelSelector": {"matchLabels": {"app": "batch"}}, "topologyKey": HOSTNAME}
        )
        await admin.create(PODS, labelled(pod_manifest("guard", nodeName="n1", affinity=no_batch), app="guard"), NS)
        await admin.create(PODS, labelled(pod_manifest("batch"), app="batch"), NS)
        assert await wait_bound(admin, "batch") == {"batch": "n2"}

        # Preferences: near the db on n2, though n2 holds more (least-allocated alone would pick n1).
        likes_db = pod_terms(
            "podAffinity", {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOSTNAME}, preferred=100
        )
        await admin.create(PODS, pod_manifest("friend", memory="1Gi", affinity=likes_db), NS)
        assert await wait_bound(admin, "friend") == {"friend": "n2"}


async def test_topology_spread_constraints(admin: KubeClient, scheduler_client: KubeClient) -> None:
    """kube-scheduler's PodTopologySpread: DoNotSchedule keeps two zones within maxSkew, a cordoned zone still
    counting as one (nodeTaintsPolicy Ignore), until it is uncordoned."""
    await admin.create(NODES, node_manifest("n1", labels={"topology.kubernetes.io/zone": "a"}))
    await admin.create(NODES, node_manifest("n2", labels={"topology.kubernetes.io/zone": "b"}))
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    scheduler = Scheduler(scheduler_client, retry_interval=60)
    async with running(scheduler):
        for name in ("s1", "s2"):
            await admin.create(PODS, labelled(pod_manifest(name, topologySpreadConstraints=spread), app="spread"), NS)
            await wait_bound(admin, name)
        # n1 first (the least allocated, by name), then n2: a second pod in zone a would be a skew of 2.
        assert (await node_of(admin, "s1"), await node_of(admin, "s2")) == ("n1", "n2")
        await admin.patch(NODES, "n2", {"spec": {"unschedulable": True}})
        await admin.create(PODS, labelled(pod_manifest("s3", topologySpreadConstraints=spread), app="spread"), NS)
        assert await wait_bound(admin, "s3") == {"s3": "n1"}
        await admin.create(PODS, labelled(pod_manifest("s4", topologySpreadConstraints=spread), app="spread"), NS)
        message = (
            "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, "
            "1 node(s) were unschedulable."
        )
        await wait_condition(admin, "s4", reason="Unschedulable", message=message)
        await admin.patch(NODES, "n2", {"spec": {"unschedulable": False}})
        assert await wait_bound(admin, "s4", timeout=5) == {"s4": "n2"}


async def test_rescheduled_when_a_node_appears(admin: KubeClient, scheduler_client: KubeClient) -> None:
    scheduler = Scheduler(scheduler_client, retry_interval=60)  # only events can wake the pod within the test
    async with running(scheduler):
        await admin.create(PODS, pod_manifest("waiting", nodeSelector={"disk": "ssd"}), NS)
        condition = await wait_condition(admin, "waiting", reason="SchedulerError")
        assert condition == {**condition, "status": "False", "message": "no nodes available to schedule pods"}
        await admin.create(NODES, node_manifest("hdd", labels={"disk": "hdd"}))
        condition = await wait_condition(admin, "waiting", reason="Unschedulable")
        assert condition["message"] == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
        await admin.patch(NODES, "hdd", {"metadata": {"labels": {"disk": "ssd"}}})
        assert await wait_bound(admin, "waiting", timeout=5) == {"waiting": "hdd"}


async def test_a_finished_pod_frees_its_node(admin: KubeClient, scheduler_client: KubeClient) -> None:
    await admin.create(NODES, node_manifest("small", memory="1Gi"))
    await admin.create(PODS, pod_manifest("done", memory="800Mi", nodeName="small"), NS)
    scheduler = Scheduler(scheduler_client, retry_interval=60)  # only the pod's update can wake `next` in time
    async with running(scheduler):
        await admin.create(PODS, pod_manifest("next", memory="800Mi"), NS)
        message = "0/1 nodes are available: 1 Insufficient memory."
        await wait_condition(admin, "next", reason="Unschedulable", message=message)
        await admin.patch(PODS, "done", {"status": {"phase": "Succeeded"}}, NS, subresource="status")
        assert await wait_bound(admin, "next", timeout=5) == {"next": "small"}


async def test_periodic_retry(admin: KubeClient, scheduler_client: KubeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    await admin.create(NODES, node_manifest("only", memory="1Gi"))
    scheduler = Scheduler(scheduler_client, retry_interval=0.5)
    # Node and pod events wake nothing here: only the periodic retry can find the pod a place.
    monkeypatch.setattr(scheduler, "_wake_unschedulable", lambda: None)
    async with running(scheduler):
        await admin.create(PODS, pod_manifest("big", memory="2Gi"), NS)
        message = "0/1 nodes are available: 1 Insufficient memory."
        await wait_condition(admin, "big", reason="Unschedulable", message=message)
        await admin.patch(NODES, "only", {"status": {"allocatable": {"memory": "4Gi"}}}, subresource="status")
        assert await wait_bound(admin, "big", timeout=5) == {"big": "only"}


async def test_launcher_pod_lands_on_a_kubevirt_node(admin: KubeClient, scheduler_client: KubeClient) -> None:
    await admin.create(NODES, node_manifest("no-handler", **DEVICES))  # no kubevirt.io/schedulable label
    no_kvm: dict[str, Any] = {k: v for k, v in DEVICES.items() if k != "devices.kubevirt.io/kvm"}
    await admin.create(NODES, node_manifest("no-kvm", labels=KUBEVIRT_LABELS, **no_kvm))
    await admin.create(NODES, node_manifest("kubevirt", labels=KUBEVIRT_LABELS, **DEVICES))
    vmi: Object = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": NS, "uid": "6f3c0e5e-0000-4000-8000-000000000001"},
        "spec": {
            "domain": {"memory": {"guest": "1Gi"}, "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}],
        },
    }
    mutate_vmi(vmi, AdmissionContext(), operation="CREATE")
    launcher = render_launcher_pod(vmi, LauncherSettings(use_emulation=False))
    launcher["metadata"]["ownerReferences"] = []
    scheduler = Scheduler(scheduler_client)
    async with running(scheduler):
        created = await admin.create(PODS, launcher, NS)
        name = created["metadata"]["name"]
        assert await wait_bound(admin, name) == {name: "kubevirt"}
        # A second VM does not fit next to the first on a node with 2Gi of memory.
        await admin.patch(NODES, "kubevirt", {"status": {"allocatable": {"memory": "2Gi"}}}, subresource="status")
        second = await admin.create(PODS, launcher, NS)
        condition = await wait_condition(admin, second["metadata"]["name"], reason="Unschedulable")
        assert condition["message"] == (
            "0/3 nodes are available: 1 Insufficient devices.kubevirt.io/kvm, 1 Insufficient memory, "
            "1 node(s) didn't match Pod's node affinity/selector."
        )


async def test_two_schedulers_never_double_bind(
    fresh_apiserver: APIServerProcess, admin: KubeClient, scheduler_client: KubeClient
) -> None:
    for i in range(3):
        await admin.create(NODES, node_manifest(f"n{i}", memory="64Gi", cpu="64"))
    other_client = client_for(fresh_apiserver, "scheduler")
    first, second = Scheduler(scheduler_client), Scheduler(other_client)
    try:
        async with running(first, second):
            names = [f"pod-{i}" for i in range(20)]
            await asyncio.gather(*(admin.create(PODS, pod_manifest(n), NS) for n in names))
            placement = await wait_bound(admin, *names)
            assert set(placement.values()) <= {"n0", "n1", "n2"}

            def one_binding_each() -> bool:
                assert first.bindings + second.bindings == len(names)
                assert first.controller.failures == second.controller.failures == 0
                return True

            await consistently(one_binding_each, for_=0.3)
    finally:
        await other_client.close()


async def test_deleting_and_gated_pods(admin: KubeClient, scheduler_client: KubeClient) -> None:
    await admin.create(NODES, node_manifest("n1"))
    scheduler = Scheduler(scheduler_client)
    async with running(scheduler):
        await admin.create(PODS, pod_manifest("gated", schedulingGates=[{"name": "example.org/wait"}]), NS)
        condition = await wait_condition(admin, "gated", reason="SchedulingGated")
        assert condition["message"] == "Scheduling is blocked due to non-empty scheduling gates"
        await admin.patch(PODS, "gated", {"spec": {"schedulingGates": None}}, NS)
        assert await wait_bound(admin, "gated") == {"gated": "n1"}
        assert (await wait_condition(admin, "gated", status="True")).get("reason") is None


async def _heartbeat(admin: KubeClient, name: str, stop: asyncio.Event, status: str = "True") -> None:
    """What the node agent does every 10 s (here every 0.3 s): renew Ready with a fresh lastHeartbeatTime."""
    while not stop.is_set():
        condition = {
            "type": "Ready",
            "status": status,
            "reason": "KubeletReady" if status == "True" else "KubeletNotReady",
            "message": "node agent is posting ready status",
            "lastHeartbeatTime": _stamp(),
        }
        with contextlib.suppress(NotFound):
            await admin.patch(
                NODES,
                name,
                {"status": {"conditions": [condition]}},
                patch_type=STRATEGIC_MERGE_PATCH,
                subresource="status",
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.3)


def _taint_keys(node: Object) -> list[str]:
    return [f"{t['key']}:{t['effect']}" for t in (node.get("spec") or {}).get("taints") or []]


def _ready(node: Object) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


async def test_node_lifecycle_marks_stale_nodes_unknown_and_recovers(
    admin: KubeClient, scheduler_client: KubeClient
) -> None:
    long_ago = datetime.now(UTC) - timedelta(minutes=5)
    await admin.create(
        NODES, node_manifest("stale", heartbeat=long_ago, taints=[{"key": "keep", "effect": "NoExecute"}])
    )
    await admin.create(NODES, node_manifest("alive"))
    await admin.create(NODES, node_manifest("broken", ready="False"))
    # Heartbeats are stamped to the whole second: a grace of 4 s leaves a busy machine 2 s or more between beats.
    lifecycle = NodeLifecycle(scheduler_client, node_monitor_grace=4.0)
    scheduler = Scheduler(scheduler_client)
    stop = asyncio.Event()
    beating = [
        asyncio.create_task(_heartbeat(admin, "alive", stop)),
        asyncio.create_task(_heartbeat(admin, "broken", stop, "False")),
    ]
    try:
        async with running(lifecycle, scheduler):

            async def stale_marked() -> Object | None:
                node = await admin.get(NODES, "stale")
                return node if _ready(node)["status"] == "Unknown" and len(_taint_keys(node)) == 2 else None

            node = await eventually(stale_marked, timeout=8)
            ready = _ready(node)
            assert (ready["reason"], ready["message"]) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
            assert ready["lastHeartbeatTime"] == _stamp(long_ago)
            assert _taint_keys(node) == ["keep:NoExecute", "node.kubernetes.io/unreachable:NoSchedule"]

            async def broken_tainted() -> bool:
                return _taint_keys(await admin.get(NODES, "broken")) == ["node.kubernetes.io/not-ready:NoSchedule"]

            await eventually(broken_tainted, timeout=5)

            # A pod only the stale node could take reports the unreachable taint.
            pinned = pod_manifest(
                "pinned",
                nodeSelector={"kubernetes.io/hostname": "stale"},
                tolerations=[{"key": "keep", "operator": "Exists"}],
            )
            await admin.create(PODS, pinned, NS)
            message = (
                "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                "1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
                "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
            )
            await wait_condition(admin, "pinned", reason="Unschedulable", message=message)

            # The node agent comes back: heartbeats renew Ready and the taint goes; the pod follows.
            revived = asyncio.create_task(_heartbeat(admin, "stale", stop))
            try:

                async def recovered() -> bool:
                    node = await admin.get(NODES, "stale")
                    return _ready(node)["status"] == "True" and _taint_keys(node) == ["keep:NoExecute"]

                await eventually(recovered, timeout=5)
                assert await wait_bound(admin, "pinned", timeout=5) == {"pinned": "stale"}
            finally:
                revived.cancel()
                await asyncio.gather(revived, return_exceptions=True)

            # Heartbeats stop again: the grace timer alone (no more events) marks the node Unknown.
            await eventually(stale_marked, timeout=10)
            alive = await admin.get(NODES, "alive")
            assert _ready(alive)["status"] == "True" and _taint_keys(alive) == []
            assert lifecycle.marked_unknown == 2
    finally:
        stop.set()
        await asyncio.gather(*beating)


# The lead wires `scheduler` into pykubevirt.cli.main; until then the command runs through its own add_parser.
_SCHEDULER_MAIN = (
    "import argparse, sys\n"
    "from pykubevirt.cli import scheduler_command\n"
    "parser = argparse.ArgumentParser(prog='pykubevirt')\n"
    "scheduler_command.add_parser(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.func(args))\n"
)


async def test_scheduler_command_runs_until_sigterm(
    fresh_apiserver: APIServerProcess, admin: KubeClient, tmp_path: Any
) -> None:
    await admin.create(NODES, node_manifest("cli-node"))
    kubeconfig = fresh_apiserver.data_dir / "scheduler.kubeconfig"
    log_path = tmp_path / "scheduler.log"
    with log_path.open("w") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _SCHEDULER_MAIN,
            "scheduler",
            "--kubeconfig",
            str(kubeconfig),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        await admin.create(PODS, pod_manifest("via-cli"), NS)
        assert await wait_bound(admin, "via-cli", timeout=20) == {"via-cli": "cli-node"}
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = log_path.read_text().splitlines()
    assert any('"msg":"bound default/via-cli to cli-node"' in line for line in lines), lines


def kubectl(server: APIServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KUBECTL, "--kubeconfig", str(server.data_dir / "kubeconfig"), *args], capture_output=True, text=True
    )


async def test_kubectl_cordon_and_uncordon_gate_scheduling(
    admin: KubeClient, scheduler_client: KubeClient, fresh_apiserver: APIServerProcess
) -> None:
    await admin.create(NODES, node_manifest("node01"))
    cordon = await asyncio.to_thread(kubectl, fresh_apiserver, "cordon", "node01")
    assert (cordon.returncode, cordon.stdout.strip()) == (0, "node/node01 cordoned")
    listed = await asyncio.to_thread(kubectl, fresh_apiserver, "get", "node", "node01")
    assert "Ready,SchedulingDisabled" in listed.stdout
    scheduler = Scheduler(scheduler_client)
    async with running(scheduler):
        await admin.create(PODS, pod_manifest("waits"), NS)
        condition = await wait_condition(admin, "waits", status="False", reason="Unschedulable")
        assert condition["message"] == "0/1 nodes are available: 1 node(s) were unschedulable."
        uncordon = await asyncio.to_thread(kubectl, fresh_apiserver, "uncordon", "node01")
        assert (uncordon.returncode, uncordon.stdout.strip()) == (0, "node/node01 uncordoned")
        assert await wait_bound(admin, "waits") == {"waits": "node01"}
