"""pods/eviction, PodDisruptionBudgets, KubeVirt's eviction webhook, the evacuation controller and `kubectl drain`
against a real API server process, with virt-controller and a simulated node (no QEMU)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH, Object
from pykubevirt.client.resources import (
    KUBEVIRTS,
    MIGRATIONS,
    NODES,
    PODS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import KUBECTL, APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.http_client import APIClient, Reply
from tests.support.waiting import consistently, eventually

PDB_PATH = "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
WEBHOOK = 'admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: '
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest_asyncio.fixture
async def cp(fresh_apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(fresh_apiserver)
    yield plane
    await plane.stop()


@pytest_asyncio.fixture
async def http(fresh_apiserver: APIServerProcess) -> AsyncIterator[APIClient]:
    async with APIClient(fresh_apiserver) as client:
        yield client


def eviction(name: str, ns: str, **delete_options: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


async def evict(http: APIClient, ns: str, pod: str, **delete_options: Any) -> Reply:
    return await http.post(f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", eviction(pod, ns, **delete_options))


async def ready_pod(http: APIClient, ns: str, name: str, **labels: str) -> None:
    """A bare pod on node01 that reports Running and Ready (what a kubelet would write)."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "node01", "containers": [{"name": "c", "image": "busybox"}]},
    }
    assert (await http.post(f"/api/v1/namespaces/{ns}/pods", body)).status == 201
    status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    assert (await http.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", status)).status == 200


async def budget(http: APIClient, ns: str, name: str) -> dict[str, Any]:
    reply = await http.get(f"{PDB_PATH.format(ns=ns)}/{name}")
    assert reply.status == 200, reply.body
    return dict(reply.body)


async def kubectl(server: APIServerProcess, *args: str) -> tuple[int, str, str]:
    """Run the real kubectl against the server as admin: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(server.data_dir / "kubeconfig"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    return int(process.returncode or 0), out.decode(), err.decode()


async def namespace(http: APIClient, name: str) -> str:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    assert (await http.post("/api/v1/namespaces", body)).status == 201
    return name


async def test_eviction_deletes_a_pod_no_budget_covers(http: APIClient) -> None:
    ns = await namespace(http, "plain")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    assert (await http.post(f"/api/v1/namespaces/{ns}/pods", body)).status == 201
    reply = await evict(http, ns, "p", gracePeriodSeconds=0)
    assert reply.status == 201, reply.body
    assert reply.body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    assert (await http.get(f"/api/v1/namespaces/{ns}/pods/p")).status == 404
    assert (await evict(http, ns, "p")).status == 404


async def test_disruption_budget_allows_what_it_can_spare(http: APIClient, fresh_apiserver: APIServerProcess) -> None:
    ns = await namespace(http, "budgets")
    for name in ("web-1", "web-2"):
        await ready_pod(http, ns, name, app="web")
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    assert (await http.post(PDB_PATH.format(ns=ns), pdb)).status == 201

    async def settled() -> dict[str, Any] | None:
        status = (await budget(http, ns, "web")).get("status") or {}
        return status if status.get("observedGeneration") == 1 and status.get("currentHealthy") == 2 else None

    status = await eventually(settled)
    assert (status["disruptionsAllowed"], status["desiredHealthy"], status["expectedPods"]) == (1, 1, 2)
    assert status["conditions"][0]["type"] == "DisruptionAllowed"
    assert (status["conditions"][0]["status"], status["conditions"][0]["reason"]) == ("True", "SufficientPods")
    code, out, _ = await kubectl(fresh_apiserver, "get", "pdb", "-n", ns)
    assert code == 0
    table = out.split("\n")
    assert table[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert table[1].split()[:4] == ["web", "1", "N/A", "1"]

    # The one disruption the budget allows goes to the first eviction; the pod is deleted.
    assert (await evict(http, ns, "web-1")).status == 201
    taken = (await budget(http, ns, "web")).get("status") or {}
    assert taken["disruptionsAllowed"] == 0

    async def refused() -> Reply | None:
        reply = await evict(http, ns, "web-2")
        return reply if reply.status == 429 else None

    reply = await eventually(refused)
    assert reply.body["message"] == VIOLATION
    assert reply.body["reason"] == "TooManyRequests"
    assert reply.body["details"]["causes"] == [
        {"reason": "DisruptionBudget", "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}
    ]
    assert (await http.get(f"/api/v1/namespaces/{ns}/pods/web-2")).status == 200

    # A second budget over the same pod: kube refuses to choose.
    pdb["metadata"]["name"] = "web-too"
    assert (await http.post(PDB_PATH.format(ns=ns), pdb)).status == 201
    reply = await evict(http, ns, "web-2")
    assert reply.status == 500
    assert "more than one PodDisruptionBudget" in reply.body["message"]


# ------------------------------------------------------------------------------------------------ KubeVirt


async def running_vmi(
    cp: ControlPlane, ns: str, name: str, strategy: str, *, migratable: bool = True, run_strategy: str = "Always"
) -> Object:
    """A VM with `evictionStrategy` whose VMI runs on node01 (LiveMigratable as virt-handler would report it)."""
    body = vm_manifest(name, run_strategy)
    body["spec"]["template"]["spec"]["evictionStrategy"] = strategy
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)
    vmi = await cp.wait_vmi_phase(ns, name, "Running")
    condition = {"type": "LiveMigratable", "status": "True" if migratable else "False"}
    if not migratable:
        condition |= {"reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI with non-shared HostDisk"}
    conditions = [*((vmi.get("status") or {}).get("conditions") or []), condition]
    ops = [
        {"op": "replace" if "conditions" in vmi["status"] else "add", "path": "/status/conditions", "value": conditions}
    ]
    await cp.handler_client.patch(VIRTUAL_MACHINE_INSTANCES, name, ops, ns, patch_type=JSON_PATCH)
    return vmi


async def launcher(cp: ControlPlane, ns: str, name: str) -> Object:
    pods = (await cp.admin.list(PODS, ns, label_selector=f"kubevirt.io/domain={name}"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert len(live) == 1, pods
    return dict(live[0])


async def vmi_stopped(cp: ControlPlane, ns: str, name: str) -> None:
    """The VMI ended (the simulated node reports its launcher gone, so Failed; a real guest may also Succeed)."""

    async def final() -> bool:
        vmi = await cp.vmi(ns, name)
        return vmi is not None and (vmi.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    await eventually(final)


async def test_kubevirt_eviction_strategies(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    await running_vmi(cp, ns, "live", "LiveMigrate")
    await running_vmi(cp, ns, "stuck", "LiveMigrate", migratable=False)
    await running_vmi(cp, ns, "ext", "External")
    # RunStrategy Once, so that the VM stays down once its guest has stopped.
    await running_vmi(cp, ns, "gone", "None", run_strategy="Once")

    # LiveMigrate: refused with 429, the VMI marked for evacuation from its node.
    pod = await launcher(cp, ns, "live")
    reply = await evict(http, ns, pod["metadata"]["name"])
    assert reply.status == 429, reply.body
    assert reply.body["message"] == WEBHOOK + f'Eviction triggered evacuation of VMI "{ns}/live"'
    vmi = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "live", ns)
    assert vmi["status"]["evacuationNodeName"] == "node01"
    again = await evict(http, ns, pod["metadata"]["name"])
    assert again.status == 429
    assert (
        again.body["message"] == WEBHOOK + f'Evacuation in progress: Eviction triggered evacuation of VMI "{ns}/live"'
    )
    pod_stuck = await launcher(cp, ns, "stuck")
    reply = await evict(http, ns, pod_stuck["metadata"]["name"])
    assert reply.status == 429
    assert (
        reply.body["message"]
        == WEBHOOK + "VMI stuck is configured with an eviction strategy but is not live-migratable"
    )

    # The evacuation controller turns the mark into a migration.
    async def migration() -> Object | None:
        items = (await cp.admin.list(MIGRATIONS, ns))["items"]
        return items[0] if items else None

    vmim = await eventually(migration)
    assert vmim["metadata"]["generateName"] == "kubevirt-evacuation-"
    assert vmim["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] == "node01"
    assert vmim["spec"] == {"vmiName": "live", "priority": "system-critical"}
    assert vmim["metadata"]["labels"]["kubevirt.io/vmi-name"] == "live"

    # External: refused and marked, but no migration: something outside KubeVirt acts on the mark.
    ext_pod = await launcher(cp, ns, "ext")
    reply = await evict(http, ns, ext_pod["metadata"]["name"])
    assert reply.status == 429
    assert reply.body["message"] == WEBHOOK + f'Eviction triggered evacuation of VMI "{ns}/ext"'
    assert (await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "ext", ns))["status"]["evacuationNodeName"] == "node01"

    # None: the launcher pod is evicted and the VM's guest stops with it.
    gone_pod = await launcher(cp, ns, "gone")
    assert (await evict(http, ns, gone_pod["metadata"]["name"])).status == 201
    await vmi_stopped(cp, ns, "gone")
    # By now the evacuation controller has long seen the External VMI's mark: still only the one migration.
    names = [m["spec"]["vmiName"] for m in (await cp.admin.list(MIGRATIONS, ns))["items"]]
    assert names == ["live"]


def active(migrations: list[Object]) -> list[Object]:
    return [m for m in migrations if (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]


async def test_evacuation_respects_the_clusters_migration_limits(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"migrations": {"parallelOutboundMigrationsPerNode": 1}}},
    }
    await cp.admin.create(KUBEVIRTS, kubevirt, "kubevirt")
    await eventually(lambda: cp.controller.config.migrations.parallel_outbound_migrations_per_node == 1)
    for name in ("a", "b", "c"):
        await running_vmi(cp, ns, name, "LiveMigrate")
    # The drain taint marks every VMI on the node at once, as the deprecated node-drain path does.
    taint = {"key": "kubevirt.io/drain", "effect": "NoSchedule"}
    await cp.admin.patch(NODES, "node01", {"spec": {"taints": [taint]}})

    async def migrations() -> list[Object]:
        return list((await cp.admin.list(MIGRATIONS, ns))["items"])

    first = await eventually(migrations)
    # One outbound migration per node: the other two wait, however often the node is looked at.
    await consistently(lambda: _count_active(migrations, 1), for_=1.5)
    assert [m["metadata"]["annotations"]["kubevirt.io/evacuationMigration"] for m in first] == ["node01"]

    kubevirt["spec"]["configuration"]["migrations"] = {
        "parallelOutboundMigrationsPerNode": 5,
        "parallelMigrationsPerCluster": 2,
    }
    current = await cp.admin.get(KUBEVIRTS, "kubevirt", "kubevirt")
    current["spec"] = kubevirt["spec"]
    await cp.admin.update(KUBEVIRTS, current)
    # Now the cluster-wide limit of two binds.
    await eventually(lambda: _count_active(migrations, 2))
    await consistently(lambda: _count_active(migrations, 2), for_=1.5)
    await cp.admin.patch(NODES, "node01", {"spec": {"taints": None}})


async def _count_active(migrations: Any, wanted: int) -> bool:
    return len(active(await migrations())) == wanted


async def test_kubectl_drain_and_uncordon(cp: ControlPlane) -> None:
    ns = await cp.namespace()
    await running_vmi(cp, ns, "plain", "None", run_strategy="Once")
    await running_vmi(cp, ns, "mover", "LiveMigrate")
    plain_pod = (await launcher(cp, ns, "plain"))["metadata"]["name"]
    mover_pod = (await launcher(cp, ns, "mover"))["metadata"]["name"]

    # kubectl drain keeps retrying the refused eviction until its timeout: the migration has to move the VMI first.
    code, out, err = await kubectl(
        cp.server, "drain", "node01", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=8s"
    )
    assert code != 0
    assert "node/node01 cordoned" in out
    assert f"pod/{plain_pod} evicted" in out
    assert f"pod/{mover_pod} evicted" not in out
    assert (
        f'error when evicting pods/"{mover_pod}" -n "{ns}" (will retry after 5s): '
        + WEBHOOK
        + f'Eviction triggered evacuation of VMI "{ns}/mover"'
    ) in err
    assert f'Evacuation in progress: Eviction triggered evacuation of VMI "{ns}/mover"' in err
    assert "global timeout reached: 8s" in err

    assert (await cp.admin.get(NODES, "node01"))["spec"]["unschedulable"] is True
    # The None VM's launcher went with the drain and its guest stopped; the LiveMigrate VM is still there, marked.
    await vmi_stopped(cp, ns, "plain")
    mover = await cp.admin.get(VIRTUAL_MACHINE_INSTANCES, "mover", ns)
    assert mover["status"]["evacuationNodeName"] == "node01"
    assert mover["status"]["phase"] == "Running"
    assert [m["spec"]["vmiName"] for m in (await cp.admin.list(MIGRATIONS, ns))["items"]] == ["mover"]

    code, out, _ = await kubectl(cp.server, "uncordon", "node01")
    assert (code, out.strip()) == (0, "node/node01 uncordoned")
    assert "unschedulable" not in (await cp.admin.get(NODES, "node01"))["spec"]


async def test_cluster_default_strategy_if_possible_and_target_pods(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"evictionStrategy": "LiveMigrate"}},
    }
    await cp.admin.create(KUBEVIRTS, kubevirt, "kubevirt")
    await eventually(lambda: cp.controller.config.eviction_strategy == "LiveMigrate")
    # No strategy of its own: the cluster's applies.
    body = vm_manifest("inherits")
    await cp.admin.create(VIRTUAL_MACHINES, body, ns)
    await cp.wait_vmi_phase(ns, "inherits", "Running")
    reply = await evict(http, ns, (await launcher(cp, ns, "inherits"))["metadata"]["name"])
    assert reply.status == 429
    assert (
        reply.body["message"]
        == WEBHOOK + "VMI inherits is configured with an eviction strategy but is not live-migratable"
    )

    # LiveMigrateIfPossible: a migratable VMI is evacuated, one that cannot migrate is simply evicted.
    await running_vmi(cp, ns, "can", "LiveMigrateIfPossible")
    await running_vmi(cp, ns, "cannot", "LiveMigrateIfPossible", migratable=False, run_strategy="Once")
    pod = await launcher(cp, ns, "can")
    reply = await evict(http, ns, pod["metadata"]["name"])
    assert reply.status == 429
    assert reply.body["message"] == WEBHOOK + f'Eviction triggered evacuation of VMI "{ns}/can"'
    assert (await evict(http, ns, (await launcher(cp, ns, "cannot"))["metadata"]["name"])).status == 201
    await vmi_stopped(cp, ns, "cannot")

    # A launcher pod on another node than the VMI's (a migration target) is not the one to evacuate from.
    target = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "virt-launcher-can-target",
            "labels": {"kubevirt.io": "virt-launcher"},
            "annotations": {"kubevirt.io/domain": "can"},
        },
        "spec": {"nodeName": "node02", "containers": [{"name": "compute", "image": "virt-launcher"}]},
    }
    await cp.admin.create(PODS, target, ns)
    # As `virtctl evacuate-cancel` would (KubeVirt's admission lets only its own accounts write VMI status).
    await cp.handler_client.patch(
        VIRTUAL_MACHINE_INSTANCES,
        "can",
        [{"op": "remove", "path": "/status/evacuationNodeName"}],
        ns,
        patch_type=JSON_PATCH,
    )
    reply = await evict(http, ns, "virt-launcher-can-target")
    assert reply.status == 429
    assert reply.body["message"] == WEBHOOK + "Eviction request for target Pod"
