"""`virtctl memory-dump` without a server: its arguments, the claim's size and manifest, and each action against a
fake client that answers as the API server, virt-api and virt-controller would, the download from a local export
link."""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from aiohttp import web

from pykubevirt.api.quantity import Quantity, QuantityFormat, parse_quantity
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.resources import ResourceRef
from pykubevirt.virtctl import memory_dump as md
from pykubevirt.virtctl import vmexport, vmexport_args
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, main, normalise_bools
from tests.support.fake_client_reads import GetOrNone

SUB = "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm"


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalise_bools(argv))


# ------------------------------------------------------------------------------------------------------ arguments


def test_positionals_may_stand_among_the_flags() -> None:
    args = parse("memory-dump", "get", "--create-claim", "vm", "--claim-name=dump", "-n", "ns")
    assert (args.positionals, args.create_claim, args.claim_name, args.namespace) == (["get", "vm"], True, "dump", "ns")
    args = parse("memory-dump", "--port-forward=true", "--create-claim=false", "download", "vm", "--output", "f.gz")
    assert (args.positionals, args.port_forward, args.create_claim, args.output) == (
        ["download", "vm"],
        True,
        False,
        "f.gz",
    )
    defaults = parse("memory-dump", "remove", "vm")
    assert (defaults.local_port, defaults.format, defaults.storage_class, defaults.access_mode) == ("0", "", "", "")


@pytest.mark.parametrize("positionals", [[], ["get"], ["get", "vm", "extra"]])
def test_exactly_two_arguments_before_any_cluster_access(
    positionals: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The kubeconfig does not exist: the count is checked first, as cobra checks Args before RunE.
    assert main(["memory-dump", *positionals, "--kubeconfig", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == f"accepts 2 arg(s), received {len(positionals)}\n"


def test_an_unknown_flag_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["memory-dump", "get", "vm", "--bogus", "x"]) == 1
    assert capsys.readouterr().err == "unknown flag: --bogus\n"


# ------------------------------------------------------------------------------------------------ size and claim


def test_expected_dump_size_is_memory_request_plus_100Mi_in_its_format() -> None:
    vmi = {"spec": {"domain": {"resources": {"requests": {"memory": "1Gi"}}}}}
    assert str(md.expected_dump_size(vmi)) == "1124Mi"
    decimal = {"spec": {"domain": {"resources": {"requests": {"memory": "1G"}}}}}
    assert str(md.expected_dump_size(decimal)) == "1104857600"
    # No request: ResourceList.Memory() is a zero BinarySI quantity.
    assert str(md.expected_dump_size({"spec": {"domain": {}}})) == "100Mi"


@pytest.mark.parametrize(
    ("size", "overhead", "expected"),
    [
        ("1124Mi", "0.055", "1186Mi"),  # 1178599424 × 1.055 = 1185.8 MiB
        ("228Mi", "0.055", "241Mi"),
        ("100Mi", "0", "100Mi"),
        ("1Ki", "0.055", "1Mi"),  # at least one MiB
        ("1104857600", "0.055", "1166016512"),  # DecimalSI stays bytes
        ("1Gi", "0.1", "1127Mi"),
    ],
)
def test_size_with_filesystem_overhead_aligned_to_a_mib(size: str, overhead: str, expected: str) -> None:
    assert str(md.size_with_overhead(parse_quantity(size), overhead)) == expected


def test_an_unparsable_overhead() -> None:
    with pytest.raises(VirtctlError, match=r"^failed to parse filesystem overhead as float: "):
        md.size_with_overhead(Quantity(1, QuantityFormat.BINARY_SI), "lots")


def test_filesystem_overhead_from_cdi_config() -> None:
    config = {"status": {"filesystemOverhead": {"global": "0.06", "storageClass": {"fast": "0.1"}}}}
    assert md.filesystem_overhead(config, "") == "0.06"
    assert md.filesystem_overhead(config, "fast") == "0.1"
    assert md.filesystem_overhead(config, "slow") == "0.06"
    with pytest.raises(VirtctlError, match=r"^CDI config not initialized$"):
        md.filesystem_overhead({"status": {}}, "")


def test_claim_manifest() -> None:
    claim = md.claim_manifest("dump", "ns", parse_quantity("241Mi"), "", "")
    assert claim == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "dump", "namespace": "ns", "labels": {"cdi.kubevirt.io/applyStorageProfile": "true"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "241Mi"}}},
    }
    shared = md.claim_manifest("dump", "ns", parse_quantity("1Gi"), "nfs", "ReadWriteMany")
    assert shared["spec"]["accessModes"] == ["ReadWriteMany"] and shared["spec"]["storageClassName"] == "nfs"


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "ReadOnlyMany",
            "cannot dump memory to a readonly pvc, use either ReadWriteOnce or ReadWriteMany if supported",
        ),
        ("ReadWriteOncePod", "invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported"),
        ("rwo", "invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported"),
    ],
)
def test_claim_access_modes_refused(mode: str, message: str) -> None:
    with pytest.raises(VirtctlError) as caught:
        md.claim_manifest("dump", "ns", parse_quantity("1Gi"), "", mode)
    assert str(caught.value) == message


def test_messages() -> None:
    assert md.READ_ONLY_CLAIM == (
        "cannot dump memory to a readonly pvc, use either ReadWriteOnce or ReadWriteMany if supported"
    )
    assert md.INVALID_ACCESS_MODE == "invalid access mode, use either ReadWriteOnce or ReadWriteMany if supported"
    assert md.ALREADY_ASSOCIATED == (
        "please remove current memory dump association before creating a new claim for a new memory dump"
    )
    assert md.already_exists("ns", "x") == (
        "PVC ns/x already exists, check if it should be created if not remove create flag"
    )
    assert md.claim_created("ns", "x") == "PVC ns/x created"
    assert md.dump_submitted("vm") == "Successfully submitted memory dump request of VM vm"
    assert md.removal_submitted("vm") == "Successfully submitted remove memory dump association of VM vm"
    assert md.dump_failed("vm", "disk full") == "memory dump of VM vm failed: disk full"
    assert md.dump_failed("vm", "") == "memory dump of VM vm failed"
    assert md.export_name("vm", "x") == "export-vm-x"


# ------------------------------------------------------------------------------------------------- against a fake


def _not_found(what: str, name: str) -> NotFound:
    return NotFound({"code": 404, "reason": "NotFound", "message": f'{what} "{name}" not found'}, 404)


class FakeClient(GetOrNone):
    """get/create/delete/request as KubeClient's, over a dict of objects; PUTs are recorded and answered by
    `put_error`. An export (and its token Secret) is kept once created, and read Ready with `export_status`."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}
        self.created: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.puts: list[tuple[str, Any]] = []
        self.put_error: ApiError | None = None
        self.vm_statuses: list[dict[str, Any]] = []
        self.export_status: dict[str, Any] = {}

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> dict[str, Any]:
        if resource.plural == "virtualmachines" and self.vm_statuses:
            status = self.vm_statuses.pop(0) if len(self.vm_statuses) > 1 else self.vm_statuses[0]
            return {"metadata": {"name": name}, "status": status}
        try:
            found = self.objects[(resource.plural, name)]
        except KeyError:
            raise _not_found(f"{resource.plural}.{resource.group or 'core'}", name) from None
        if resource.plural == "virtualmachineexports":
            return {**found, "status": self.export_status}
        return found

    async def create(self, resource: ResourceRef, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.created.append(body)
        if resource.plural in ("virtualmachineexports", "secrets"):
            body = {**body, "metadata": {**body["metadata"], "uid": "uid-1"}}
            self.objects[(resource.plural, body["metadata"]["name"])] = body
        return body

    async def delete(self, resource: ResourceRef, name: str, namespace: str | None = None) -> Any:
        if self.objects.pop((resource.plural, name), None) is None:
            raise _not_found(resource.plural, name)
        self.deleted.append(name)
        return {}

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert method == "PUT"
        self.puts.append((path, body))
        if self.put_error:
            raise self.put_error
        return None


def kube(fake: FakeClient) -> KubeClient:
    return cast(KubeClient, fake)


def running(memory: str = "1Gi") -> FakeClient:
    vmi = {"spec": {"domain": {"resources": {"requests": {"memory": memory}}}}}
    return FakeClient({("virtualmachines", "vm"): {"status": {}}, ("virtualmachineinstances", "vm"): vmi})


async def test_get_creating_the_claim(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    await md.run(kube(client), "ns", parse("memory-dump", "get", "vm", "--claim-name=dump", "--create-claim"))
    assert capsys.readouterr().out == (
        "Using default 5.5% filesystem overhead for pvc size\n"
        "PVC ns/dump created\n"
        "Successfully submitted memory dump request of VM vm\n"
    )
    assert client.created[0]["spec"]["resources"]["requests"]["storage"] == "1186Mi"
    assert client.puts == [(f"{SUB}/memorydump", {"claimName": "dump"})]


async def test_get_with_a_cdi_config_uses_its_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    config = {"status": {"filesystemOverhead": {"global": "0", "storageClass": {"fast": "0.1"}}}}
    client.objects[("cdiconfigs", "config")] = config
    args = parse("memory-dump", "get", "vm", "--claim-name=dump", "--create-claim", "--storage-class=fast")
    await md.run(kube(client), "ns", args)
    assert "5.5%" not in capsys.readouterr().out
    # 1124Mi × 1.1 = 1236.4 MiB
    assert client.created[0]["spec"]["resources"]["requests"]["storage"] == "1237Mi"
    assert client.created[0]["spec"]["storageClassName"] == "fast"


async def test_get_refusals_before_any_claim_is_made() -> None:
    client = running()
    with pytest.raises(VirtctlError, match=r"^missing claim name$"):
        await md.run(kube(client), "ns", parse("memory-dump", "get", "vm", "--create-claim"))
    client.objects[("persistentvolumeclaims", "dump")] = {}
    args = parse("memory-dump", "get", "vm", "--claim-name=dump", "--create-claim")
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", args)
    assert str(caught.value) == md.already_exists("ns", "dump")
    client.objects[("virtualmachines", "vm")] = {"status": {"memoryDumpRequest": {"claimName": "old"}}}
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", args)
    assert str(caught.value) == md.ALREADY_ASSOCIATED
    assert client.created == [] and client.puts == []


async def test_get_with_a_bad_access_mode_makes_no_claim(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    args = parse("memory-dump", "get", "vm", "--claim-name=d", "--create-claim", "--access-mode=ReadOnlyMany")
    with pytest.raises(VirtctlError, match=r"^cannot dump memory to a readonly pvc"):
        await md.run(kube(client), "ns", args)
    assert client.created == [] and client.puts == []


async def test_get_without_a_claim_name_lets_virt_api_reuse_the_associated_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = running()
    await md.run(kube(client), "ns", parse("memory-dump", "get", "vm"))
    assert client.puts == [(f"{SUB}/memorydump", {"claimName": ""})]
    client.put_error = Conflict({"code": 409, "reason": "Conflict", "message": "VMI is not running"}, 409)
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", parse("memory-dump", "get", "vm"))
    assert str(caught.value) == "error dumping vm memory, VMI is not running"


async def test_remove(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    await md.run(kube(client), "ns", parse("memory-dump", "remove", "vm"))
    assert client.puts == [(f"{SUB}/removememorydump", {})]
    assert capsys.readouterr().out == "Successfully submitted remove memory dump association of VM vm\n"
    client.put_error = _not_found("virtualmachines.kubevirt.io", "vm")
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", parse("memory-dump", "remove", "vm"))
    assert str(caught.value) == 'error removing memory dump association, virtualmachines.kubevirt.io "vm" not found'


async def test_an_unknown_action() -> None:
    with pytest.raises(VirtctlError, match=r"^invalid action type dump$"):
        await md.run(kube(running()), "ns", parse("memory-dump", "dump", "vm"))


async def test_download_needs_an_output_file() -> None:
    with pytest.raises(VirtctlError, match=r"^missing outputFile to download the memory dump$"):
        await md.run(kube(running()), "ns", parse("memory-dump", "download", "vm"))


DONE = {"claimName": "dump", "phase": "Completed", "fileName": "vm-dump-1.memory.dump"}
DUMP = b"memory " * 5000
EXPORT_LINES = (
    "VirtualMachineExport 'ns/export-vm-dump' created successfully\n"
    "Download finished successfully\n"
    "VirtualMachineExport 'ns/export-vm-dump' deleted successfully\n"
)


def _tar_gz() -> bytes:
    """The claim's directory as the export server's tar.gz link serves it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(DONE["fileName"])
        info.size = len(DUMP)
        tar.addfile(info, io.BytesIO(DUMP))
    # mtime=0: the gzip header carries no clock, so two calls give the same bytes.
    return gzip.compress(buffer.getvalue(), mtime=0)


class ExportLink:
    """The export's external link (plain HTTP here; TLS is test_virtctl_vmexport's), checking the export token."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self.base = ""
        self.paths: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        secret = self.client.objects[("secrets", "secret-export-vm-dump")]
        if request.headers.get("x-kubevirt-export-token") != base64.b64decode(secret["data"]["token"]).decode():
            return web.Response(status=401)
        return web.Response(body=_tar_gz())

    def status(self) -> dict[str, Any]:
        formats = [
            {"format": "dir", "url": f"{self.base}/volumes/dump/dir/"},
            {"format": "tar.gz", "url": f"{self.base}/volumes/dump/disk.tar.gz"},
        ]
        volumes = [{"name": "dump", "formats": formats}]
        external = {"cert": "", "volumes": volumes}
        return {"phase": "Ready", "tokenSecretRef": "secret-export-vm-dump", "links": {"external": external}}


@pytest.fixture
async def exported() -> AsyncIterator[tuple[FakeClient, ExportLink]]:
    client = running()
    link = ExportLink(client)
    app = web.Application()
    app.router.add_get("/{tail:.*}", link.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    link.base = f"http://127.0.0.1:{port}/api/export.kubevirt.io/v1/namespaces/ns/virtualmachineexports/export-vm-dump"
    client.export_status = link.status()
    yield client, link
    await runner.cleanup()


async def test_download_waits_for_the_dump_then_downloads_it_through_an_export(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exported: tuple[FakeClient, ExportLink],
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(md, "WAIT_INTERVAL", 0.0)
    client, link = exported
    in_progress = {"claimName": "dump", "phase": "InProgress"}
    client.vm_statuses = [{}, {"memoryDumpRequest": in_progress}, {"memoryDumpRequest": DONE}]
    out = tmp_path / "dump.tar.gz"
    await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", f"--output={out}"))
    assert capsys.readouterr().out == (
        "Waiting for memorydump dump to complete, current phase: InProgress...\n"
        "Memory dump completed successfully\n" + EXPORT_LINES
    )
    # The tar.gz link, saved as it came.
    assert out.read_bytes() == _tar_gz() and link.paths[-1].endswith("/volumes/dump/disk.tar.gz")
    export, secret = client.created
    assert export["spec"] == {
        "tokenSecretRef": "secret-export-vm-dump",
        "source": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "dump"},
    }
    assert secret["metadata"]["ownerReferences"][0]["name"] == "export-vm-dump"
    assert client.deleted == ["export-vm-dump"]


async def test_download_raw_gunzips_the_archive(exported: tuple[FakeClient, ExportLink], tmp_path: Path) -> None:
    client, _ = exported
    client.vm_statuses = [{"memoryDumpRequest": DONE}]
    out = tmp_path / "dump.tar"
    await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", f"--output={out}", "--format=raw"))
    with tarfile.open(out) as tar:
        member = tar.extractfile(DONE["fileName"])
        assert member is not None and member.read() == DUMP


async def test_get_with_output_goes_on_to_download(
    capsys: pytest.CaptureFixture[str], exported: tuple[FakeClient, ExportLink], tmp_path: Path
) -> None:
    client, _ = exported
    client.vm_statuses = [{"memoryDumpRequest": DONE}]
    out = tmp_path / "dump.gz"
    await md.run(kube(client), "ns", parse("memory-dump", "get", "vm", "--claim-name=dump", f"--output={out}"))
    assert capsys.readouterr().out == (
        "Successfully submitted memory dump request of VM vm\nMemory dump completed successfully\n" + EXPORT_LINES
    )
    assert out.read_bytes() == _tar_gz()


async def test_a_refused_download_is_retried_twice(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exported: tuple[FakeClient, ExportLink],
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(vmexport, "RETRY_SECONDS", 0.0)
    client, link = exported
    client.vm_statuses = [{"memoryDumpRequest": DONE}]
    client.export_status = {**link.status(), "tokenSecretRef": "elsewhere"}
    client.objects[("secrets", "elsewhere")] = {"data": {"token": base64.b64encode(b"stale").decode()}}
    with pytest.raises(VirtctlError, match=r"^retry count reached, exiting unsuccessfully$"):
        await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", f"--output={tmp_path / 'o'}"))
    assert capsys.readouterr().out.count("Bad status: 401 Unauthorized\nVirtualMachineExport") == 3
    assert len(link.paths) == 3


async def test_port_forward_is_refused_before_the_dump_or_the_wait(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    client = running()
    for action in ("get", "download"):
        args = parse("memory-dump", action, "vm", "--claim-name=d", "--output=o", "--port-forward")
        with pytest.raises(VirtctlError) as caught:
            await md.run(kube(client), "ns", args)
        assert str(caught.value) == vmexport_args.PORT_FORWARD_NOT_SUPPORTED
    assert client.puts == [] and capsys.readouterr().out == ""


async def test_an_output_that_cannot_be_made(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    client = running()
    client.vm_statuses = [{"memoryDumpRequest": DONE}]
    missing = tmp_path / "no" / "dump"
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", f"--output={missing}"))
    assert str(caught.value) == f"open {missing}: no such file or directory"
    assert client.created == []


async def test_a_failed_dump_ends_the_wait(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    failed = {"claimName": "dump", "phase": "Failed", "message": "target file exists"}
    client.vm_statuses = [{"memoryDumpRequest": failed}]
    with pytest.raises(VirtctlError) as caught:
        await md.wait_for_dump(kube(client), "ns", "vm", interval=0)
    assert str(caught.value) == "memory dump of VM vm failed: target file exists"


async def test_the_wait_times_out(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    client.vm_statuses = [{"memoryDumpRequest": {"claimName": "dump", "phase": "Associating"}}]
    with pytest.raises(VirtctlError, match=r"^timed out waiting for the condition$"):
        await md.wait_for_dump(kube(client), "ns", "vm", interval=0.01, wait_seconds=0.05)
    assert "current phase: Associating..." in capsys.readouterr().out


async def test_a_completed_request_without_a_claim(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    client.vm_statuses = [{"memoryDumpRequest": {"phase": "Completed"}}]
    with pytest.raises(VirtctlError, match=r"^claim name not on vm memory dump request$"):
        await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", "--output=o"))
