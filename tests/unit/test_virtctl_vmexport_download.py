"""`virtctl vmexport` create, delete and download against a fake API client and a real local HTTPS server standing in
for the export's external link."""

from __future__ import annotations

import argparse
import base64
import copy
import datetime
import gzip
import ipaddress
import json
import re
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.resources import ResourceRef
from pykubevirt.pki.certificates import create_ca, issue_leaf, write_pair
from pykubevirt.virtctl import vmexport as vx
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, normalise_bools
from tests.support.fake_client_reads import GetOrNone

DISK = bytes(range(256)) * 64
VM_YAML = b"apiVersion: kubevirt.io/v1\nkind: VirtualMachine\n"
VM_JSON = b'{"apiVersion":"v1","kind":"List","items":[]}'
HEADER_SECRET = b"apiVersion: v1\nkind: Secret\n"
EXPORT_PATH = "/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/exp"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalise_bools(["vmexport", *argv]))


def _volume(name: str, *formats: tuple[str, str]) -> dict[str, Any]:
    return {"name": name, "formats": [{"format": f, "url": u} for f, u in formats]}


# ------------------------------------------------------------------------------------ against a fake and a link


def _not_found(plural: str, name: str) -> NotFound:
    return NotFound({"code": 404, "reason": "NotFound", "message": f'{plural} "{name}" not found'}, 404)


class FakeClient(GetOrNone):
    """get/create/delete over a dict of objects; a created export is read with each status of `before_ready` (None:
    no status yet) and then turns Ready with `ready_status`, as virt-controller would make it."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []
        self.before_ready: list[dict[str, Any] | None] = []
        self.ready_status: dict[str, Any] = {}

    def add(self, plural: str, body: dict[str, Any]) -> None:
        body["metadata"].setdefault("namespace", "ns")
        body["metadata"].setdefault("uid", f"uid-{body['metadata']['name']}")
        self.objects[(plural, body["metadata"]["name"])] = body

    def token(self, name: str = "secret-exp") -> str:
        return base64.b64decode(self.objects[("secrets", name)]["data"]["token"]).decode()

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = self.objects.get((resource.plural, name))
        if obj is None:
            raise _not_found(resource.plural, name)
        if resource.plural == "virtualmachineexports" and "status" not in obj:
            if not self.before_ready:
                obj["status"] = copy.deepcopy(self.ready_status)
            elif (status := self.before_ready.pop(0)) is not None:
                return {**copy.deepcopy(obj), "status": status}
        return copy.deepcopy(obj)

    async def create(self, resource: ResourceRef, body: dict[str, Any], namespace: str | None = None) -> Any:
        if (resource.plural, body["metadata"]["name"]) in self.objects:
            raise AlreadyExists({"code": 409, "reason": "AlreadyExists", "message": "exists"}, 409)
        self.created.append((resource.plural, copy.deepcopy(body)))
        self.add(resource.plural, copy.deepcopy(body))
        return copy.deepcopy(self.objects[(resource.plural, body["metadata"]["name"])])

    async def delete(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Any:
        if self.objects.pop((resource.plural, name), None) is None:
            raise _not_found(resource.plural, name)
        self.deleted.append(name)
        return {}


def kube(fake: FakeClient) -> KubeClient:
    return cast(KubeClient, fake)


class Link:
    """The export's external link as the export server answers it, behind TLS of its own CA."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.token = ""  # the one the server wants; the token Secret's when empty
        self.base = ""
        self.ca = ""
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.answers: list[int] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers)))
        if request.headers.get("x-kubevirt-export-token") != (self.token or self.client.token()):
            return web.Response(status=401)
        if self.answers:
            return web.Response(status=self.answers.pop(0))
        path = request.path.removeprefix(EXPORT_PATH)
        bodies = {
            "/volumes/disk/disk.img": DISK,
            "/volumes/disk/disk.img.gz": gzip.compress(DISK[:8000]) + gzip.compress(DISK[8000:]),
            "/manifests/secret": HEADER_SECRET,
            "/manifests/all": VM_JSON if request.headers.get("Accept") == "application/json" else VM_YAML,
        }
        if path not in bodies:
            return web.Response(status=404)
        return web.Response(body=bodies[path])

    def status(self, cert: str | None = None, volumes: bool = True) -> dict[str, Any]:
        external: dict[str, Any] = {"cert": self.ca if cert is None else cert}
        if volumes:
            gz = ("gzip", f"{self.base}/volumes/disk/disk.img.gz")
            external["volumes"] = [_volume("disk", ("raw", f"{self.base}/volumes/disk/disk.img"), gz)]
        external["manifests"] = [
            {"type": "all", "url": f"{self.base}/manifests/all"},
            {"type": "auth-header-secret", "url": f"{self.base}/manifests/secret"},
        ]
        return {"phase": "Ready", "tokenSecretRef": "secret-exp", "links": {"external": external}}


def _ca_pem(common_name: str) -> tuple[str, Any, Any]:
    cert, key = create_ca(common_name)
    return cert.public_bytes(serialization.Encoding.PEM).decode(), cert, key


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    monkeypatch.setattr(vx, "WAIT_INTERVAL", 0.01)
    monkeypatch.setattr(vx, "RETRY_SECONDS", 0.0)
    return FakeClient()


@pytest.fixture
async def link(fake: FakeClient, tmp_path: Path) -> AsyncIterator[Link]:
    served = Link(fake)
    served.ca, ca_cert, ca_key = _ca_pem("export test CA")
    leaf, key = issue_leaf(
        ca_cert,
        ca_key,
        "export-proxy",
        ExtendedKeyUsageOID.SERVER_AUTH,
        validity=datetime.timedelta(days=1),
        addresses=[ipaddress.ip_address("127.0.0.1")],
    )
    write_pair(tmp_path / "tls.crt", tmp_path / "tls.key", leaf, key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    app = web.Application()
    app.router.add_get("/{tail:.*}", served.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    served.base = f"https://127.0.0.1:{port}{EXPORT_PATH}"
    fake.ready_status = served.status()
    yield served
    await runner.cleanup()


def existing(fake: FakeClient, status: dict[str, Any], token: str = "abc") -> None:
    fake.add("virtualmachineexports", {"metadata": {"name": "exp"}, "status": status})
    fake.add(
        "secrets", {"metadata": {"name": "secret-exp"}, "data": {"token": base64.b64encode(token.encode()).decode()}}
    )


async def run(fake: FakeClient, *argv: str) -> None:
    args = parse(*argv)
    vx.prepare(args)
    await vx.run(kube(fake), "ns", args)


PROGRESS = re.compile(r"Downloading file: (\d+) \[[=>_]{19}\] (\d+|\?) p/s\n")


async def test_create_then_delete(fake: FakeClient, capsys: pytest.CaptureFixture[str]) -> None:
    await run(fake, "create", "exp", "--vm=vm", "--ttl=2m", "--annotations=a=b")
    assert capsys.readouterr() == ("", "VirtualMachineExport 'ns/exp' created successfully\n")
    (plural, export), (_, secret) = fake.created
    assert plural == "virtualmachineexports" and export["spec"]["ttlDuration"] == "2m0s"
    assert export["metadata"]["annotations"] == {"a": "b"}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-exp" and len(fake.token()) == 20
    with pytest.raises(VirtctlError, match=r"^VirtualMachineExport 'ns/exp' already exists$"):
        await run(fake, "create", "exp", "--pvc=p")
    await run(fake, "delete", "exp")
    await run(fake, "delete", "exp")
    assert capsys.readouterr().err == (
        "VirtualMachineExport 'ns/exp' deleted successfully\nVirtualMachineExport 'ns/exp' does not exist\n"
    )


async def test_download_creates_waits_verifies_and_deletes(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.before_ready = [None, {"phase": "Pending"}, {"phase": "Ready"}]
    out = tmp_path / "disk.img.gz"
    await run(fake, "download", "exp", "--pvc=disk", f"--output={out}")
    # gzip (the default) is saved as it came, both members.
    assert gzip.decompress(out.read_bytes()) == DISK
    ((path, headers),) = link.requests
    assert path == f"{EXPORT_PATH}/volumes/disk/disk.img.gz"
    assert headers["x-kubevirt-export-token"] == fake.token()
    captured = capsys.readouterr()
    assert captured.out == (
        "VirtualMachineExport 'ns/exp' created successfully\n"
        "waiting for VM Export exp status to be ready...\n"
        "waiting for VM Export exp external links to be available...\n"
        "Download finished successfully\n"
        "VirtualMachineExport 'ns/exp' deleted successfully\n"
    )
    progress = PROGRESS.fullmatch(captured.err)
    assert progress is not None and int(progress[1]) == out.stat().st_size
    assert fake.deleted == ["exp"] and ("virtualmachineexports", "exp") not in fake.objects


async def test_raw_gunzips_a_compressed_link_and_saves_a_raw_one_as_is(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing(fake, link.status())
    out = tmp_path / "disk.img"
    await run(fake, "download", "exp", "--format=raw", f"--output={out}", "--volume=disk")
    assert out.read_bytes() == DISK
    assert capsys.readouterr().out == "Decompressing image:\nDownload finished successfully\n"
    raw_only = link.status()
    raw_only["links"]["external"]["volumes"] = [_volume("disk", ("raw", f"{link.base}/volumes/disk/disk.img"))]
    fake.objects[("virtualmachineexports", "exp")]["status"] = raw_only
    await run(fake, "download", "exp", "--format=raw", f"--output={out}")
    assert out.read_bytes() == DISK and link.requests[-1][0].endswith("/disk.img")
    assert capsys.readouterr().out == "Download finished successfully\n"
    # An export this command did not make stays.
    assert fake.deleted == []


async def test_to_standard_output_the_lines_go_to_stderr(
    fake: FakeClient, link: Link, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    existing(fake, link.status())
    await run(fake, "download", "exp", "--output=-", "--delete-vme")
    captured = capsysbinary.readouterr()
    assert gzip.decompress(captured.out) == DISK
    assert captured.err.endswith(
        b"Download finished successfully\nVirtualMachineExport 'ns/exp' deleted successfully\n"
    )
    assert fake.deleted == ["exp"]


async def test_tls_is_verified_against_the_links_cert_unless_insecure(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other_ca, _, _ = _ca_pem("someone else")
    existing(fake, link.status(cert=other_ca))
    out = tmp_path / "disk.img.gz"
    with pytest.raises(VirtctlError) as caught:
        await run(fake, "download", "exp", f"--output={out}")
    assert str(caught.value).startswith(f'Get "{link.base}/volumes/disk/disk.img.gz": ')
    assert "certificate verify failed" in str(caught.value) and link.requests == []
    await run(fake, "download", "exp", f"--output={out}", "--insecure")
    assert gzip.decompress(out.read_bytes()) == DISK


async def test_a_bad_status_is_retried_and_the_export_made_again(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link.answers = [500]
    out = tmp_path / "disk.img.gz"
    await run(fake, "download", "exp", "--vm=vm", f"--output={out}", "--retry=1")
    assert gzip.decompress(out.read_bytes()) == DISK
    # Each attempt makes the export and removes it after, as KubeVirt's does.
    assert capsys.readouterr().out == (
        "VirtualMachineExport 'ns/exp' created successfully\n"
        "Bad status: 500 Internal Server Error\n"
        "VirtualMachineExport 'ns/exp' deleted successfully\n"
        "Retrying...\n"
        "VirtualMachineExport 'ns/exp' created successfully\n"
        "Download finished successfully\n"
        "VirtualMachineExport 'ns/exp' deleted successfully\n"
    )
    assert fake.deleted == ["exp", "exp"]


async def test_retries_run_out_on_a_wrong_token(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing(fake, link.status(), token="wrong")
    link.token = "right"
    with pytest.raises(VirtctlError, match=r"^retry count reached, exiting unsuccessfully$"):
        await run(fake, "download", "exp", f"--output={tmp_path / 'o'}", "--retry=2")
    assert len(link.requests) == 3
    assert (
        capsys.readouterr().out == "Bad status: 401 Unauthorized\nRetrying...\n" * 2 + "Bad status: 401 Unauthorized\n"
    )


async def test_an_existing_export_given_a_source_is_used_and_kept(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing(fake, link.status())
    await run(fake, "download", "exp", "--vm=vm", f"--output={tmp_path / 'o'}")
    assert capsys.readouterr().out == "Download finished successfully\n"
    assert fake.created == [] and fake.deleted == []


async def test_the_token_secret_must_be_there(fake: FakeClient, link: Link, tmp_path: Path) -> None:
    fake.add("virtualmachineexports", {"metadata": {"name": "exp"}, "status": link.status()})
    with pytest.raises(NotFound, match=r'^secrets "secret-exp" not found$'):
        await run(fake, "download", "exp", f"--output={tmp_path / 'o'}")


async def test_the_wait_times_out(fake: FakeClient, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing(fake, {"phase": "Pending"})
    with pytest.raises(VirtctlError, match=r"^context deadline exceeded$"):
        await run(fake, "download", "exp", f"--output={tmp_path / 'o'}", "--readiness-timeout=50ms")
    assert capsys.readouterr().out.startswith("waiting for VM Export exp status to be ready...\n")


@pytest.mark.parametrize(
    ("extra", "accept", "body"),
    [((), "application/yaml", VM_YAML), (("--manifest-output-format=json",), "application/json", VM_JSON)],
)
async def test_manifests(
    fake: FakeClient,
    link: Link,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    accept: str,
    body: bytes,
) -> None:
    existing(fake, link.status(volumes=False))
    await run(fake, "download", "exp", "--manifest", *extra)
    assert [(p.rsplit("/", 1)[1], h["Accept"]) for p, h in link.requests] == [("all", accept)]
    assert capsys.readouterr().out == body.decode()
    await run(fake, "download", "exp", "--manifest", "--include-secret", *extra)
    assert [p.rsplit("/", 1)[1] for p, _ in link.requests[1:]] == ["all", "secret"]
    assert capsys.readouterr().out == body.decode() + HEADER_SECRET.decode()
    # A manifest download never deletes the export, not even one it made.
    assert fake.deleted == []


async def test_a_manifest_download_creates_and_keeps_the_export_and_a_refusal_is_retried(
    fake: FakeClient, link: Link, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "vm.json"
    await run(fake, "download", "exp", "--vm=vm", "--manifest", "--manifest-output-format=json", f"--output={out}")
    assert json.loads(out.read_bytes()) == json.loads(VM_JSON)
    assert capsys.readouterr().out == "VirtualMachineExport 'ns/exp' created successfully\n"
    assert ("virtualmachineexports", "exp") in fake.objects
    link.answers = [400]
    with pytest.raises(VirtctlError, match=r"^retry count reached, exiting unsuccessfully$"):
        await run(fake, "download", "exp", "--manifest")
    assert capsys.readouterr().err == "Bad status: 400 Bad Request\n"
