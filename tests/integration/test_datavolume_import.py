"""DataVolume http imports end to end without a guest: a real API server process, the storage controller (PV and
DataVolume controllers) as virt-controller's identity, the scheduler, and a real node agent running the importer
pod's `pykubevirt cdi-importer` (and the upload pod's `cdi-uploadserver`) process, against an HTTP server this
module starts on 127.0.0.1; uploads through `virtctl image-upload` and the API server's upload proxy."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import itertools
import json
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pykubevirt.api.quantity import MI
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import (
    DATA_SOURCES,
    DATA_VOLUMES,
    EVENTS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
)
from pykubevirt.storage.importer import FATAL_MARKER
from tests.integration.test_subresources import virtctl
from tests.support.apiserver_process import kubectl
from tests.support.storage_plane import Env, pattern, storage_env, volume_dir
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


@dataclass
class ImageServer:
    """A loopback HTTP server answering each path with the next of its handlers (the last one repeats)."""

    routes: dict[str, list[Handler]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    port: int = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def serve(self, path: str, *handlers: Handler) -> str:
        self.routes[path] = list(handlers)
        return self.url(path)


def send(body: bytes, rate: int = 0) -> Handler:
    """Answer 200 with `body`, at `rate` bytes a second when given (a slow source)."""

    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        step = max(rate // 10, 1) if rate else len(body)
        for offset in range(0, len(body), step):
            request.wfile.write(body[offset : offset + step])
            request.wfile.flush()
            if rate:
                time.sleep(0.1)  # the server's pace, not a wait in the test

    return handle


def status(code: int) -> Handler:
    def handle(request: http.server.BaseHTTPRequestHandler) -> None:
        request.send_error(code)

    return handle


@pytest.fixture(scope="module")
def image_server() -> Iterator[ImageServer]:
    server = ImageServer()

    class Handle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            handlers = server.routes.get(path)
            if not handlers:
                self.send_error(404)
                return
            count = server.hits.get(path, 0)
            server.hits[path] = count + 1
            handlers[min(count, len(handlers) - 1)](self)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with storage_env(tmp_path_factory.mktemp("dv-import"), "dv-node") as env:
        yield env


def http_dv(name: str, url: str, size: str = "32Mi") -> Object:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"http": {"url": url, "extraHeaders": ["X-Test: dv"]}},
            "storage": {"resources": {"requests": {"storage": size}}},
        },
    }


def running_condition(dv: Object) -> dict[str, Any]:
    return next(c for c in (dv.get("status") or {}).get("conditions") or [] if c["type"] == "Running")


def qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


async def test_a_slow_http_import_goes_through_its_phases_with_progress_at_least_every_2s(
    env: Env, image_server: ImageServer, tmp_path: Path
) -> None:
    ns = await env.namespace()
    body = pattern(6 * MI)
    url = image_server.serve(f"{ns}/slow.img", send(body, rate=MI))
    seen: list[tuple[float, str, str]] = []

    async def record() -> None:
        async for event in env.admin.watch(DATA_VOLUMES, ns, timeout_seconds=120):
            status_ = event.object.get("status") or {}
            seen.append((time.monotonic(), str(status_.get("phase", "")), str(status_.get("progress", ""))))
            if status_.get("phase") == "Succeeded":
                return

    watcher = asyncio.create_task(record())
    await env.admin.create(DATA_VOLUMES, http_dv("slow", url), ns)
    await asyncio.wait_for(watcher, 120)

    phases = [phase for _, phase, _ in seen]
    assert phases[0] in ("", "Pending")
    assert "ImportInProgress" in phases and phases[-1] == "Succeeded"
    assert phases.index("ImportInProgress") < phases.index("Succeeded")
    progress = [(at, float(p.rstrip("%"))) for at, phase, p in seen if phase == "ImportInProgress" and p != "N/A"]
    values = [v for _, v in progress]
    assert values == sorted(values), values
    assert len({v for v in values if 0 < v < 100}) >= 3, seen
    changes = [at for i, (at, v) in enumerate(progress) if i == 0 or v != progress[i - 1][1]]
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    # The importer prints every 0.5 s and the controller reads it every 1 s; a poll's latency may add to the 2 s.
    assert max(gaps) <= 2.5, gaps
    assert seen[-1][2] == "100.0%"

    image = (await volume_dir(env.admin, ns, "slow")) / "disk.img"
    with image.open("rb") as disk:
        assert disk.read(len(body)) == body
    assert image.stat().st_size >= 30 * MI  # grown to the usable space
    table = (await asyncio.to_thread(kubectl, env.server, tmp_path / "home", "get", "dv", "slow", "-n", ns)).stdout
    assert table.split("\n")[0].split() == ["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE"]
    assert table.split("\n")[1].split()[:4] == ["slow", "Succeeded", "100.0%", "0"]


async def test_an_import_retries_after_404_and_500_then_succeeds(
    env: Env, image_server: ImageServer, tmp_path: Path
) -> None:
    ns = await env.namespace()
    raw = tmp_path / "disk.raw"
    raw.write_bytes(pattern(2 * MI))
    qcow2 = tmp_path / "disk.qcow2"
    qemu_img("convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2))
    url = image_server.serve(f"{ns}/flaky.qcow2", status(404), status(500), send(qcow2.read_bytes()))
    messages: list[str] = []

    async def record() -> None:
        async for event in env.admin.watch(DATA_VOLUMES, ns, timeout_seconds=120):
            with contextlib.suppress(StopIteration):
                messages.append(running_condition(event.object).get("message", ""))
            if (event.object.get("status") or {}).get("phase") == "Succeeded":
                return

    watcher = asyncio.create_task(record())
    await env.admin.create(DATA_VOLUMES, http_dv("flaky", url), ns)
    await asyncio.wait_for(watcher, 120)

    dv = await env.admin.get(DATA_VOLUMES, "flaky", ns)
    assert dv["status"]["restartCount"] >= 2
    assert image_server.hits[f"{ns}/flaky.qcow2"] == 3
    # The first restart comes at once (the kubelet's back-off starts at the second), so only the 500 is sure to show.
    assert "Unable to process data: expected status code 200, got 500. Status: 500 Internal Server Error" in messages
    with ((await volume_dir(env.admin, ns, "flaky")) / "disk.img").open("rb") as disk:
        assert disk.read(2 * MI) == raw.read_bytes()


async def failing_import(env: Env, ns: str, name: str, url: str, size: str, expected: str) -> Object:
    """Create the DV and wait until its importer's failure shows; the DV stays in ImportInProgress (CDI retries)."""
    await env.admin.create(DATA_VOLUMES, http_dv(name, url, size), ns)

    async def failed() -> Object | None:
        dv = await env.admin.get(DATA_VOLUMES, name, ns)
        with contextlib.suppress(StopIteration):
            if expected in running_condition(dv).get("message", ""):
                return dv
        return None

    dv = await eventually(failed, timeout=60)
    assert dv["status"]["phase"] == "ImportInProgress"
    running = running_condition(dv)
    assert (running["status"], running["reason"]) == ("False", "Error")
    assert running["message"].startswith("Unable to process data: ")
    leftovers = sorted(p.name for p in (await volume_dir(env.admin, ns, name)).iterdir())
    assert leftovers == [], leftovers  # no disk.img, no partial image
    return dv


async def test_an_unreachable_url_keeps_the_dv_importing_with_the_importers_message(env: Env) -> None:
    ns = await env.namespace()
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/disk.img"  # bound, never listening: refused
        await failing_import(env, ns, "unreachable", url, "16Mi", f'Get "{url}"')
    dv = await env.admin.get(DATA_VOLUMES, "unreachable", ns)
    assert "Connection refused" in running_condition(dv)["message"]


async def test_a_corrupt_image_fails_with_qemu_imgs_reason(env: Env, image_server: ImageServer) -> None:
    ns = await env.namespace()
    url = image_server.serve(f"{ns}/corrupt.qcow2", send(b"QFI\xfb" + b"\xff" * 4092))
    dv = await failing_import(env, ns, "corrupt", url, "16Mi", "qemu-img")
    assert "qemu-img info failed: qemu-img: Could not open" in running_condition(dv)["message"]


async def test_an_image_larger_than_the_volume_is_refused_with_cdis_message(
    env: Env, image_server: ImageServer, tmp_path: Path
) -> None:
    ns = await env.namespace()
    big = tmp_path / "big.qcow2"
    qemu_img("create", "-f", "qcow2", str(big), "64M")
    url = image_server.serve(f"{ns}/big.qcow2", send(big.read_bytes()))
    expected = (
        f"virtual image size {64 * MI} is larger than the reported available storage {16 * MI}. "
        "A larger PVC is required"
    )
    await failing_import(env, ns, "big", url, "16Mi", expected)


async def test_a_registry_import_of_a_local_image_reads_it_from_the_nodes_store(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    raw, qcow2 = tmp_path / "disk.raw", tmp_path / "disk.qcow2"
    raw.write_bytes(pattern(2 * MI))
    qemu_img("convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2))
    env.images.import_file("pykubevirt.local/dv-disk:1.0", qcow2)
    dv = http_dv("local", "")
    dv["spec"]["source"] = {"registry": {"url": "docker://pykubevirt.local/dv-disk:1.0"}}
    await env.admin.create(DATA_VOLUMES, dv, ns)

    async def succeeded() -> bool:
        return (await env.admin.get(DATA_VOLUMES, "local", ns)).get("status", {}).get("phase") == "Succeeded"

    await eventually(succeeded, timeout=60)
    with ((await volume_dir(env.admin, ns, "local")) / "disk.img").open("rb") as disk:
        assert disk.read(2 * MI) == raw.read_bytes()


async def test_virtctl_image_upload_creates_the_dv_and_uploads_through_the_proxy(env: Env, tmp_path: Path) -> None:
    ns = await env.namespace()
    raw, qcow2 = tmp_path / "disk.raw", tmp_path / "disk.qcow2"
    raw.write_bytes(pattern(3 * MI))
    qemu_img("convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2))
    code, out, err = await virtctl(
        env.server, tmp_path / "home", "-n", ns, "image-upload", "dv", "up", "--size=32Mi",
        f"--image-path={qcow2}", "--insecure",
    )  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    # getAndValidateUploadPVC says so (trailing space and all) before the DataVolume is created.
    assert lines[:6] == [
        f"PVC {ns}/up not found ",
        f"DataVolume {ns}/up created",
        "Waiting for PVC up upload pod to be ready...",
        "Pod now ready",
        f"Uploading data to {env.server.url}",
        "",
    ]
    assert any(line.endswith("(100%)") for line in lines)  # plain progress lines: stdout is not a terminal
    assert lines[-2:] == ["Processing completed successfully", f"Uploading {qcow2} completed successfully"]
    dv = await eventually(lambda: succeeded(env.admin, ns, "up"), timeout=30)
    assert dv["status"]["progress"] == "100.0%"
    with ((await volume_dir(env.admin, ns, "up")) / "disk.img").open("rb") as disk:
        assert disk.read(3 * MI) == raw.read_bytes()

    code, out, err = await virtctl(
        env.server, tmp_path / "home", "-n", ns, "image-upload", "dv", "up", "--no-create",
        f"--image-path={qcow2}", "--insecure",
    )  # fmt: skip
    assert (code, err.strip()) == (1, "PVC up already successfully imported/cloned/updated")


async def succeeded(admin: KubeClient, ns: str, name: str) -> Object | None:
    dv = await admin.get(DATA_VOLUMES, name, ns)
    return dv if (dv.get("status") or {}).get("phase") == "Succeeded" else None


async def test_the_upload_proxy_checks_its_token_as_cdis(env: Env) -> None:
    ns = await env.namespace()
    path = f"/apis/upload.cdi.kubevirt.io/v1beta1/namespaces/{ns}/uploadtokenrequests"
    body = {"apiVersion": "upload.cdi.kubevirt.io/v1beta1", "kind": "UploadTokenRequest", "spec": {"pvcName": "nope"}}
    answer = await env.admin.request("POST", path, body={**body, "metadata": {"generateName": "token-for-virtctl-"}})
    assert answer["metadata"]["name"].startswith("token-for-virtctl-")
    token = answer["status"]["token"]
    url = f"{env.server.url}/v1beta1/upload"
    async with aiohttp.ClientSession() as session:
        for headers, code, text in (
            ({}, 400, "missing auth header"),
            ({"Authorization": "Bearer a.b.c"}, 401, "invalid token"),
            ({"Authorization": f"Bearer {token}"}, 503, "rejecting Upload Request for PVC nope that doesn't exist"),
        ):
            async with session.post(url, data=b"x", headers=headers, ssl=False) as response:
                assert (response.status, (await response.text()).strip()) == (code, text)


async def test_a_checksum_mismatch_fails_the_dv_without_retries(env: Env, image_server: ImageServer) -> None:
    ns = await env.namespace()
    url = image_server.serve(f"{ns}/summed.img", send(pattern(MI)))
    dv = http_dv("summed", url, "16Mi")
    dv["spec"]["source"]["http"]["checksum"] = "sha256:" + "0" * 64
    await env.admin.create(DATA_VOLUMES, dv, ns)

    async def failed() -> Object | None:
        current = await env.admin.get(DATA_VOLUMES, "summed", ns)
        return current if (current.get("status") or {}).get("phase") == "Failed" else None

    try:
        current = await eventually(failed, timeout=30)
    except AssertionError:
        raise AssertionError(json.dumps(await env.admin.get(DATA_VOLUMES, "summed", ns))) from None
    running = running_condition(current)
    assert (running["status"], running["reason"]) == ("False", "ChecksumError")
    assert running["message"].startswith("Unable to process data: checksum mismatch: expected sha256:000")
    pvc = await env.admin.get(PERSISTENT_VOLUME_CLAIMS, "summed", ns)
    assert pvc["metadata"]["annotations"]["cdi.kubevirt.io/storage.import.fatalError"] == "true"
    assert pvc["metadata"]["annotations"]["cdi.kubevirt.io/storage.import.checksum"] == "sha256:" + "0" * 64
    # One download: an attempt the kubelet restarts before the controller deletes the importer repeats the failure
    # recorded on the volume. No image is left, whole or partial; only that record.
    assert image_server.hits[f"{ns}/summed.img"] == 1
    assert [p.name for p in (await volume_dir(env.admin, ns, "summed")).iterdir()] == [FATAL_MARKER]


def blank_dv(name: str, size: str = "16Mi", source_ref: Object | None = None) -> Object:
    """A blank DataVolume, or one cloning through `source_ref`."""
    source: Object = {"sourceRef": source_ref} if source_ref else {"source": {"blank": {}}}
    spec = {**source, "storage": {"resources": {"requests": {"storage": size}}} if size else {}}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": name}, "spec": spec}


def data_source(name: str, **source: Any) -> Object:
    spec = {"source": source}
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource", "metadata": {"name": name}, "spec": spec}


async def dv_phase(env: Env, ns: str, name: str, phase: str) -> Object:
    async def reached() -> Object | None:
        found = await env.admin.get(DATA_VOLUMES, name, ns)
        return found if (found.get("status") or {}).get("phase") == phase else None

    return await eventually(reached, timeout=60)


async def ready_condition(env: Env, ns: str, name: str, status: str) -> Object:
    async def reached() -> Object | None:
        found = await env.admin.get(DATA_SOURCES, name, ns)
        conditions = (found.get("status") or {}).get("conditions") or []
        return found if any(c["type"] == "Ready" and c["status"] == status for c in conditions) else None

    return await eventually(reached, timeout=60)


async def test_a_datavolume_clones_what_its_datasource_names(env: Env) -> None:
    """`virtctl create vm --volume-import=type:ds,src:NAME` writes a sourceRef: the golden image's copy, and the
    DataSource's Ready condition and instancetype labels, as CDI keeps them."""
    ns = await env.namespace()
    # CDI's mutating webhook looks the DataSource up: one that does not exist is refused.
    ref = {"kind": "DataSource", "name": "fedora"}
    with pytest.raises(ApiError) as refused:
        await env.admin.create(DATA_VOLUMES, blank_dv("early", source_ref=ref), ns)
    assert (refused.value.code, refused.value.message) == (
        400,
        'admission webhook "datavolume-mutate.cdi.kubevirt.io" denied the request: '
        'datasources.cdi.kubevirt.io "fedora" not found',
    )
    # One naming a claim that is not there: the DataVolume waits, as CDI leaves it, until the DataSource names one.
    await env.admin.create(DATA_SOURCES, data_source("fedora", pvc={"name": "not-yet"}), ns)
    await env.admin.create(DATA_VOLUMES, blank_dv("early", source_ref=ref), ns)
    golden = blank_dv("golden")
    golden["metadata"]["labels"] = {"instancetype.kubevirt.io/default-preference": "fedora", "team": "os"}
    await env.admin.create(DATA_VOLUMES, golden, ns)
    await dv_phase(env, ns, "golden", "Succeeded")
    disk = await volume_dir(env.admin, ns, "golden") / "disk.img"
    with disk.open("r+b") as image:
        image.write(b"golden image\n")

    await env.admin.create(DATA_SOURCES, data_source("missing", pvc={"name": "nothing"}), ns)
    missing = await ready_condition(env, ns, "missing", "False")
    assert [(c["reason"], c["message"]) for c in missing["status"]["conditions"]] == [("NotFound", "PVC not found")]
    await env.admin.patch(DATA_SOURCES, "fedora", {"spec": {"source": {"pvc": {"name": "golden"}}}}, ns)
    ready = await ready_condition(env, ns, "fedora", "True")
    assert [(c["reason"], c["message"]) for c in ready["status"]["conditions"]] == [
        ("Ready", "DataSource is ready to be consumed")
    ]
    assert ready["status"]["source"] == {"pvc": {"name": "golden"}}
    # Only kubevirt.io labels are taken on (the instancetype defaults VMs infer from).
    assert ready["metadata"]["labels"] == {"instancetype.kubevirt.io/default-preference": "fedora"}
    # One level of reference, resolved in the status.
    await env.admin.create(DATA_SOURCES, data_source("latest", dataSource={"name": "fedora"}), ns)
    assert (await ready_condition(env, ns, "latest", "True"))["status"]["source"] == {"pvc": {"name": "golden"}}
    await env.admin.create(DATA_SOURCES, data_source("loop", dataSource={"name": "loop"}), ns)
    loop = await ready_condition(env, ns, "loop", "False")
    assert loop["status"]["conditions"][0]["message"] == "DataSource cannot self-reference"

    # The early DataVolume goes ahead once its DataSource is there; another goes through the reference.
    copy = blank_dv("copy", source_ref={"kind": "DataSource", "name": "latest"})
    await env.admin.create(DATA_VOLUMES, copy, ns)
    # No size, as `virtctl create vm --volume-import=type:ds,src:fedora` writes it: the source's size.
    await env.admin.create(DATA_VOLUMES, blank_dv("sized-as-source", "", {"kind": "DataSource", "name": "fedora"}), ns)
    for name in ("early", "copy", "sized-as-source"):
        done = await dv_phase(env, ns, name, "Succeeded")
        # The DataVolume keeps its sourceRef only; the source it was cloned from is the controller's.
        assert "source" not in done["spec"] and done["spec"]["sourceRef"]["kind"] == "DataSource"
        cloned = await volume_dir(env.admin, ns, name) / "disk.img"
        with cloned.open("rb") as image:
            assert image.read(13) == b"golden image\n"
    requests = [
        (await env.admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns))["spec"]["resources"]["requests"]["storage"]
        for name in ("golden", "sized-as-source")
    ]
    assert requests[0] == requests[1]

    # A DataSource in another namespace, as golden images usually are: CDI's host-assisted clone, an upload server on
    # the target and a source pod in the golden namespace sending it the image.
    other = await env.namespace()
    away = blank_dv("away", source_ref={"kind": "DataSource", "name": "fedora", "namespace": ns})
    await env.admin.create(DATA_VOLUMES, away, other)
    await dv_phase(env, other, "away", "Succeeded")
    with (await volume_dir(env.admin, other, "away") / "disk.img").open("rb") as image:
        assert image.read(13) == b"golden image\n"
    messages = [
        (e["reason"], e["message"])
        for e in (await env.admin.list(EVENTS, other))["items"]
        if e["involvedObject"]["name"] == "away"
    ]
    assert ("CloneScheduled", f"Cloning from {ns}/golden into away scheduled") in messages
    assert ("CloneSucceeded", f"Successfully cloned from {ns}/golden into {other}/away") in messages

    async def pods_gone() -> bool:
        names = [p["metadata"]["name"] for n in (ns, other) for p in (await env.admin.list(PODS, n))["items"]]
        return not any(n.endswith("-source-pod") or n == "cdi-upload-away" for n in names)

    # Both pods are deleted once the clone is done, the source pod across namespaces by its ownerRef annotation.
    await eventually(pods_gone, timeout=30)


async def test_a_clone_from_another_namespace_says_why_it_waits_and_its_source_pod_goes_with_it(env: Env) -> None:
    """A source claim never populated: the source pod's reason is the DataVolume's, and deleting the DataVolume
    deletes the source pod in the other namespace (it cannot be owned across namespaces)."""
    golden, ns = await env.namespace(), await env.namespace()
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "empty"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    await env.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, golden)
    dv = blank_dv("copy")
    dv["spec"]["source"] = {"pvc": {"namespace": golden, "name": "empty"}}
    await env.admin.create(DATA_VOLUMES, dv, ns)

    async def failing() -> Object | None:
        found = await env.admin.get(DATA_VOLUMES, "copy", ns)
        conditions = (found.get("status") or {}).get("conditions") or []
        running = next((c for c in conditions if c["type"] == "Running"), {})
        return found if "never populated" in running.get("message", "") else None

    stuck = await eventually(failing, timeout=60)
    assert stuck["status"]["phase"] == "CloneInProgress"
    assert running_condition(stuck)["message"] == (
        "Unable to process data: the source claim has no disk.img: it was never populated"
    )
    source_pods = [
        p for p in (await env.admin.list(PODS, golden))["items"] if p["metadata"]["name"].endswith("-source-pod")
    ]
    assert len(source_pods) == 1
    assert source_pods[0]["metadata"]["annotations"]["cdi.kubevirt.io/storage.ownerRef"] == f"{ns}/copy"

    await env.admin.delete(DATA_VOLUMES, "copy", ns)

    async def gone() -> bool:
        return not (await env.admin.list(PODS, golden))["items"]

    await eventually(gone, timeout=30)
