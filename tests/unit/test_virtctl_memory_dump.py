"""`virtctl memory-dump` without a server: its arguments, the claim's size and manifest, and each action against a
fake client that answers as the API server and virt-api would."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, cast

import pytest

from pykubevirt.api.quantity import Quantity, QuantityFormat, parse_quantity
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, Conflict, NotFound
from pykubevirt.client.resources import ResourceRef
from pykubevirt.virtctl import memory_dump as md
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, main, normalise_bools

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
    assert md.no_download("ns", "x", "vm-x-20240101.memory.dump", export_served=False) == (
        "cannot download the memory dump: it needs VirtualMachineExport (export.kubevirt.io), which this cluster "
        "does not serve; the dump is in claim ns/x as file vm-x-20240101.memory.dump"
    )
    assert md.no_download("ns", "x", "", export_served=True) == (
        "cannot download the memory dump: this virtctl does not implement VirtualMachineExport; "
        "the dump is in claim ns/x"
    )


# ------------------------------------------------------------------------------------------------- against a fake


def _not_found(what: str, name: str) -> NotFound:
    return NotFound({"code": 404, "reason": "NotFound", "message": f'{what} "{name}" not found'}, 404)


class FakeClient:
    """get/create/request as KubeClient's, over a dict of objects; PUTs are recorded and answered by `put_error`."""

    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.objects = objects or {}
        self.created: list[dict[str, Any]] = []
        self.puts: list[tuple[str, Any]] = []
        self.put_error: ApiError | None = None
        self.vm_statuses: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []

    async def get(self, resource: ResourceRef, name: str, namespace: str | None = None) -> dict[str, Any]:
        if resource.plural == "virtualmachines" and self.vm_statuses:
            status = self.vm_statuses.pop(0) if len(self.vm_statuses) > 1 else self.vm_statuses[0]
            return {"metadata": {"name": name}, "status": status}
        try:
            return self.objects[(resource.plural, name)]
        except KeyError:
            raise _not_found(f"{resource.plural}.{resource.group or 'core'}", name) from None

    async def create(self, resource: ResourceRef, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.created.append(body)
        return body

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        if method == "PUT":
            self.puts.append((path, body))
            if self.put_error:
                raise self.put_error
            return None
        if path == "/apis":
            return {"groups": self.groups}
        return {"resources": [{"name": "virtualmachineexports"}]}


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


async def test_download_waits_for_the_dump_then_says_where_it_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(md, "WAIT_INTERVAL", 0.0)
    client = running()
    in_progress = {"claimName": "dump", "phase": "InProgress"}
    client.vm_statuses = [{}, {"memoryDumpRequest": in_progress}, {"memoryDumpRequest": DONE}]
    with pytest.raises(VirtctlError) as caught:
        await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", "--output=out.gz"))
    assert str(caught.value) == md.no_download("ns", "dump", "vm-dump-1.memory.dump", export_served=False)
    assert capsys.readouterr().out == (
        "Waiting for memorydump dump to complete, current phase: InProgress...\nMemory dump completed successfully\n"
    )
    # A cluster serving VirtualMachineExport: still no download here, but for another reason.
    client.groups = [{"name": "export.kubevirt.io", "versions": [{"groupVersion": "export.kubevirt.io/v1beta1"}]}]
    with pytest.raises(VirtctlError, match=r"this virtctl does not implement VirtualMachineExport"):
        await md.run(kube(client), "ns", parse("memory-dump", "download", "vm", "--output=out.gz"))


async def test_get_with_output_goes_on_to_download(capsys: pytest.CaptureFixture[str]) -> None:
    client = running()
    client.vm_statuses = [{"memoryDumpRequest": DONE}]
    with pytest.raises(VirtctlError, match=r"^cannot download the memory dump: it needs VirtualMachineExport"):
        await md.run(kube(client), "ns", parse("memory-dump", "get", "vm", "--claim-name=dump", "--output=o"))
    assert capsys.readouterr().out == (
        "Successfully submitted memory dump request of VM vm\nMemory dump completed successfully\n"
    )


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
