"""virt-exportserver as its pod runs it: the `pykubevirt virt-exportserver` process on a fake pod layout, over HTTP."""

from __future__ import annotations

import gzip
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

from pykubevirt.cli.main import POD_COMMANDS, pod_parser
from pykubevirt.storage.export_server import LISTENING, TOKEN_HEADER

TOKEN = "s3cret-token"
AUTH = {TOKEN_HEADER: TOKEN}
EXPORT = "vm1-export"
EXTERNAL = "127.0.0.1:6443/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/vm1-export"
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
DISK = os.urandom((3 << 20) + 123)
BLOCK = os.urandom(100 << 10)

VM = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachine",
    "metadata": {"name": "vm1", "namespace": "ns"},
    "spec": {
        "dataVolumeTemplates": [{"metadata": {"name": "disk"}, "spec": {"source": {"http": {"url": ""}}}}],
        "template": {
            "spec": {
                "volumes": [
                    {"name": "root", "dataVolume": {"name": "disk"}},
                    {"name": "extra", "persistentVolumeClaim": {"claimName": "blk"}},
                ]
            }
        },
    },
}
BLK_DV = {"metadata": {"name": "blk", "namespace": "ns"}, "spec": {"source": {"http": {"url": ""}}}}


class Server(NamedTuple):
    process: subprocess.Popen[str]
    port: int


def pod_environment(root: Path, deadline: datetime) -> dict[str, str]:
    """The files of an exporter pod's volumes under `root`, and the environment its container gets."""
    (root / "token").mkdir()
    (root / "token" / "token").write_text(TOKEN + "\n")
    (root / "disk").mkdir()
    (root / "disk" / "disk.img").write_bytes(DISK)
    (root / "blk.img").write_bytes(BLOCK)
    data = root / "data"
    (data / "sub").mkdir(parents=True)
    (data / "lost+found").mkdir()
    (data / "lost+found" / "junk").write_text("junk")
    (data / "a.txt").write_text("hello\n")
    (data / "sub" / "b.bin").write_bytes(b"\x00\x01" * 1000)
    (root / "outside.txt").write_text("outside the volume")
    (data / "escape").symlink_to(root / "outside.txt")
    manifests = root / "manifest_data"
    manifests.mkdir()
    ca_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"export-ca-cm-{EXPORT}"}}
    files = {
        "virtualmachine-manifest": json.dumps(VM),
        "dv-blk": json.dumps(BLK_DV),
        "external_host": EXTERNAL,
        "internal_host": "virt-export-vm1-export.ns.svc",
        "external_ca_cm": json.dumps({**ca_cm, "data": {"ca.pem": CA_PEM}}),
        "export-name": EXPORT,
    }
    for key, text in files.items():
        (manifests / key).write_text(text)
    mounts = {
        "/token": str(root / "token"),
        "/export-volumes/disk": str(root / "disk"),
        "/dev/export-volumes/blk": str(root / "blk.img"),
        "/export-volumes/data": str(data),
        "/manifest_data": str(manifests),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUME")}
    env.update(
        PYKUBEVIRT_MOUNTS=json.dumps(mounts),
        TOKEN_FILE="/token/token",
        DEADLINE=deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        EXPORT_SECRET_DEF_URI="/manifests/secret",
        EXPORT_VM_DEF_URI="/manifests/all",
        EXPORT_SERVER_PORT="0",
        VOLUME0_EXPORT_PATH="/export-volumes/disk",
        VOLUME0_EXPORT_RAW_URI="/volumes/disk/disk.img",
        VOLUME0_EXPORT_RAW_GZIP_URI="/volumes/disk/disk.img.gz",
        VOLUME1_EXPORT_PATH="/dev/export-volumes/blk",
        VOLUME1_EXPORT_RAW_URI="/volumes/blk/disk.img",
        VOLUME1_EXPORT_RAW_GZIP_URI="/volumes/blk/disk.img.gz",
        VOLUME2_EXPORT_PATH="/export-volumes/data",
        VOLUME2_EXPORT_ARCHIVE_URI="/volumes/data/disk.tar.gz",
        VOLUME2_EXPORT_DIR_URI="/volumes/data/dir/",
    )
    return env


def start(env: dict[str, str]) -> Server:
    process = subprocess.Popen(
        [sys.executable, "-m", "pykubevirt.cli.main", "virt-exportserver"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(LISTENING + "http://127.0.0.1:"), (line, process.stderr and process.stderr.read())
    return Server(process, int(line.strip().rsplit(":", 1)[1]))


def stop(server: Server) -> None:
    if server.process.poll() is None:
        server.process.terminate()
    server.process.communicate(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start(pod_environment(tmp_path_factory.mktemp("pod"), datetime.now(UTC) + timedelta(hours=1)))
    yield running
    stop(running)


def request(
    server: Server, path: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, http.client.HTTPMessage, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def documents(body: bytes) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(body) if doc is not None]


def test_the_pods_parser_runs_virt_exportserver() -> None:
    assert "virt-exportserver" in POD_COMMANDS
    args = pod_parser().parse_args(["virt-exportserver", "-v", "3"])
    assert args.command == "virt-exportserver"
    assert args.func.__name__ == "_virt_exportserver"


def test_readiness_needs_no_token(server: Server) -> None:
    assert request(server, "/exportready")[::2] == (200, b"OK")


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/volumes/disk/disk.img", AUTH),
        (f"/volumes/disk/disk.img?{TOKEN_HEADER}={TOKEN}", {}),
        (f"/volumes/disk/disk.img?{TOKEN_HEADER}=wrong", AUTH),
    ],
    ids=["header", "query", "query-wrong-header-right"],
)
def test_the_token_is_taken_from_the_header_or_the_query(server: Server, path: str, headers: dict[str, str]) -> None:
    status, _, body = request(server, path, headers)
    assert status == 200
    assert body == DISK


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/volumes/disk/disk.img", {}),
        ("/volumes/disk/disk.img", {TOKEN_HEADER: "wrong"}),
        ("/volumes/disk/disk.img", {TOKEN_HEADER: TOKEN + "x"}),
        (f"/volumes/disk/disk.img?{TOKEN_HEADER}=wrong", {}),
        ("/volumes/disk/disk.img.gz", {}),
        ("/volumes/data/disk.tar.gz", {}),
        ("/volumes/data/dir/a.txt", {}),
        ("/manifests/all", {}),
        ("/manifests/secret", {TOKEN_HEADER: ""}),
    ],
)
def test_no_token_or_a_wrong_one_is_unauthorized(server: Server, path: str, headers: dict[str, str]) -> None:
    status, _, body = request(server, path, headers)
    assert status == 401
    assert TOKEN.encode() not in body and b"hello" not in body


def test_raw_download_is_the_image_and_head_gives_its_length(server: Server) -> None:
    status, headers, body = request(server, "/volumes/disk/disk.img", AUTH, method="HEAD")
    assert (status, headers["Content-Length"], body) == (200, str(len(DISK)), b"")
    status, headers, body = request(server, "/volumes/disk/disk.img", AUTH)
    assert (status, headers["Content-Length"]) == (200, str(len(DISK)))
    assert body == DISK


def test_a_range_of_the_raw_image(server: Server) -> None:
    status, headers, body = request(server, "/volumes/disk/disk.img", {**AUTH, "Range": "bytes=1000-1999"})
    assert (status, headers["Content-Range"], body) == (206, f"bytes 1000-1999/{len(DISK)}", DISK[1000:2000])
    status, _, body = request(server, "/volumes/disk/disk.img", {**AUTH, "Range": "bytes=-10"})
    assert (status, body) == (206, DISK[-10:])
    status, headers, _ = request(server, "/volumes/disk/disk.img", {**AUTH, "Range": f"bytes={len(DISK)}-"})
    assert (status, headers["Content-Range"]) == (416, f"bytes */{len(DISK)}")


def test_a_block_volume_is_served_from_its_device(server: Server) -> None:
    assert request(server, "/volumes/blk/disk.img", AUTH)[::2] == (200, BLOCK)
    status, _, body = request(server, "/volumes/blk/disk.img.gz", AUTH)
    assert status == 200
    assert gzip.decompress(body) == BLOCK


def test_gzip_download_decompresses_to_the_image(server: Server) -> None:
    status, headers, body = request(server, "/volumes/disk/disk.img.gz", AUTH)
    assert (status, headers["Content-Type"], headers["Transfer-Encoding"]) == (200, "application/x-gzip", "chunked")
    assert gzip.decompress(body) == DISK


def test_the_archive_holds_the_directory_but_not_lost_and_found(server: Server) -> None:
    status, _, body = request(server, "/volumes/data/disk.tar.gz", AUTH)
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        names = set(tar.getnames())
        assert names == {".", "./a.txt", "./sub", "./sub/b.bin", "./escape"}
        member = tar.extractfile("./sub/b.bin")
        assert member is not None and member.read() == b"\x00\x01" * 1000
        assert tar.getmember("./escape").issym()


def test_dir_lists_the_volume_and_serves_the_files_under_it(server: Server) -> None:
    status, headers, body = request(server, "/volumes/data/dir/", AUTH)
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    for entry in ("a.txt", "sub/", "lost+found/", "escape"):
        assert f'">{entry}</a>'.encode() in body
    assert request(server, "/volumes/data/dir/a.txt", AUTH)[::2] == (200, b"hello\n")
    assert request(server, f"/volumes/data/dir/sub/b.bin?{TOKEN_HEADER}={TOKEN}")[::2] == (200, b"\x00\x01" * 1000)
    assert b'">b.bin</a>' in request(server, "/volumes/data/dir/sub/", AUTH)[2]
    status, headers, _ = request(server, "/volumes/data/dir/sub", AUTH)
    assert (status, headers["Location"]) == (301, "sub/")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/volumes/",
        "/volumes/disk/",
        "/volumes/disk/disk.img/",
        "/volumes/nope/disk.img",
        "/volumes/data/dir/missing.txt",
        "/volumes/data/dir/a.txt/",
        "/manifests/other",
    ],
)
def test_unknown_paths_are_not_found(server: Server, path: str) -> None:
    assert request(server, path, AUTH)[0] == 404


@pytest.mark.parametrize(
    "path",
    [
        "/volumes/data/dir/../../etc/passwd",
        "/volumes/data/dir/../../../../../../etc/passwd",
        "/volumes/data/dir/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/volumes/data/dir/..%2f..%2f..%2f..%2f..%2fetc/passwd",
        "/volumes/data/dir/escape",
        "/volumes/data/dir/sub/../../outside.txt",
    ],
)
def test_paths_cannot_escape_the_volume(server: Server, path: str) -> None:
    status, _, body = request(server, path, AUTH)
    assert status == 404
    assert b"root:" not in body and b"outside the volume" not in body


def test_the_vm_manifests_as_yaml(server: Server) -> None:
    status, headers, body = request(server, "/manifests/all", {**AUTH, "Accept": "application/yaml"})
    assert (status, headers["Content-Type"]) == (200, "application/yaml")
    assert body.endswith(b"---\n")
    ca, vm, dv = documents(body)
    assert (ca["kind"], ca["metadata"]["name"], ca["data"]["ca.pem"]) == ("ConfigMap", f"export-ca-cm-{EXPORT}", CA_PEM)
    assert (vm["apiVersion"], vm["kind"], vm["metadata"]["name"]) == ("kubevirt.io/v1", "VirtualMachine", "vm1")
    assert vm["spec"]["dataVolumeTemplates"][0]["spec"]["source"]["http"] == {
        "url": f"https://{EXTERNAL}/volumes/disk/disk.img.gz",
        "certConfigMap": f"export-ca-cm-{EXPORT}",
        "secretExtraHeaders": [f"header-secret-{EXPORT}"],
    }
    assert (dv["apiVersion"], dv["kind"], dv["metadata"]["name"]) == ("cdi.kubevirt.io/v1beta1", "DataVolume", "blk")
    assert dv["spec"]["source"]["http"]["url"] == f"https://{EXTERNAL}/volumes/blk/disk.img.gz"


def test_the_vm_manifests_as_a_json_list(server: Server) -> None:
    status, headers, body = request(server, "/manifests/all", {**AUTH, "Accept": "application/json"})
    assert (status, headers["Content-Type"]) == (200, "application/json")
    listing = json.loads(body)
    assert (listing["apiVersion"], listing["kind"]) == ("v1", "List")
    assert [item["kind"] for item in listing["items"]] == ["ConfigMap", "VirtualMachine", "DataVolume"]
    assert listing["items"] == documents(request(server, "/manifests/all", {**AUTH, "Accept": "application/yaml"})[2])
    # As KubeVirt's: JSON unless the client asks for exactly application/yaml.
    assert request(server, "/manifests/all", AUTH)[2] == body
    # The controller's external link names the same manifests under /external.
    assert request(server, "/external/manifests/all", {**AUTH, "Accept": "application/json"})[2] == body


def test_the_header_secret_carries_the_token_for_cdi(server: Server) -> None:
    (secret,) = documents(request(server, "/manifests/secret", {**AUTH, "Accept": "application/yaml"})[2])
    assert secret == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"header-secret-{EXPORT}"},
        "stringData": {"token": f"{TOKEN_HEADER}:{TOKEN}"},
    }
    status, _, body = request(server, "/manifests/secret", {**AUTH, "Accept": "application/json"})
    assert status == 200
    assert json.loads(body)["items"] == [secret]


def test_an_idle_connection_does_not_hold_up_the_next(server: Server) -> None:
    # A server handling one connection at a time would wait for this one's request line forever.
    with socket.create_connection(("127.0.0.1", server.port)) as idle:
        idle.sendall(b"GET /volumes/disk/disk.img HTTP/1.1\r\nHost: x\r\n")
        assert request(server, "/volumes/blk/disk.img", AUTH)[::2] == (200, BLOCK)


def test_the_server_exits_at_the_deadline(tmp_path: Path) -> None:
    # Far enough ahead that a slow start of the server still finds it before its deadline.
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
    running = start(pod_environment(tmp_path, deadline))
    try:
        assert request(running, "/exportready")[0] == 200
        assert running.process.wait(timeout=30) == 0
        assert datetime.now(UTC) >= deadline
        with pytest.raises(ConnectionRefusedError):
            request(running, "/exportready")
    finally:
        stop(running)


def test_a_volume_it_cannot_read_fails_the_start(tmp_path: Path) -> None:
    env = pod_environment(tmp_path, datetime.now(UTC) + timedelta(hours=1))
    env["VOLUME3_EXPORT_PATH"] = "/export-volumes/missing"
    result = subprocess.run(
        [sys.executable, "-m", "pykubevirt.cli.main", "virt-exportserver"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert "virt-exportserver:" in result.stderr and "/export-volumes/missing" in result.stderr
