"""Clients on the API server's host reach it over its unix socket (no TLS), authenticated as over HTTPS."""

from __future__ import annotations

import dataclasses
import stat
import subprocess
from pathlib import Path

import aiohttp
import pytest

from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.client.errors import Forbidden
from pykubevirt.client.resources import NAMESPACES, SECRETS
from tests.support.apiserver_process import KUBECTL, APIServerProcess


def named_socket(kubeconfig: Path) -> str:
    socket = load_kubeconfig(kubeconfig).local_socket
    assert socket, f"{kubeconfig} names no local socket"
    return socket


async def test_a_component_talks_to_the_server_over_its_socket_with_its_own_identity(
    apiserver: APIServerProcess,
) -> None:
    kubeconfig = apiserver.data_dir / "virt-controller.kubeconfig"
    socket_path = Path(named_socket(kubeconfig))
    assert socket_path.parent == apiserver.data_dir
    assert stat.S_ISSOCK(socket_path.stat().st_mode)
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
    async with KubeClient(load_kubeconfig(kubeconfig)) as client:
        listed = await client.request("GET", "/apis/kubevirt.io/v1/virtualmachineinstances")
        assert listed["kind"] == "VirtualMachineInstanceList"
        assert client.base_url == "http://localhost"
        assert isinstance(client.session.connector, aiohttp.UnixConnector)
        # RBAC still applies to the component's identity.
        with pytest.raises(Forbidden, match="system:serviceaccount:kubevirt:kubevirt-controller"):
            await client.request("DELETE", "/api/v1/namespaces/default")


async def test_the_socket_asks_for_a_token_as_https_does(apiserver: APIServerProcess) -> None:
    socket_path = named_socket(apiserver.kubeconfig)
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(socket_path)) as session,
        session.get("http://localhost/api/v1/namespaces") as response,
    ):
        assert response.status == 401
        assert (await response.json())["reason"] == "Unauthorized"


async def test_without_the_socket_a_client_uses_https(apiserver: APIServerProcess) -> None:
    config = dataclasses.replace(load_kubeconfig(apiserver.kubeconfig), local_socket="/nonexistent/api.sock")
    async with KubeClient(config) as client:
        assert (await client.request("GET", "/api/v1/namespaces/default"))["metadata"]["name"] == "default"
        assert client.base_url == apiserver.url


async def test_get_or_none_is_none_only_for_a_404(apiserver: APIServerProcess) -> None:
    async with KubeClient(load_kubeconfig(apiserver.kubeconfig)) as client:
        found = await client.get_or_none(NAMESPACES, "default")
        assert found is not None and found["metadata"]["name"] == "default"
        assert await client.get_or_none(NAMESPACES, "no-such-namespace") is None
    async with KubeClient(load_kubeconfig(apiserver.data_dir / "virt-api.kubeconfig")) as client:
        with pytest.raises(Forbidden):
            await client.get_or_none(SECRETS, "no-such-secret", "default")


def test_kubectl_reads_the_same_kubeconfig(apiserver: APIServerProcess) -> None:
    out = subprocess.run(
        [KUBECTL, "--kubeconfig", str(apiserver.kubeconfig), "get", "namespace", "default", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "namespace/default"
