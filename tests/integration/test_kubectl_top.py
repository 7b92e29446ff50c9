"""`kubectl top` against the API server's metrics.k8s.io, made from a real node agent's resource metrics: a pod that
burns CPU and holds memory shows both, per container too; the node shows its own; who may read them is RBAC's."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from pykubevirt.client.resources import PODS
from tests.integration.test_node_agent import AGENT_IP, Env, env, in_thread, phase, pod_manifest, py, wait_pod
from tests.integration.test_pod_exec import running_pod
from tests.support.apiserver_process import kubectl

__all__ = ["env"]  # the node agent fixture of test_node_agent, one for this module

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.kubectl]

# Holds 200 MiB (touched) and keeps one core busy for a minute.
HOG = "block = b'x' * (200 * 1024 * 1024)\nimport time\nend = time.time() + 60\nwhile time.time() < end: pass"
IDLE = "import time; time.sleep(600)"


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()[1:]]


def millicores(text: str) -> int:
    match = re.fullmatch(r"(\d+)m", text)
    assert match, text
    return int(match[1])


def mebibytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)Mi", text)
    assert match, text
    return int(match[1])


async def test_top_pod_shows_what_each_container_uses(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "hog", py("busy", HOG), py("quiet", IDLE))
    home = tmp_path / "home"
    rows = table((await in_thread(kubectl, env.server, home, "top", "pod", "-n", ns, "--containers")).stdout)
    usage = {row[1]: (millicores(row[2]), mebibytes(row[3])) for row in rows if row[0] == "hog"}
    assert set(usage) == {"busy", "quiet"}
    assert usage["busy"][0] >= 100, usage  # a busy loop, even on a machine the other tests keep busy
    assert usage["busy"][1] >= 200, usage
    # The sleeper's start may fall in the first window, but it uses less than the loop and holds far less.
    assert usage["quiet"][0] < usage["busy"][0] and 1 <= usage["quiet"][1] < 100, usage
    (pod_row,) = table((await in_thread(kubectl, env.server, home, "top", "pod", "hog", "-n", ns)).stdout)
    assert pod_row[0] == "hog" and mebibytes(pod_row[2]) >= usage["busy"][1] + usage["quiet"][1] - 1
    await env.client.create(PODS, pod_manifest("other", env.node, py("main", IDLE)), ns)
    await wait_pod(env.client, ns, "other", lambda p: phase(p) == "Running")
    everything = await in_thread(kubectl, env.server, home, "top", "pod", "-n", ns)
    assert sorted(row[0] for row in table(everything.stdout)) == ["hog", "other"]
    by_name = ("--field-selector", "metadata.name=other")
    selected = await in_thread(kubectl, env.server, home, "top", "pod", "-n", ns, *by_name)
    assert [row[0] for row in table(selected.stdout)] == ["other"]


async def test_top_node_shows_the_nodes_usage_against_its_capacity(env: Env, tmp_path: Path) -> None:
    result = await in_thread(kubectl, env.server, tmp_path / "home", "top", "node", env.node)
    (row,) = table(result.stdout)
    assert row[0] == env.node
    # At most what the node's cores give, give or take the slice a busy core has not accounted yet.
    assert millicores(row[1]) >= 0 and 0 <= int(row[2].rstrip("%")) <= 101
    assert mebibytes(row[3]) > 0 and 0 < int(row[4].rstrip("%")) <= 100


async def test_metrics_of_what_runs_nowhere_are_not_found(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    home = tmp_path / "home"
    missing = await in_thread(kubectl, env.server, home, "top", "pod", "nosuch", "-n", ns, check=False)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f'Error from server (NotFound): podmetrics.metrics.k8s.io "{ns}/nosuch" not found'
    path = "/apis/metrics.k8s.io/v1beta1/nodes/nowhere"
    nodes = await in_thread(kubectl, env.server, home, "get", "--raw", path, check=False)
    assert nodes.stderr.strip() == 'Error from server (NotFound): nodemetrics.metrics.k8s.io "nowhere" not found'


async def test_reading_metrics_is_rbacs_to_allow(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "watched", py("main", IDLE))
    home = tmp_path / "home"

    def admin(*args: str) -> str:
        return kubectl(env.server, home, *args).stdout

    admin("create", "serviceaccount", "reader", "-n", ns)
    token = admin("create", "token", "reader", "-n", ns).strip()
    refused = await in_thread(kubectl, env.server, home, "--token", token, "top", "pod", "-n", ns, check=False)
    assert refused.stderr.strip() == (
        f'Error from server (Forbidden): pods.metrics.k8s.io is forbidden: User "system:serviceaccount:{ns}:reader" '
        f'cannot list resource "pods" in API group "metrics.k8s.io" in the namespace "{ns}"'
    )
    # The view role takes metrics-server's reader role in by aggregation, as on a cluster with metrics-server.
    admin("create", "rolebinding", "reader", "-n", ns, "--clusterrole=view", f"--serviceaccount={ns}:reader")
    allowed = await in_thread(kubectl, env.server, home, "--token", token, "top", "pod", "-n", ns)
    assert [row[0] for row in table(allowed.stdout)] == ["watched"]
    # The node's own endpoint is the kubelet's: `get nodes/metrics`, which the reader has not.
    url = f"http://{AGENT_IP}:{env.agent.log_server.port}/metrics/resource"
    async with aiohttp.ClientSession() as session:
        async with session.get(url) as anonymous:
            assert anonymous.status == 401
        async with session.get(url, headers={"Authorization": f"Bearer {token}"}) as reader:
            assert reader.status == 403
        async with session.get(url, headers={"Authorization": f"Bearer {env.server.token()}"}) as allowed_scrape:
            text = await allowed_scrape.text()
    assert allowed_scrape.status == 200
    assert f'container_cpu_usage_seconds_total{{container="main",namespace="{ns}",pod="watched"}}' in text
