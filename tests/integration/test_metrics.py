"""Scrapes of virt-controller's and the API server's /metrics: KubeVirt's and kube-apiserver's names and labels.

virt-controller runs in the test's loop with a simulated node against a real API server process; its metrics
endpoint is the one `pykubevirt virt-controller` serves. virt-handler's are scraped in test_handler.py.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from pykubevirt.client.delegated_auth import DelegatedAuth
from pykubevirt.client.resources import MIGRATIONS, VIRTUAL_MACHINES
from pykubevirt.controller.cluster_metrics import migration_counts
from pykubevirt.controller.metrics_endpoint import MetricsEndpoint
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

Families = dict[str, Any]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def endpoint(cp: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[MetricsEndpoint]:
    served = MetricsEndpoint(
        cp.controller.metrics, auth=DelegatedAuth(cp.controller_client), leading=cp.controller.leading_with_caches
    )
    await served.start(tmp_path_factory.mktemp("controller") / "metrics-address")
    yield served
    await served.stop()


def parse(text: str) -> Families:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def scrape(endpoint: MetricsEndpoint, token: str) -> Families:
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
        session.get(f"http://{endpoint.address}/metrics") as response,
    ):
        assert response.status == 200
        return parse(await response.text())


# The VM's template marks its VMI with an os of its own (KubeVirt's `vm.kubevirt.io/os`, a phase_count label), so
# its count is told apart from VMIs other modules left on the shared API server.
OS = "metrics-test-os"


def phase_count(families: Families, node: str, phase: str) -> float:
    samples = families["kubevirt_vmi_phase_count"].samples if "kubevirt_vmi_phase_count" in families else []
    wanted = {"node": node, "phase": phase, "os": OS}
    return sum(s.value for s in samples if all(s.labels[k] == v for k, v in wanted.items()))


async def test_the_controllers_metrics_need_a_token_the_api_server_accepts(endpoint: MetricsEndpoint) -> None:
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"Authorization": "Bearer not-a-token"}):
            async with session.get(f"http://{endpoint.address}/metrics", headers=headers) as response:
                assert response.status == 401
                assert (await response.json())["reason"] == "Unauthorized"
        async with session.get(f"http://{endpoint.address}/healthz") as response:
            assert response.status == 200
        # The readiness probe's path is open too; this controller runs its controllers with filled caches.
        async with session.get(f"http://{endpoint.address}/leader") as response:
            assert response.status == 200 and await response.json() == {"apiserver": {"leader": "true"}}


async def test_the_phase_count_follows_a_vm_start_and_stop(
    cp: ControlPlane, endpoint: MetricsEndpoint, apiserver: APIServerProcess
) -> None:
    ns = await cp.namespace()
    node = cp.node.name
    token = apiserver.token()
    assert phase_count(await scrape(endpoint, token), node, "running") == 0
    vm = vm_manifest("counted", "Always")
    vm["spec"]["template"]["metadata"]["annotations"]["vm.kubevirt.io/os"] = OS
    await cp.admin.create(VIRTUAL_MACHINES, vm, ns)
    await cp.wait_printable(ns, "counted", "Running")

    async def counted(expected: float) -> Families | None:
        families = await scrape(endpoint, token)
        return families if phase_count(families, node, "running") == expected else None

    running = await eventually(lambda: counted(1))
    info = [s.labels for s in running["kubevirt_vmi_info"].samples if s.labels["name"] == "counted"]
    assert [(i["namespace"], i["node"], i["phase"], i["os"]) for i in info] == [(ns, node, "running", OS)]
    assert set(running["kubevirt_vmi_phase_count"].samples[0].labels) >= {"node", "phase", "os", "instance_type"}
    overhead = [
        s for s in running["kubevirt_vmi_launcher_memory_overhead_bytes"].samples if s.labels["name"] == "counted"
    ]
    assert overhead[0].labels == {"namespace": ns, "name": "counted"} and overhead[0].value > 0
    assert running["kubevirt_virt_controller_leading_status"].samples[0].value == 1
    assert running["kubevirt_virt_controller_ready_status"].samples[0].value == 1
    # The API server is shared with other modules, whose migrations may still be listed: count them as the API does.
    migrations = (await cp.admin.list(MIGRATIONS))["items"]
    assert (
        running["kubevirt_vmi_migrations_in_running_phase"].samples[0].value
        == migration_counts(migrations)[0]["running"]
    )
    # client-go's work-queue and REST client metrics, under KubeVirt's names.
    depth = {s.labels["name"] for s in running["kubevirt_workqueue_depth"].samples}
    assert {"virtualmachine", "virtualmachineinstance", "migration"} <= depth
    adds = {s.labels["name"]: s.value for s in running["kubevirt_workqueue_adds"].samples if s.name.endswith("_total")}
    assert adds["virtualmachine"] >= 1
    requests = running["kubevirt_rest_client_requests"].samples
    assert any(s.labels["method"] == "POST" and s.labels["code"] == "201" for s in requests)
    urls = {s.labels["url"] for s in running["kubevirt_rest_client_request_latency_seconds"].samples}
    assert any(u.endswith("/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances") for u in urls)

    await cp.admin.patch(VIRTUAL_MACHINES, "counted", {"spec": {"runStrategy": "Halted"}}, ns)
    await cp.wait_printable(ns, "counted", "Stopped")
    await eventually(lambda: counted(0))


def _context(server: APIServerProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.ca_file()))


async def test_the_api_servers_metrics_need_a_token_and_count_requests_as_kube_apiserver(
    apiserver: APIServerProcess, tmp_path: Path
) -> None:
    url = f"{apiserver.url}/metrics"
    async with aiohttp.ClientSession() as session:
        async with session.get(url, ssl=_context(apiserver)) as response:
            assert response.status == 401
        headers = {"Authorization": f"Bearer {apiserver.token()}"}
        async with session.get(
            f"{apiserver.url}/api/v1/namespaces/default/configmaps",
            headers=headers,
            ssl=_context(apiserver),
        ) as response:
            assert response.status == 200
    # kubectl reaches it as it reaches kube-apiserver's.
    families = parse(kubectl(apiserver, tmp_path / "home", "get", "--raw", "/metrics").stdout)
    requests = families["apiserver_request"].samples
    # The server is shared: other tests' configmap lists (a 400, a 504) may be counted too; this one's succeeded.
    listed = [
        s.labels
        for s in requests
        if s.labels["resource"] == "configmaps"
        and s.labels["verb"] == "LIST"
        and s.labels["scope"] == "namespace"
        and s.labels["code"] == "200"
    ]
    assert listed and listed[0]["version"] == "v1" and listed[0]["group"] == "", listed
    assert listed[0]["component"] == "apiserver" and listed[0]["subresource"] == ""
    assert any(s.labels["code"] == "401" for s in requests)
    durations = families["apiserver_request_duration_seconds"].samples
    assert any(s.labels.get("resource") == "configmaps" and s.name.endswith("_count") for s in durations)
    stored = {s.labels["resource"]: s.value for s in families["apiserver_storage_objects"].samples}
    assert stored["namespaces"] >= 4 and "customresourcedefinitions.apiextensions.k8s.io" in stored
