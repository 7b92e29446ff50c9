"""`virtctl image-upload` against a fake API client and a local upload proxy: what it creates, what it prints, its
checks of an existing claim, its waits, retries and DataSource, as KubeVirt's imageupload.go."""

from __future__ import annotations

import argparse
import copy
import io
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import ResourceRef
from pykubevirt.virtctl import image_upload as iu
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, normalise_bools
from tests.support.fake_client_reads import GetOrNone

READY = "cdi.kubevirt.io/storage.pod.ready"
PHASE = "cdi.kubevirt.io/storage.pod.phase"
TARGET = "cdi.kubevirt.io/storage.upload.target"
IMAGE = b"qcow2" * 1000


def _not_found(plural: str, name: str) -> NotFound:
    return NotFound({"code": 404, "reason": "NotFound", "message": f'{plural} "{name}" not found'}, 404)


class FakeClient(GetOrNone):
    """KubeClient's verbs over a dict of objects; an upload DataVolume's claim appears as CDI's controller makes it."""

    def __init__(self, server: str) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.updated: list[dict[str, Any]] = []
        self.patched: list[tuple[str, Any, str]] = []
        self.events: list[dict[str, Any]] = []
        self.token_requests: list[dict[str, Any]] = []
        self.dv_phases = ["UploadScheduled", "UploadReady"]
        self.claim_ready_after = 2  # gets of a bare claim before its upload server is ready
        self.claim_gets = 0
        self.hidden_dv_gets = 0
        self.config = SimpleNamespace(server=server, ssl_context=lambda: False)

    def add(self, plural: str, name: str, obj: dict[str, Any]) -> None:
        obj.setdefault("metadata", {}).update(name=name, namespace="ns", uid=f"uid-{plural}-{name}")
        self.objects[(plural, name)] = obj

    def annotations(self, name: str) -> dict[str, str]:
        meta = self.objects[("persistentvolumeclaims", name)]["metadata"]
        return cast(dict[str, str], meta.setdefault("annotations", {}))

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> dict[str, Any]:
        if resource.plural == "datavolumes" and self.hidden_dv_gets:
            self.hidden_dv_gets -= 1
            raise _not_found(resource.plural, name)
        if (resource.plural, name) not in self.objects:
            raise _not_found(resource.plural, name)
        obj = self.objects[(resource.plural, name)]
        if resource.plural == "datavolumes" and self.dv_phases:
            # Each get moves to the next phase; the last one stays.
            phase = self.dv_phases.pop(0) if len(self.dv_phases) > 1 else self.dv_phases[0]
            obj.setdefault("status", {})["phase"] = phase
        if resource.plural == "persistentvolumeclaims" and TARGET in self.annotations(name):
            self.claim_gets += 1
            if self.claim_gets >= self.claim_ready_after:
                self.annotations(name)[READY] = "true"
        return copy.deepcopy(obj)

    async def create(self, resource: ResourceRef, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.created.append((resource.plural, copy.deepcopy(body)))
        name = body["metadata"]["name"]
        self.add(resource.plural, name, copy.deepcopy(body))
        if resource.plural == "datavolumes":
            self.objects[(resource.plural, name)]["status"] = {"claimName": name}
            self.add("persistentvolumeclaims", name, {"metadata": {"annotations": {TARGET: ""}}})
        return copy.deepcopy(self.objects[(resource.plural, name)])

    async def update(self, resource: ResourceRef, body: dict[str, Any]) -> Any:
        self.updated.append(copy.deepcopy(body))
        self.objects[(resource.plural, body["metadata"]["name"])] = copy.deepcopy(body)
        return body

    async def patch(self, resource: ResourceRef, name: str, patch: Any, namespace: str, **kw: Any) -> Any:
        self.patched.append((name, patch, kw["patch_type"]))
        return {}

    async def list(self, resource: ResourceRef, namespace: str | None = None) -> dict[str, Any]:
        assert resource.plural == "events"
        return {"items": self.events}

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert (method, path) == ("POST", "/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/ns/uploadtokenrequests")
        self.token_requests.append(body)
        return {"status": {"token": f"token-{len(self.token_requests)}"}}


class Proxy:
    """The upload proxy: answers each POST from `answers` (then 200) and marks the claim processed on a 200."""

    def __init__(self) -> None:
        self.client: FakeClient | None = None
        self.answers: list[tuple[int, str]] = []
        self.posts: list[tuple[str, str, bytes]] = []
        self.async_endpoint = False
        self.process = True

    async def head(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.async_endpoint else 404)

    async def post(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.posts.append((request.path, request.headers["Authorization"], body))
        status, text = self.answers.pop(0) if self.answers else (200, "")
        if status == 200 and self.process and self.client is not None:
            self.client.annotations(request.query.get("claim", "disk"))[PHASE] = "Succeeded"
        return web.Response(status=status, text=text)


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[Proxy, str]]:
    upstream = Proxy()
    app = web.Application()
    app.router.add_route("HEAD", "/v1beta1/upload-async", upstream.head)
    app.router.add_post("/v1beta1/upload", upstream.post)
    app.router.add_post("/v1beta1/upload-async", upstream.post)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield upstream, f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.fixture
def fake(proxy: tuple[Proxy, str], monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    monkeypatch.setattr(iu, "POLL_SECONDS", 0.01)
    client = FakeClient(proxy[1])
    proxy[0].client = client
    return client


@pytest.fixture
def image(tmp_path: Path) -> Path:
    path = tmp_path / "disk.qcow2"
    path.write_bytes(IMAGE)
    return path


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalise_bools(["image-upload", *argv]))


async def upload(client: FakeClient, *argv: str) -> str:
    out = io.StringIO()
    await iu.image_upload(cast(KubeClient, client), "ns", parse(*argv), out)
    return out.getvalue()


async def refused(client: FakeClient, *argv: str) -> tuple[str, str]:
    """(the error text, what was printed before it)."""
    out = io.StringIO()
    with pytest.raises((VirtctlError, NotFound)) as caught:
        await iu.image_upload(cast(KubeClient, client), "ns", parse(*argv), out)
    error = caught.value
    return (error.message if isinstance(error, NotFound) else str(error)), out.getvalue()


# -------------------------------------------------------------------------------------------------- the happy paths


async def test_dv_upload_creates_the_data_volume_and_prints_kubevirts_lines(
    fake: FakeClient, proxy: tuple[Proxy, str], image: Path
) -> None:
    out = await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}", "--insecure")
    assert out.splitlines() == [
        "PVC ns/disk not found ",
        "DataVolume ns/disk created",
        "Waiting for PVC disk upload pod to be ready...",
        "Pod now ready",
        f"Uploading data to {proxy[1]}",
        "",
        "4.88 KiB / 4.88 KiB (100%)",  # one chunk: a single plain line, stdout not being a terminal
        "",
        iu.PROCESSING,
        "Processing completed successfully",
        f"Uploading {image} completed successfully",
    ]
    assert [plural for plural, _ in fake.created] == ["datavolumes"]
    assert fake.created[0][1]["spec"]["contentType"] == "kubevirt"
    assert fake.token_requests == [
        {
            "apiVersion": "upload.cdi.kubevirt.io/v1beta1",
            "kind": "UploadTokenRequest",
            "metadata": {"generateName": "token-for-virtctl-"},
            "spec": {"pvcName": "disk"},
        }
    ]
    assert proxy[0].posts == [("/v1beta1/upload", "Bearer token-1", IMAGE)]


async def test_pvc_upload_creates_a_bare_claim_and_a_data_source(
    fake: FakeClient, proxy: tuple[Proxy, str], image: Path
) -> None:
    fake.add("storageclasses", "fast", {})
    out = await upload(
        fake,
        *("pvc", "disk", "--size=2Gi", f"--archive-path={image}", "--storage-class=fast", "--force-bind"),
        *("--datasource", "--default-instancetype=u1.small", "--default-preference=fedora"),
    )
    assert [plural for plural, _ in fake.created] == ["persistentvolumeclaims", "datasources"]
    claim = fake.created[0][1]
    assert claim["metadata"]["annotations"] == {
        TARGET: "",
        "cdi.kubevirt.io/storage.contentType": "archive",
        "cdi.kubevirt.io/storage.bind.immediate.requested": "",
    }
    assert claim["spec"]["storageClassName"] == "fast"
    labels = {
        "instancetype.kubevirt.io/default-instancetype": "u1.small",
        "instancetype.kubevirt.io/default-preference": "fedora",
    }
    assert claim["metadata"]["labels"] == {"cdi.kubevirt.io/applyStorageProfile": "true", **labels}
    assert fake.created[1][1] == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataSource",
        "metadata": {"name": "disk", "namespace": "ns", "labels": labels},
        "spec": {"source": {"pvc": {"name": "disk", "namespace": "ns"}}},
    }
    lines = out.splitlines()
    assert lines[:4] == [
        "PVC ns/disk not found ",
        "PersistentVolumeClaim ns/disk created",
        "Waiting for PVC disk upload pod to be ready...",
        "Pod now ready",
    ]
    assert lines[-4:] == [
        "Created a new DataSource ns/disk",
        iu.PROCESSING,
        "Processing completed successfully",
        f"Uploading {image} completed successfully",
    ]


async def test_an_existing_data_source_is_patched(fake: FakeClient, image: Path) -> None:
    fake.add("datasources", "disk", {"metadata": {"labels": {"team": "a"}}})
    out = await upload(fake, "pvc", "disk", "--size=1Gi", f"--image-path={image}", "--datasource")
    assert "Updated an existing DataSource ns/disk" in out.splitlines()
    (name, patch, patch_type), *_ = fake.patched
    assert (name, patch_type) == ("disk", "application/json-patch+json")
    assert patch == [
        {"op": "replace", "path": "/metadata/labels", "value": {"team": "a"}},
        {"op": "replace", "path": "/spec/source/pvc", "value": {"name": "disk", "namespace": "ns"}},
    ]


async def test_a_ready_claim_prints_no_wait_lines(fake: FakeClient, image: Path) -> None:
    fake.claim_ready_after = 0
    fake.add("persistentvolumeclaims", "disk", {"metadata": {"annotations": {TARGET: ""}}})
    lines = (await upload(fake, "pvc", "disk", f"--image-path={image}", "--no-create")).splitlines()
    assert lines[:2] == ["Using existing PVC ns/disk", f"Uploading data to {fake.config.server}"]
    assert fake.created == []


async def test_no_create_marks_an_unmarked_claim_as_an_upload_target(fake: FakeClient, image: Path) -> None:
    fake.add("persistentvolumeclaims", "disk", {"metadata": {"labels": {"a": "b"}}})
    out = await upload(fake, "pvc", "disk", f"--image-path={image}", "--no-create")
    assert out.startswith("Using existing PVC ns/disk\n")
    assert fake.updated[0]["metadata"]["annotations"] == {TARGET: ""}


async def test_the_async_endpoint_when_the_proxy_has_it(
    fake: FakeClient, proxy: tuple[Proxy, str], image: Path
) -> None:
    proxy[0].async_endpoint = True
    await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")
    assert [path for path, _, _ in proxy[0].posts] == ["/v1beta1/upload-async"]


async def test_deprecated_flags_print_pflags_line_first(fake: FakeClient, image: Path) -> None:
    out = await upload(fake, "--pvc-name=disk", "--pvc-size=1Gi", f"--image-path={image}")
    assert out.splitlines()[:3] == [
        "Flag --pvc-name has been deprecated, specify the name as the second argument instead.",
        "Flag --pvc-size has been deprecated, use --size instead.",
        "PVC ns/disk not found ",
    ]
    assert fake.created[0][0] == "persistentvolumeclaims"


# ---------------------------------------------------------------------------------------------------- refusals


async def test_the_image_is_opened_before_any_cluster_access(fake: FakeClient, tmp_path: Path) -> None:
    missing = tmp_path / "nope.img"
    assert await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={missing}") == (
        f"open {missing}: no such file or directory",
        "",
    )
    assert fake.created == [] and fake.token_requests == []


async def test_creating_needs_a_size(fake: FakeClient, image: Path) -> None:
    assert await refused(fake, "dv", "disk", f"--image-path={image}") == (
        "when creating a resource, the size must be specified",
        "PVC ns/disk not found \n",
    )


async def test_no_create_without_the_claim(fake: FakeClient, image: Path) -> None:
    error, out = await refused(fake, "pvc", "disk", f"--image-path={image}", "--no-create")
    assert (error, out) == ('persistentvolumeclaims "disk" not found', "PVC ns/disk not found \n")


async def test_an_unknown_storage_class_creates_nothing(fake: FakeClient, image: Path) -> None:
    error, _ = await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}", "--storage-class=gold")
    assert error == 'storageclasses "gold" not found' and fake.created == []


async def test_size_is_checked_before_the_class_for_a_dv_and_after_it_for_a_pvc(fake: FakeClient, image: Path) -> None:
    size_first, _ = await refused(fake, "dv", "d", "--size=x", f"--image-path={image}", "--storage-class=gold")
    assert size_first.startswith("validation failed for size=x: quantities must match")
    class_first, _ = await refused(fake, "pvc", "d", "--size=x", f"--image-path={image}", "--storage-class=gold")
    assert class_first == 'storageclasses "gold" not found'
    read_only, _ = await refused(fake, "pvc", "d", "--size=x", f"--image-path={image}", "--access-mode=ReadOnlyMany")
    assert read_only.startswith("cannot upload to a readonly volume")


@pytest.mark.parametrize(
    ("kind", "annotations", "extra", "message"),
    [
        ("pvc", {TARGET: "", PHASE: "Succeeded"}, [], "PVC disk already successfully imported/cloned/updated"),
        ("pvc", {}, ["--size=1Gi"], "PVC disk not available for upload"),
        ("pvc", {TARGET: ""}, ["--archive"], "PVC disk doesn't have archive contentType annotation"),
        ("dv", {TARGET: ""}, [], "No DataVolume is associated with the existing PVC ns/disk"),
        (
            "dv",
            {PHASE: "Succeeded", "cdi.kubevirt.io/storage.deleteAfterCompletion": "true"},
            [],
            "DataVolume already garbage-collected: Assuming PVC ns/disk is successfully populated",
        ),
    ],
)
async def test_an_existing_claim_that_cannot_take_the_upload(
    fake: FakeClient, image: Path, kind: str, annotations: dict[str, str], extra: list[str], message: str
) -> None:
    fake.add("persistentvolumeclaims", "disk", {"metadata": {"annotations": annotations}})
    path = f"--archive-path={image}" if "--archive" in extra else f"--image-path={image}"
    flags = [flag for flag in extra if flag != "--archive"]
    assert await refused(fake, kind, "disk", path, *flags) == (message, "")


async def test_a_populator_data_volume_uploads_to_pvc_prime(fake: FakeClient, image: Path) -> None:
    populator = {"metadata": {"annotations": {"cdi.kubevirt.io/storage.usePopulator": "true"}}}
    fake.add("datavolumes", "disk", populator)
    fake.add("persistentvolumeclaims", "disk", {"metadata": {}, "status": {"phase": "Bound"}})
    assert (await refused(fake, "dv", "disk", f"--image-path={image}"))[0] == "PVC disk already successfully populated"
    fake.add("persistentvolumeclaims", "disk", {"metadata": {}})
    assert (await refused(fake, "dv", "disk", f"--image-path={image}"))[0] == (
        "Unable to get PVC Prime name from PVC ns/disk"
    )
    prime = {"cdi.kubevirt.io/storage.populator.pvcPrime": "prime-1"}
    fake.add("persistentvolumeclaims", "disk", {"metadata": {"annotations": prime}})
    assert (await refused(fake, "dv", "disk", f"--image-path={image}"))[0] == "Unable to get PVC Prime ns/disk"
    fake.add("persistentvolumeclaims", "prime-1", {"metadata": {"annotations": {TARGET: ""}}})
    out = await upload(fake, "dv", "disk", f"--image-path={image}", "--no-create")
    assert out.startswith("Using existing PVC ns/prime-1\n")


# ---------------------------------------------------------------------------------------------------- waiting


async def test_a_data_volume_waiting_for_its_consumer_needs_force_bind(fake: FakeClient, image: Path) -> None:
    fake.dv_phases = ["WaitForFirstConsumer"]
    assert await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}") == (
        "cannot upload to DataVolume in WaitForFirstConsumer phase, make sure the PVC is Bound, or use force-bind flag",
        "PVC ns/disk not found \nDataVolume ns/disk created\n",
    )
    fake.objects.clear()
    fake.dv_phases = ["PendingPopulation", "UploadReady"]
    out = await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}", "--force-bind")
    assert out.endswith(f"Uploading {image} completed successfully\n")


async def test_a_data_volume_not_there_yet(fake: FakeClient, image: Path) -> None:
    fake.hidden_dv_gets = 1
    lines = (await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")).splitlines()
    assert lines[1:4] == [
        "DataVolume ns/disk created",
        "DV disk not found... ",
        "Waiting for PVC disk upload pod to be ready...",
    ]


@pytest.mark.parametrize(
    ("kind", "event", "message"),
    [
        (
            "pvc",
            {"kind": "PersistentVolumeClaim", "reason": "ProvisioningFailed", "message": "no space"},
            "Provisioning failed: no space",
        ),
        (
            "dv",
            {"kind": "DataVolume", "reason": "ErrClaimNotValid", "message": "bad claim"},
            "Claim not valid: bad claim",
        ),
    ],
)
async def test_event_errors_end_the_wait(
    fake: FakeClient, image: Path, kind: str, event: dict[str, str], message: str
) -> None:
    plural = "persistentvolumeclaims" if kind == "pvc" else "datavolumes"
    fake.dv_phases = ["UploadScheduled"]
    fake.claim_ready_after = 99
    fake.events = [
        {
            "involvedObject": {"kind": event["kind"], "uid": f"uid-{plural}-disk"},
            "reason": event["reason"],
            "message": event["message"],
        }
    ]
    assert (await refused(fake, kind, "disk", "--size=1Gi", f"--image-path={image}"))[0] == message


async def test_an_optimistic_lock_conflict_is_no_provisioning_failure(fake: FakeClient, image: Path) -> None:
    fake.events = [
        {
            "involvedObject": {"kind": "PersistentVolumeClaim", "uid": "uid-persistentvolumeclaims-disk"},
            "reason": "ProvisioningFailed",
            "message": f"Operation cannot be fulfilled: {iu.OPTIMISTIC_LOCK}",
        }
    ]
    assert (await upload(fake, "pvc", "disk", "--size=1Gi", f"--image-path={image}")).endswith("successfully\n")


async def test_the_upload_pod_wait_times_out(fake: FakeClient, image: Path) -> None:
    fake.claim_ready_after = 99
    error, out = await refused(fake, "pvc", "disk", "--size=1Gi", f"--image-path={image}", "--wait-secs=0")
    assert error == "context deadline exceeded"
    assert out.splitlines()[-1] == "Waiting for PVC disk upload pod to be ready..."


async def test_the_processing_wait_times_out_with_kubevirts_line(
    fake: FakeClient, proxy: tuple[Proxy, str], image: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(iu, "PROCESSING_WAIT_SECONDS", 0.05)
    proxy[0].process = False
    error, out = await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")
    assert error == "context deadline exceeded"
    assert out.splitlines()[-2:] == [iu.PROCESSING, iu.PROCESSING_TIMED_OUT]


# ---------------------------------------------------------------------------------------------------- retries


async def test_a_failed_post_is_retried(fake: FakeClient, proxy: tuple[Proxy, str], image: Path) -> None:
    proxy[0].answers = [(500, "busy"), (503, "later")]
    out = await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")
    assert [body for _, _, body in proxy[0].posts] == [IMAGE, IMAGE, IMAGE]
    assert out.count("(100%)") == 3 and out.endswith("completed successfully\n")


async def test_retries_run_out(fake: FakeClient, proxy: tuple[Proxy, str], image: Path) -> None:
    proxy[0].answers = [(500, "busy\n")] * 3
    error, _ = await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}", "--retry=2")
    assert error == "error uploading image after 2 retries: unexpected return value 500, busy\n"
    assert len(proxy[0].posts) == 2


async def test_a_401_first_is_an_authentication_failure(
    fake: FakeClient, proxy: tuple[Proxy, str], image: Path
) -> None:
    proxy[0].answers = [(401, "invalid token")]
    error, _ = await refused(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")
    assert error == "authentication failed: unexpected return value 401, invalid token"


async def test_a_later_401_refreshes_the_token(fake: FakeClient, proxy: tuple[Proxy, str], image: Path) -> None:
    proxy[0].answers = [(500, "busy"), (401, "expired")]
    await upload(fake, "dv", "disk", "--size=1Gi", f"--image-path={image}")
    assert [auth for _, auth, _ in proxy[0].posts] == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]


# ----------------------------------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("url", "uri", "expected"),
    [
        ("https://h:1", "/v1beta1/upload", "https://h:1/v1beta1/upload"),
        ("https://h:1/", "/v1beta1/upload-async", "https://h:1/v1beta1/upload-async"),
        ("https://h/proxy/", "/v1beta1/upload", "https://h/proxy/v1beta1/upload"),
        ("https://h/v1beta1/upload", "/v1beta1/upload", "https://h/v1beta1/upload"),
    ],
)
def test_proxy_path(url: str, uri: str, expected: str) -> None:
    assert iu.proxy_path(url, uri) == expected


def test_open_error_as_go(tmp_path: Path) -> None:
    with pytest.raises(OSError) as caught:
        (tmp_path / "x").open()
    assert iu.open_error("x", caught.value) == "open x: no such file or directory"
