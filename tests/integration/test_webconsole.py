"""The web console's proxy as a real process in front of a real API server: login with a token, forwarding with the
session's token (watch streams included), and what it refuses (no session, cross-site writes and websockets)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import DATA_VOLUMES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from tests.integration.conftest import unique, vm_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.storage_plane import storage_plane
from tests.support.waiting import eventually

VMS = "/apis/kubevirt.io/v1/namespaces/{}/virtualmachines"


@contextlib.contextmanager
def console_for(kubeconfig: Path, tmp_path: Path, *flags: str) -> Iterator[str]:
    """`pykubevirt webconsole` on loopback for the API server of `kubeconfig`; its base URL."""
    address_file = tmp_path / "address"
    log = (tmp_path / "webconsole.log").open("w")
    argv = pykubevirt_argv("webconsole", "--kubeconfig", str(kubeconfig), "--address-file", str(address_file), *flags)
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            if address_file.exists() or process.poll() is not None:
                break
            time.sleep(0.05)
        assert address_file.exists(), (tmp_path / "webconsole.log").read_text()
        yield f"http://{address_file.read_text().strip()}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def console(apiserver: APIServerProcess, tmp_path: Path) -> Iterator[str]:
    with console_for(apiserver.kubeconfig, tmp_path) as url:
        yield url


@pytest.fixture
async def browser() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that keeps cookies the way a browser does (the session cookie is set for the loopback IP)."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


OURS = {"X-Console": "1"}


async def test_the_page_is_served_with_a_strict_policy_and_the_api_needs_a_login(
    console: str, browser: aiohttp.ClientSession
) -> None:
    async with browser.get(console + "/") as reply:
        assert reply.status == 200
        assert "/static/dist/app.js" in await reply.text()
        policy = reply.headers["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    async with browser.get(console + "/api/v1/namespaces") as reply:
        assert reply.status == 401
        assert (await reply.json())["reason"] == "Unauthorized"
    async with browser.get(console + "/console/nodes/node01/metrics") as reply:
        assert reply.status == 401, "node metrics (the charts) need a session too"
    async with browser.post(console + "/console/login", json={"token": "not-a-token"}, headers=OURS) as reply:
        assert reply.status == 401
        assert "does not accept this token" in (await reply.json())["message"]
    async with browser.post(console + "/console/login", json={"token": "x"}) as reply:
        assert reply.status == 403, "a login without the console's header (a cross-site form) is refused"


async def test_a_session_forwards_requests_and_watches_with_the_users_token(
    console: str, browser: aiohttp.ClientSession, apiserver: APIServerProcess, namespace: str
) -> None:
    async with browser.post(console + "/console/login", json={"token": apiserver.token()}, headers=OURS) as reply:
        assert reply.status == 200, await reply.text()
        assert (await reply.json())["username"]
        cookie = reply.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert apiserver.token() not in cookie
    async with browser.get(console + "/console/whoami") as reply:
        assert reply.status == 200
    vms = console + VMS.format(namespace)
    async with browser.get(vms) as reply:
        assert reply.status == 200
        resource_version = (await reply.json())["metadata"]["resourceVersion"]

    name = unique("vm")
    async with browser.post(vms, json=vm_manifest(name)) as reply:
        assert reply.status == 403, "a write without the console's header is refused"

    async def first_event() -> dict[str, object]:
        async with browser.get(vms, params={"watch": "1", "resourceVersion": resource_version}) as watch:
            assert watch.status == 200
            line = await watch.content.readline()
            event: dict[str, object] = json.loads(line)
            return event

    watching = asyncio.create_task(first_event())
    async with browser.post(vms, json=vm_manifest(name), headers=OURS) as reply:
        assert reply.status == 201, await reply.text()
    event = await asyncio.wait_for(watching, 20)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == name  # type: ignore[index]

    # A refusal passes through as the API server's Status, 422 and its causes.
    async with browser.get(f"{vms}/{name}") as reply:
        vm = await reply.json()
    vm["spec"]["runStrategy"] = "Sometimes"
    async with browser.put(f"{vms}/{name}", json=vm, headers=OURS) as reply:
        assert reply.status == 422
        status = await reply.json()
        assert status["kind"] == "Status" and "runStrategy" in json.dumps(status)

    async with browser.post(console + "/console/logout", headers=OURS) as reply:
        assert reply.status == 200
    async with browser.get(vms) as reply:
        assert reply.status == 401, "after logout the session's token is gone"


async def test_websockets_from_another_origin_are_refused(
    console: str, browser: aiohttp.ClientSession, apiserver: APIServerProcess, namespace: str
) -> None:
    async with browser.post(console + "/console/login", json={"token": apiserver.token()}, headers=OURS) as reply:
        assert reply.status == 200
    path = f"/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachineinstances/none/console"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await browser.ws_connect(console + path, headers={"Origin": "http://evil.example"})
    assert refused.value.status == 403
    # From the console's own origin the request reaches virt-api, which answers for the VMI that does not exist.
    with pytest.raises(aiohttp.WSServerHandshakeError) as missing:
        await browser.ws_connect(console + path, headers={"Origin": console}, protocols=("plain.kubevirt.io",))
    assert missing.value.status == 404


async def test_an_upload_streams_through_the_console_to_cdis_upload_proxy(
    browser: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """The browser's path for an upload: an upload DataVolume, an UploadTokenRequest, and the image POSTed to the
    console's /v1beta1/upload with that token, streamed on to the upload proxy named by --uploadproxy-url (the API
    server's here; without the flag the console takes the API server's too, as `up` runs it) and the upload server."""
    server = APIServerProcess(tmp_path / "apiserver").start()
    flags = ("--uploadproxy-url", server.url, "--uploadproxy-insecure")
    try:
        async with storage_plane(server, tmp_path, "console-node") as plane:
            with console_for(server.kubeconfig, tmp_path, *flags) as console:
                await upload_through(console, browser, server, plane.admin, tmp_path)
            # The flag is where uploads go: a console given a closed port says so, and nothing is sent elsewhere.
            (tmp_path / "closed").mkdir()
            closed = ("--uploadproxy-url", "http://127.0.0.1:9")
            with console_for(server.kubeconfig, tmp_path / "closed", *closed) as console:
                await login(browser, console, server)
                headers = {**OURS, "Authorization": "Bearer some.upload.token"}
                async with browser.post(console + "/v1beta1/upload", data=b"x" * 1024, headers=headers) as reply:
                    assert reply.status == 503
                    assert "the upload proxy http://127.0.0.1:9 cannot be reached" in (await reply.json())["message"]
    finally:
        server.stop()


async def upload_through(
    console: str, browser: aiohttp.ClientSession, server: APIServerProcess, admin: KubeClient, tmp_path: Path
) -> None:
    await login(browser, console, server)
    ns = "default"
    dv = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "uploaded"},
        "spec": {"source": {"upload": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}},
    }
    async with browser.post(
        f"{console}/apis/cdi.kubevirt.io/v1beta1/namespaces/{ns}/datavolumes", json=dv, headers=OURS
    ) as reply:
        assert reply.status == 201, await reply.text()
    tokens = f"{console}/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{ns}/uploadtokenrequests"
    request = {
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
        "kind": "UploadTokenRequest",
        "spec": {"pvcName": "uploaded"},
    }
    async with browser.post(tokens, json=request, headers=OURS) as reply:
        assert reply.status == 201, await reply.text()
        upload_token = (await reply.json())["status"]["token"]

    image = bytes(range(256)) * 4096 * 4  # 4 MiB, not zeros, sent in 64 KiB pieces as a browser does
    upload = console + "/v1beta1/upload"
    async with browser.post(upload, data=image, headers={"Authorization": f"Bearer {upload_token}"}) as reply:
        assert reply.status == 403, "an upload without the console's header is refused"

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(image), 64 * 1024):
            yield image[start : start + 64 * 1024]

    headers = {**OURS, "Authorization": f"Bearer {upload_token}", "Content-Length": str(len(image))}
    async with browser.post(upload, data=pieces(), headers=headers) as reply:
        assert reply.status == 200, await reply.text()

    async def succeeded() -> dict[str, Any] | None:
        dv = await admin.get(DATA_VOLUMES, "uploaded", ns)
        return dv if (dv.get("status") or {}).get("phase") == "Succeeded" else None

    uploaded = await eventually(succeeded, timeout=30)
    assert uploaded["status"]["progress"] == "100.0%"
    pvc = await admin.get(PERSISTENT_VOLUME_CLAIMS, "uploaded", ns)
    pv = await admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    with (Path(pv["spec"]["hostPath"]["path"]) / "disk.img").open("rb") as disk:
        assert disk.read(len(image)) == image


async def login(browser: aiohttp.ClientSession, console: str, server: APIServerProcess) -> None:
    async with browser.post(console + "/console/login", json={"token": server.token()}, headers=OURS) as reply:
        assert reply.status == 200, await reply.text()
