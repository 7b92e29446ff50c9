"""The importer's http and registry sources on their own (`import_volume` with CDI's environment): against a
loopback HTTP server, the compressed and archived layouts CDI unwraps, extra headers and basic credentials, the raw
size check, https against a certConfigMap's CA; containerDisk images through the real skopeo (oci-archive) and from a
node's shared directory; what each source puts on the claim and the importer or upload pod; virtctl's progress."""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.server
import io
import json
import lzma
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api.quantity import MI
from pykubevirt.apiserver.security import ensure_pki
from pykubevirt.storage import datavolume_claim as dvc
from pykubevirt.storage.importer import FATAL_MARKER, ImporterError, import_volume
from pykubevirt.virtctl.image_upload import Progress
from tests.support.storage_plane import tarball
from tests.unit.test_image_store import oci_image

PAYLOAD = bytes(range(256)) * 4096 * 3  # 3 MiB


@pytest.fixture(scope="module")
def files() -> Iterator[tuple[str, dict[str, bytes], list[dict[str, str]]]]:
    """(base URL, path → body, the headers of each request)."""
    bodies: dict[str, bytes] = {}
    seen: list[dict[str, str]] = []

    class Handle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(dict(self.headers.items()))
            body = bodies.get(self.path.lstrip("/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", bodies, seen
    httpd.shutdown()
    httpd.server_close()


def tar_of(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


def qcow2_of(tmp: Path, data: bytes) -> bytes:
    raw, qcow2 = tmp / "src.raw", tmp / "src.qcow2"
    raw.write_bytes(data)
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    return qcow2.read_bytes()


def environ(data_dir: Path, url: str, size: str = "16Mi", **extra: str) -> dict[str, str]:
    return {
        "PYKUBEVIRT_MOUNTS": json.dumps({"/data": str(data_dir)}),
        "IMPORTER_SOURCE": "http",
        "IMPORTER_ENDPOINT": url,
        "IMPORTER_IMAGE_SIZE": size,
        "FILESYSTEM_OVERHEAD": "0.06",
        "OWNER_UID": "uid-1",
        **extra,
    }


@pytest.mark.parametrize("layout", ["raw", "iso", "qcow2", "qcow2.gz", "raw.xz", "qcow2.tar", "raw.tar.gz"])
def test_each_layout_becomes_the_same_raw_disk(
    layout: str, files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    body = qcow2_of(tmp_path, PAYLOAD) if layout.startswith("qcow2") else PAYLOAD
    for wrapper in layout.split(".")[1:]:
        body = {"gz": gzip.compress, "xz": lzma.compress, "tar": lambda b: tar_of("disk.img", b)}[wrapper](body)
    bodies[f"{tmp_path.name}/{layout}"] = body
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(environ(data, f"{base}/{tmp_path.name}/{layout}")) == "Import Complete"
    assert sorted(p.name for p in data.iterdir()) == ["disk.img"]
    disk = data / "disk.img"
    with disk.open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD
    # 16Mi less CDI's 6 % overhead, rounded down to 1 MiB.
    assert disk.stat().st_size == 15 * MI


@pytest.mark.parametrize("compression", ["", "gz", "xz"])
def test_an_archive_data_volume_is_unpacked_into_the_volume(
    compression: str, files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    tree = {"a.txt": b"alpha", "sub/b.bin": PAYLOAD}
    body = tarball(tree)
    if compression:
        body = {"gz": gzip.compress, "xz": lzma.compress}[compression](body)
    bodies[f"{tmp_path.name}/tree"] = body
    data = tmp_path / "data"
    data.mkdir()
    url = f"{base}/{tmp_path.name}/tree"
    assert import_volume(environ(data, url, IMPORTER_CONTENTTYPE="archive")) == "Import Complete"
    assert (data / "a.txt").read_bytes() == b"alpha" and (data / "sub/b.bin").read_bytes() == PAYLOAD
    assert not (data / "disk.img").exists()
    assert (data / "a.txt").stat().st_mode & 0o777 == 0o640


def test_an_archive_that_is_not_a_tar_fails_with_cdis_message(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    bodies[f"{tmp_path.name}/junk"] = b"not a tar at all" * 100
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ImporterError, match=r"^unable to untar files from endpoint: exit status 2"):
        import_volume(environ(data, f"{base}/{tmp_path.name}/junk", IMPORTER_CONTENTTYPE="archive"))


def test_extra_headers_and_basic_credentials_are_sent(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, seen = files
    bodies["auth.img"] = PAYLOAD
    data = tmp_path / "data"
    data.mkdir()
    env = environ(
        data,
        f"{base}/auth.img",
        IMPORTER_EXTRA_HEADER_0="X-First: one",
        IMPORTER_ACCESS_KEY_ID="user",
        IMPORTER_SECRET_KEY="secret",
    )
    import_volume(env)
    assert seen[-1]["X-First"] == "one"
    assert seen[-1]["Authorization"] == "Basic " + base64.b64encode(b"user:secret").decode()


def test_a_raw_image_larger_than_the_volume_is_refused_and_nothing_is_left(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    bodies["big.img"] = PAYLOAD * 2
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ImporterError) as failure:
        import_volume(environ(data, f"{base}/big.img", size="4Mi"))
    usable = 3 * MI  # 4Mi / 1.06 rounded down to 1 MiB
    assert str(failure.value) == (
        f"virtual image size {6 * MI} is larger than the reported available storage {usable}. A larger PVC is required"
    )
    assert list(data.iterdir()) == []


def registry_environ(data_dir: Path, endpoint: str, shared: Path | None = None) -> dict[str, str]:
    mounts = {"/data": str(data_dir), **({"/shared": str(shared)} if shared else {})}
    return {**environ(data_dir, endpoint), "IMPORTER_SOURCE": "registry", "PYKUBEVIRT_MOUNTS": json.dumps(mounts)}


def test_a_registry_image_is_pulled_with_skopeo_and_its_disk_converted(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    qcow2 = qcow2_of(tmp_path, PAYLOAD)
    oci_image(layout, "v1", [("disk/", None, ""), ("disk/rhel.qcow2", qcow2, "")])
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as out:
        for child in sorted(layout.iterdir()):
            out.add(child, arcname=child.name)
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(registry_environ(data, f"oci-archive://{archive}")) == "Import Complete"
    assert sorted(p.name for p in data.iterdir()) == ["disk.img"]
    with (data / "disk.img").open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD


def test_a_registry_image_without_a_disk_is_refused_with_kubevirts_message(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    oci_image(layout, "v1", [("etc/", None, ""), ("etc/motd", b"hello", "")])
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, "w") as out:
        for child in sorted(layout.iterdir()):
            out.add(child, arcname=child.name)
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(ImporterError, match="no file found in folder /disk, no disk present"):
        import_volume(registry_environ(data, f"oci-archive://{archive}"))
    assert list(data.iterdir()) == []


def test_a_node_pulled_image_is_read_from_the_shared_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    blob = tmp_path / "blob.qcow2"
    blob.write_bytes(qcow2_of(tmp_path, PAYLOAD))
    (shared / "disk.img").symlink_to(blob)
    data = tmp_path / "data"
    data.mkdir()
    assert import_volume(registry_environ(data, "docker://pykubevirt.local/x:1", shared)) == "Import Complete"
    with (data / "disk.img").open("rb") as image:
        assert image.read(len(PAYLOAD)) == PAYLOAD


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_virtctl_upload_progress_is_a_bar_on_a_terminal_and_lines_otherwise() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for out in (terminal, pipe):
        progress = Progress(4 * MI, out)
        for sent in range(MI // 2, 4 * MI + 1, MI // 2):
            progress.update(sent)
        progress.finish()
    assert terminal.getvalue().startswith("\r 512.00 KiB / 4.00 MiB [")
    assert (
        terminal.getvalue()
        .rstrip("\n")
        .rsplit("\r", 1)[1]
        .startswith(" 4.00 MiB / 4.00 MiB [" + "=" * 40 + "] 100.00%")
    )
    assert pipe.getvalue().splitlines() == [
        f"{size} / 4.00 MiB ({percent}%)"
        for size, percent in (
            ("512.00 KiB", 12), ("1.00 MiB", 25), ("1.50 MiB", 38), ("2.00 MiB", 50),
            ("2.50 MiB", 62), ("3.00 MiB", 75), ("3.50 MiB", 88), ("4.00 MiB", 100),
        )
    ]  # fmt: skip


@pytest.fixture(scope="module")
def https_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URL of PAYLOAD over https on 127.0.0.1, a certConfigMap directory holding the server's CA)."""
    root = tmp_path_factory.mktemp("https")
    pki = ensure_pki(root / "pki", ["localhost"], ["127.0.0.1"])
    certs = root / "certs"
    certs.mkdir()
    (certs / "ca.crt").write_bytes(pki.ca_pem)

    class Handle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(PAYLOAD)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handle)
    httpd.socket = pki.server_ssl_context().wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}/disk.img", certs
    httpd.shutdown()
    httpd.server_close()


def test_https_is_verified_against_the_cert_config_map(https_files: tuple[str, Path], tmp_path: Path) -> None:
    url, certs = https_files
    for name, extra, mounts in (
        ("with-ca", {}, {"/certs": str(certs)}),
        ("insecure", {"INSECURE_TLS": "true"}, {}),
    ):
        data = tmp_path / name
        data.mkdir()
        env = {**environ(data, url), **extra, "PYKUBEVIRT_MOUNTS": json.dumps({"/data": str(data), **mounts})}
        assert import_volume(env) == "Import Complete"
        with (data / "disk.img").open("rb") as image:
            assert image.read(len(PAYLOAD)) == PAYLOAD
    data = tmp_path / "unverified"
    data.mkdir()
    with pytest.raises(ImporterError, match="CERTIFICATE_VERIFY_FAILED"):
        import_volume(environ(data, url))
    assert list(data.iterdir()) == []


def data_volume(source: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "dv", "namespace": "ns", "uid": "dv-uid"},
        "spec": {"source": source, "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }


def claim_and_pod(dv: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pvc = dvc.new_claim(dv)
    pvc["metadata"]["uid"] = "pvc-uid"
    kind = dvc.source_kind(dv)
    return pvc, dvc.upload_pod(pvc, dv) if kind == "upload" else dvc.importer_pod(pvc, dv)


def test_an_http_source_is_recorded_on_the_claim_and_handed_to_the_importer_as_cdi_does() -> None:
    source = {
        "url": "https://example.test/disk.qcow2",
        "secretRef": "creds",
        "certConfigMap": "ca",
        "extraHeaders": ["X-A: 1", "X-B: 2"],
        "secretExtraHeaders": ["hdr"],
        "insecureSkipVerify": True,
    }
    pvc, pod = claim_and_pod(data_volume({"http": source}))
    annotations = pvc["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("cdi.kubevirt.io/storage.import.")} == {
        "cdi.kubevirt.io/storage.import.source": "http",
        "cdi.kubevirt.io/storage.import.endpoint": "https://example.test/disk.qcow2",
        "cdi.kubevirt.io/storage.import.secretName": "creds",
        "cdi.kubevirt.io/storage.import.certConfigMap": "ca",
        "cdi.kubevirt.io/storage.import.insecureSkipVerify": "true",
        "cdi.kubevirt.io/storage.import.extraHeaders.0": "X-A: 1",
        "cdi.kubevirt.io/storage.import.extraHeaders.1": "X-B: 2",
        "cdi.kubevirt.io/storage.import.secretExtraHeaders.0": "hdr",
    }
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["IMPORTER_SOURCE"] == "http" and env["IMPORTER_CONTENTTYPE"] == "kubevirt"
    assert env["IMPORTER_ENDPOINT"] == "https://example.test/disk.qcow2"
    assert env["IMPORTER_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "creds", "key": "accessKeyId"}}
    assert env["IMPORTER_SECRET_KEY"] == {"secretKeyRef": {"name": "creds", "key": "secretKey"}}
    assert (env["INSECURE_TLS"], env["IMPORTER_EXTRA_HEADER_0"], env["IMPORTER_EXTRA_HEADER_1"]) == (
        "true",
        "X-A: 1",
        "X-B: 2",
    )
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/certs"]]["configMap"] == {"name": "ca"}
    assert volumes[mounts["/extraheaders/secret0"]]["secret"] == {"secretName": "hdr"}
    assert pod["metadata"]["name"] == "importer-dv"
    assert pod["spec"]["hostNetwork"] is True


def test_a_local_registry_image_comes_from_the_node_as_a_container_disk_sidecar() -> None:
    _, pod = claim_and_pod(data_volume({"registry": {"url": "docker://pykubevirt.local/demo-guest:1.0"}}))
    (server,) = pod["spec"]["initContainers"]
    assert server["image"] == "pykubevirt.local/demo-guest:1.0"
    assert server["command"] == ["/usr/bin/container-disk", "--copy-path", "/shared/disk"]
    assert server["restartPolicy"] == "Always"
    assert {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]} == {"/data", "/shared"}
    _, remote = claim_and_pod(data_volume({"registry": {"url": "docker://quay.io/x/y:1"}}))
    assert "initContainers" not in remote["spec"]


def test_an_upload_gets_cdis_upload_target_and_upload_server_pod() -> None:
    pvc, pod = claim_and_pod(data_volume({"upload": {}}))
    assert pvc["metadata"]["annotations"]["cdi.kubevirt.io/storage.upload.target"] == ""
    assert pod["metadata"]["name"] == "cdi-upload-dv"
    assert pod["metadata"]["labels"]["cdi.kubevirt.io"] == "cdi-upload-server"
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["pykubevirt", "cdi-uploadserver"]
    assert {e["name"] for e in container["env"]} == {
        "UPLOAD_IMAGE_SIZE", "OWNER_UID", "FILESYSTEM_OVERHEAD", "PREALLOCATION",
    }  # fmt: skip
    ready = dict(pvc, metadata={**pvc["metadata"], "annotations": {dvc.POD_READY: "true"}}, status={"phase": "Bound"})
    running = {"status": {"phase": "Running"}}
    assert dvc.dv_phase(data_volume({"upload": {}}), ready, running) == "UploadReady"
    assert dvc.dv_phase(data_volume({"upload": {}}), {**ready, "metadata": {}}, running) == "UploadScheduled"


def test_an_image_the_node_cannot_pull_shows_as_cdis_image_pull_failure() -> None:
    pod = {
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [
                {
                    "name": "server",
                    "image": "pykubevirt.local/missing:1",
                    "state": {"waiting": {"reason": "ErrImagePull"}},
                }
            ],
            "containerStatuses": [{"name": "importer", "state": {"waiting": {"reason": "PodInitializing"}}}],
        }
    }
    running = dvc.dv_conditions("dv", "ImportScheduled", None, pod)[2]
    assert running == {
        "type": "Running",
        "status": "False",
        "reason": "ImagePullFailed",
        "message": "failed to pull image: pykubevirt.local/missing:1",
    }


def test_an_import_out_of_space_says_the_data_volume_is_too_small_as_cdi() -> None:
    pod = {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "importer",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                }
            ],
        }
    }
    failure = "Unable to process data: [Errno 28] No space left on device"
    running = dvc.dv_conditions("dv", "ImportInProgress", None, pod, failure)[2]
    assert (running["reason"], running["message"]) == ("Error", "DataVolume too small to contain image")
    other = dvc.dv_conditions("dv", "ImportInProgress", None, pod, "Unable to process data: boom")[2]
    assert other["message"] == "Unable to process data: boom"


@pytest.mark.parametrize("layout", ["raw", "qcow2.tar"])
def test_a_checksum_is_verified_over_the_whole_body(
    layout: str, files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    body = PAYLOAD if layout == "raw" else tar_of("disk.img", qcow2_of(tmp_path, PAYLOAD)) + tar_of("x", b"y")
    bodies[f"sum/{layout}"] = body
    good = "sha256:" + hashlib.sha256(body).hexdigest()
    data = tmp_path / "good"
    data.mkdir()
    assert import_volume(environ(data, f"{base}/sum/{layout}", IMPORTER_CHECKSUM=good)) == "Import Complete"
    bad = "md5:" + "0" * 32
    data = tmp_path / "bad"
    data.mkdir()
    with pytest.raises(ImporterError) as failure:
        import_volume(environ(data, f"{base}/sum/{layout}", IMPORTER_CHECKSUM=bad))
    assert str(failure.value) == f"checksum mismatch: expected {bad}, got md5:{hashlib.md5(body).hexdigest()}"
    # No image, whole or partial; only the recorded failure.
    assert [p.name for p in data.iterdir()] == [FATAL_MARKER]


def test_a_restarted_importer_repeats_a_checksum_mismatch_without_downloading_again(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, seen = files
    bodies["fatal/raw"] = PAYLOAD
    env = environ(tmp_path, f"{base}/fatal/raw", IMPORTER_CHECKSUM="sha256:" + "0" * 64)
    before = len(seen)
    with pytest.raises(ImporterError) as first:
        import_volume(env)
    assert str(first.value).startswith("checksum mismatch: expected sha256:000")
    # The kubelet restarts the container (restartPolicy OnFailure) before the controller deletes the pod.
    with pytest.raises(ImporterError) as again:
        import_volume(env)
    assert str(again.value) == str(first.value)
    assert len(seen) - before == 1


def test_an_ordinary_failure_is_retried_by_the_next_attempt(
    files: tuple[str, dict[str, bytes], list[dict[str, str]]], tmp_path: Path
) -> None:
    base, bodies, _ = files
    url = f"{base}/late/raw"
    with pytest.raises(ImporterError):
        import_volume(environ(tmp_path, url))  # 404: not there yet
    bodies["late/raw"] = PAYLOAD
    assert import_volume(environ(tmp_path, url)) == "Import Complete"
