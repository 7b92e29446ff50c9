"""Uploads into a bare claim (CDI's upload controller) end to end: a real API server process, the storage controller
as virt-controller's identity, the scheduler and a real node agent running the upload pod's `cdi-uploadserver`; the
image goes through an UploadTokenRequest and the API server's upload proxy."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pykubevirt.api.quantity import MI
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import EVENTS, NAMESPACES, PERSISTENT_VOLUME_CLAIMS, PODS
from tests.support.storage_plane import Env, pattern, storage_env, tarball, volume_dir
from tests.support.waiting import consistently, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

ANN = "cdi.kubevirt.io/storage."
UPLOAD_TARGET = ANN + "upload.target"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with storage_env(tmp_path_factory.mktemp("pvc-upload"), "upload-node") as env:
        yield env


async def namespace(admin: KubeClient) -> str:
    name = f"upl-{uuid.uuid4().hex[:6]}"
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def upload_claim(name: str, **annotations: str) -> Object:
    """A claim of the `local` class (WaitForFirstConsumer) marked as an upload target."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": {UPLOAD_TARGET: "", **annotations}},
        "spec": {
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "16Mi"}},
        },
    }


async def annotations(admin: KubeClient, ns: str, name: str) -> dict[str, str]:
    claim = await admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
    return dict(claim["metadata"].get("annotations") or {})


async def pod_names(admin: KubeClient, ns: str) -> list[str]:
    return [p["metadata"]["name"] for p in (await admin.list(PODS, ns))["items"]]


async def events_of(admin: KubeClient, ns: str, name: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in (await admin.list(EVENTS, ns))["items"]
        if e["involvedObject"]["name"] == name and e["involvedObject"]["kind"] == "PersistentVolumeClaim"
    ]


async def upload(env: Env, ns: str, claim: str, body: bytes) -> tuple[int, str]:
    path = f"/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{ns}/uploadtokenrequests"
    request: dict[str, Any] = {
        "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
        "kind": "UploadTokenRequest",
        "metadata": {"name": f"token-for-{claim}"},
        "spec": {"pvcName": claim},
    }
    token = (await env.admin.request("POST", path, body=request))["status"]["token"]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"}
    async with aiohttp.ClientSession() as session:
        url = f"{env.server.url}/v1beta1/upload"
        async with session.post(url, data=body, headers=headers, ssl=False) as response:
            return response.status, (await response.text()).strip()


async def test_a_bare_claim_marked_for_upload_gets_an_upload_server_and_takes_an_image(env: Env) -> None:
    ns = await namespace(env.admin)
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, upload_claim("bare"), ns)

    async def ready() -> dict[str, str] | None:
        current = await annotations(env.admin, ns, "bare")
        return current if current.get(ANN + "pod.ready") == "true" else None

    ready_annotations = await eventually(ready, timeout=60)
    assert ready_annotations[ANN + "pod.phase"] == "Running"
    assert ready_annotations[ANN + "uploadPodName"] == "cdi-upload-bare"
    pod = await env.admin.get(PODS, "cdi-upload-bare", ns)
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("PersistentVolumeClaim", "bare", True)
    # The WaitForFirstConsumer claim was bound by the upload pod, its first consumer.
    claim = await env.admin.get(PERSISTENT_VOLUME_CLAIMS, "bare", ns)
    assert claim["status"]["phase"] == "Bound"

    image = pattern(2 * MI)
    assert (await upload(env, ns, "bare", image))[0] == 200

    async def succeeded() -> dict[str, str] | None:
        current = await annotations(env.admin, ns, "bare")
        return current if current.get(ANN + "pod.phase") == "Succeeded" else None

    done = await eventually(succeeded, timeout=30)
    assert done[ANN + "pod.ready"] == "false"

    async def pod_gone() -> bool:
        try:
            await env.admin.get(PODS, "cdi-upload-bare", ns)
        except NotFound:
            return True
        return False

    await eventually(pod_gone, timeout=30)
    with ((await volume_dir(env.admin, ns, "bare")) / "disk.img").open("rb") as disk:
        assert disk.read(len(image)) == image
    assert ("Normal", "UploadSucceeded", "Upload Successful") in await eventually(
        lambda: events_of(env.admin, ns, "bare")
    )
    # Done for good: the claim keeps Succeeded, no new server comes, and the proxy refuses another upload.
    assert await upload(env, ns, "bare", image) == (
        503,
        "rejecting Upload Request for PVC bare that already finished uploading",
    )
    assert (await annotations(env.admin, ns, "bare"))[ANN + "pod.phase"] == "Succeeded"
    assert "cdi-upload-bare" not in await pod_names(env.admin, ns)


async def test_an_archive_upload_is_unpacked_into_the_claim(env: Env) -> None:
    """CDI's archive content: the proxy sends an archive claim's body to /v1beta1/upload-archive, and the server
    unpacks the (gzipped) tar into the volume; GNU tar keeps a member named with `..` out of it."""
    ns = await namespace(env.admin)
    claim = upload_claim("tarball", **{ANN + "contentType": "archive"})
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)

    async def ready() -> bool:
        return (await annotations(env.admin, ns, "tarball")).get(ANN + "pod.ready") == "true"

    await eventually(ready, timeout=60)
    files = {"etc/app.conf": b"mode = test\n", "data/blob.bin": pattern(MI)}
    code, text = await upload(env, ns, "tarball", tarball({**files, "../escaped.txt": b"no"}, "w:gz"))
    # The `..` member makes GNU tar exit 2 after unpacking the rest, as CDI's UnArchiveTar reports.
    assert code == 500 and "unable to untar files from endpoint: exit status 2" in text
    directory = await volume_dir(env.admin, ns, "tarball")
    assert not (directory.parent / "escaped.txt").exists()
    assert (directory / "etc/app.conf").read_bytes() == b"mode = test\n"

    assert await upload(env, ns, "tarball", tarball(files, "w:xz")) == (200, "")
    assert (directory / "data/blob.bin").read_bytes() == pattern(MI)
    assert oct((directory / "etc/app.conf").stat().st_mode & 0o777) == oct(0o640)
    assert not (directory / "disk.img").exists()

    async def succeeded() -> bool:
        return (await annotations(env.admin, ns, "tarball")).get(ANN + "pod.phase") == "Succeeded"

    await eventually(succeeded, timeout=30)


async def test_an_upload_target_of_an_unknown_content_type_is_refused_with_a_reason_and_no_server(env: Env) -> None:
    ns = await namespace(env.admin)
    claim = upload_claim("odd", **{ANN + "contentType": "iso"})
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    message = "upload content-type iso is invalid"

    async def refused() -> dict[str, str] | None:
        current = await annotations(env.admin, ns, "odd")
        return current if current.get("cdi.kubevirt.io/storage.condition.running.message") == message else None

    current = await eventually(refused, timeout=30)
    assert current["cdi.kubevirt.io/storage.condition.running"] == "false"
    assert current["cdi.kubevirt.io/storage.condition.running.reason"] == "Error"

    async def failed_event() -> bool:
        return ("Warning", "Failed", message) in await events_of(env.admin, ns, "odd")

    await eventually(failed_event, timeout=30)
    await consistently(lambda: _no_upload_pod(env.admin, ns), for_=1.0)


async def _no_upload_pod(admin: KubeClient, ns: str) -> bool:
    return not any(name.startswith("cdi-upload-") for name in await pod_names(admin, ns))


async def test_an_ordinary_claim_gets_no_server_and_unmarking_a_target_removes_its_server(env: Env) -> None:
    ns = await namespace(env.admin)
    plain = upload_claim("plain")
    del plain["metadata"]["annotations"]
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, plain, ns)
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, upload_claim("marked"), ns)
    await eventually(lambda: _has_pod(env.admin, ns, "cdi-upload-marked"), timeout=30)
    assert "cdi-upload-plain" not in await pod_names(env.admin, ns)
    patch = {"metadata": {"annotations": {UPLOAD_TARGET: None}}}
    await env.admin.patch(PERSISTENT_VOLUME_CLAIMS, "marked", patch, ns)
    await eventually(lambda: _no_upload_pod(env.admin, ns), timeout=30)


async def _has_pod(admin: KubeClient, ns: str, name: str) -> bool:
    return name in await pod_names(admin, ns)
