"""A node's tokens for projected `serviceAccountToken` volumes: TokenRequests as a node, one per pod and source until
80 % of its life, and the API server's refusal said for an account that does not exist."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from pykubevirt.apiserver.service_account_admission import token_volume
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import CONFIG_MAPS, NAMESPACES, SERVICE_ACCOUNTS
from pykubevirt.node.node_context import api_fetch
from pykubevirt.node.pod_dirs import PodDir
from pykubevirt.node.service_account_tokens import ServiceAccountTokens, TokenError
from pykubevirt.node.volumes import prepare_volumes
from tests.integration.conftest import unique
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for, simulated_node_client
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="function")


@dataclass
class Cluster:
    admin: KubeClient
    node: KubeClient
    namespace: str

    async def account(self, name: str) -> None:
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        await self.admin.request("POST", f"/api/v1/namespaces/{self.namespace}/serviceaccounts", body=account)

    async def user_of(self, token: str) -> str:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        reviewed = await self.admin.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=review)
        return str(reviewed["status"]["user"]["username"])


@pytest_asyncio.fixture
async def cluster(fresh_apiserver: APIServerProcess) -> AsyncIterator[Cluster]:
    """The admin, a node's client, and a namespace of the test's own."""
    admin = client_for(fresh_apiserver)
    node = await simulated_node_client(fresh_apiserver, admin)
    try:
        ns = unique("sat")
        await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        yield Cluster(admin, node, ns)
    finally:
        await node.close()
        await admin.close()


async def test_tokens_are_requested_as_the_node_and_kept_until_most_of_their_life_is_gone(cluster: Cluster) -> None:
    ns, node, admin = cluster.namespace, cluster.node, cluster.admin
    await cluster.account("builder")
    pod = {"metadata": {"name": "p", "namespace": ns, "uid": "u-1"}, "spec": {"serviceAccountName": "builder"}}
    now = [time.time()]  # the server's expirationTimestamp is wall-clock time
    tokens = ServiceAccountTokens(node, clock=lambda: now[0])
    before = await admin.request("GET", "/debug/writes")

    first = await tokens.token(pod, {"path": "token", "expirationSeconds": 3600})
    again = await tokens.token(pod, {"path": "token", "expirationSeconds": 3600})
    now[0] += 0.81 * 3600  # past 80 % of the hour: asked for anew
    renewed = await tokens.token(pod, {"path": "token", "expirationSeconds": 3600})

    # The token authenticates as the pod's service account.
    assert await cluster.user_of(first) == f"system:serviceaccount:{ns}:builder"
    assert first == again == renewed
    after = await admin.request("GET", "/debug/writes")

    def requests(counts: dict) -> int:
        return sum(c["count"] for c in counts["writes"] if c["resource"] == "POST serviceaccounts/token")

    assert requests(after) - requests(before) == 2

    missing = {"metadata": {"name": "q", "namespace": ns, "uid": "u-2"}, "spec": {"serviceAccountName": "nobody"}}
    with pytest.raises(TokenError) as refused:
        await tokens.token(missing, {"path": "token"})
    assert str(refused.value) == 'serviceaccounts "nobody" not found'


async def test_a_projected_volume_gets_the_token_the_namespace_and_a_configmap(
    cluster: Cluster, tmp_path: Path
) -> None:
    """kube's `kube-api-access` layout (token, ca.crt, namespace), written by the node agent's volume code."""
    ns, node, admin = cluster.namespace, cluster.node, cluster.admin

    async def root_ca() -> str | None:
        # The namespace's default account and CA ConfigMap, which kube's controllers make with it.
        try:
            await admin.get(SERVICE_ACCOUNTS, "default", ns)
            return str((await admin.get(CONFIG_MAPS, "kube-root-ca.crt", ns))["data"]["ca.crt"])
        except NotFound:
            return None

    ca = await eventually(root_ca, timeout=10)
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    volume = token_volume("kube-api-access-x1")
    pod = {"metadata": {"name": "p", "namespace": ns, "uid": "u-3"}, "spec": {"volumes": [volume]}}
    prepared = await prepare_volumes(pod, PodDir(tmp_path, "u-3"), api_fetch(node), ServiceAccountTokens(node))
    assert prepared.errors == {}
    written = Path(prepared.host_paths["kube-api-access-x1"])
    assert sorted(p.name for p in written.iterdir()) == ["ca.crt", "namespace", "token"]
    assert (written / "namespace").read_text() == ns and (written / "ca.crt").read_text() == ca
    assert await cluster.user_of((written / "token").read_text()) == f"system:serviceaccount:{ns}:default"

    # Without tokens to hand the volume fails, saying why.
    failed = await prepare_volumes(pod, PodDir(tmp_path, "u-4"), api_fetch(node))
    reason = "volume 'kube-api-access-x1': no service account tokens on this node"
    assert failed.errors == {"kube-api-access-x1": reason}
