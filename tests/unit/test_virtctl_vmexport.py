"""`virtctl vmexport`: its flag checks and texts, and the link it picks from an export's status (create, delete and
download are in test_virtctl_vmexport_download.py)."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.virtctl import vmexport as vx
from pykubevirt.virtctl import vmexport_args as va
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, main, normalise_bools


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalise_bools(["vmexport", *argv]))


def checked(*argv: str) -> va.VMExportInfo:
    return va.check_args(parse(*argv))


def refusal(*argv: str) -> str:
    with pytest.raises(VirtctlError) as caught:
        checked(*argv)
    return str(caught.value)


# ------------------------------------------------------------------------------------------------------ arguments


INCOMPATIBLE = "the '{}' flag is incompatible with '{}'"
REQUIRED_KIND = (
    "need to specify export kind when attempting to create a VirtualMachineExport [--pvc|--vm|--snapshot|--vmtemplate]"
)
BINARY = (
    "warning: Binary output can mess up your terminal. Use '--output -' to output into stdout anyway or consider "
    "'--output <FILE>' to save to a file"
)
NOT_VALID = "{} is not a valid value, acceptable values are {}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("", "accepts 2 arg(s), received 0"),
        ("create --pvc=test", "accepts 2 arg(s), received 1"),
        ("create delete test", "accepts 2 arg(s), received 3"),
        ("download delete --manifest test", "accepts 2 arg(s), received 3"),
        (
            "create x --pvc=test --vm=test2 --snapshot=test3",
            "if any flags in the group [vm snapshot pvc vmtemplate] are set none of the others can be; "
            "[pvc snapshot vm] were all set",
        ),
        (
            "download x --delete-vme --keep-vme --vm=a --pvc=b",
            "if any flags in the group [keep-vme delete-vme] are set none of the others can be; "
            "[delete-vme keep-vme] were all set",
        ),
        ("create x --vm=", REQUIRED_KIND),
        ("export x", "invalid function 'export'"),
        ("create x", REQUIRED_KIND),
        ("create x --pvc=test --insecure", INCOMPATIBLE.format("--insecure", "create")),
        ("create x --pvc=p --output=o --insecure", INCOMPATIBLE.format("--output", "create")),
        ("create x --pvc=p --local-port=00", INCOMPATIBLE.format("--local-port", "create")),
        ("create x --pvc=p --retry=1", INCOMPATIBLE.format("--retry", "create")),
        ("delete x --pvc=test", "should not specify export kind"),
        ("delete x --vmtemplate=test", "should not specify export kind"),
        ("delete x --insecure", INCOMPATIBLE.format("--insecure", "delete")),
        ("delete x --readiness-timeout=1s", INCOMPATIBLE.format("--readiness-timeout", "delete")),
        ("delete x --labels=a=b", INCOMPATIBLE.format("--labels", "delete")),
        ("download x --manifest --pvc=test", INCOMPATIBLE.format("--pvc", "--manifest")),
        ("download x --manifest --vm=test --volume=volume", INCOMPATIBLE.format("--volume", "--manifest")),
        (
            "download x --manifest --manifest-output-format=invalid",
            NOT_VALID.format("--manifest-output-format", "json/yaml"),
        ),
        ("download x --port-forward --local-port=test", NOT_VALID.format("--local-port", "valid port numbers")),
        ("download x --port-forward --local-port=65536", NOT_VALID.format("--local-port", "valid port numbers")),
        ("download x --format=test", NOT_VALID.format("--format", "gzip/raw/oci")),
        ("download x --format=oci --volume=vol", INCOMPATIBLE.format("--volume", "--format=oci")),
        ("download x --format=oci --manifest", INCOMPATIBLE.format("--manifest", "--format=oci")),
        ("download x --format=oci --pvc=mypvc", INCOMPATIBLE.format("--pvc", "--format=oci")),
        ("download x --retry=-1", NOT_VALID.format("--retry", "positive integers")),
        (
            "download x --retry=two",
            'invalid argument "two" for "--retry" flag: strconv.ParseInt: parsing "two": invalid syntax',
        ),
        (
            "two --retry=99999999999999999999",
            'invalid argument "99999999999999999999" for "--retry" flag: strconv.ParseInt: parsing '
            '"99999999999999999999": value out of range',
        ),
        ("download x", BINARY),
        ("download x --output=o --ttl=5", 'time: missing unit in duration "5"'),
        ("create x --pvc=p --ttl=5d", 'time: unknown unit "d" in duration "5d"'),
        ("create x --pvc=p --readiness-timeout=soon", 'time: invalid duration "soon"'),
    ],
)
def test_argument_checks_in_kubevirts_order_and_words(
    argv: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert refusal(*argv.split()) == message


def test_what_this_cluster_does_not_serve_is_refused_before_any_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert refusal("create", "x", "--vmtemplate=t") == va.TEMPLATE_NOT_SERVED
    assert refusal(*"download x --vmtemplate=t --output=o".split()) == va.TEMPLATE_NOT_SERVED
    assert refusal(*"download x --format=oci --output=o".split()) == va.OCI_NOT_SERVED
    assert refusal(*"download x --vm=v --port-forward --output=o".split()) == va.PORT_FORWARD_NOT_SUPPORTED
    assert refusal(*"download x --port-forward --local-port=5410 --output=o".split()) == va.PORT_FORWARD_NOT_SUPPORTED
    assert not (tmp_path / "o").exists()


def test_refusals_are_one_line_on_stderr_before_the_kubeconfig(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kubeconfig = ["--kubeconfig", str(tmp_path / "none")]
    assert main(["vmexport", "download", "x", "--port-forward", "--output", str(tmp_path / "o"), *kubeconfig]) == 1
    assert capsys.readouterr().err == va.PORT_FORWARD_NOT_SUPPORTED + "\n"
    assert main(["vmexport", "create", *kubeconfig]) == 1
    assert capsys.readouterr().err == "accepts 2 arg(s), received 1\n"
    assert main(["vmexport", "create", "x", "--vm=a", "--keep-vme=maybe"]) == 1
    assert 'invalid argument "maybe" for "--keep-vme" flag' in capsys.readouterr().err


def test_what_the_flags_make(tmp_path: Path) -> None:
    info = checked(
        *"CREATE exp --snapshot=snap --ttl=90m --labels=a=1,b=2 --labels=c=3,nokey --annotations".split(), "note=x=y"
    )
    assert (info.function, info.name, info.should_create, info.messages_to_stderr) == ("create", "exp", False, True)
    assert info.source == {"apiGroup": "snapshot.kubevirt.io", "kind": "VirtualMachineSnapshot", "name": "snap"}
    assert (info.ttl, info.labels, info.annotations) == ("1h30m0s", {"a": "1", "b": "2", "c": "3"}, {"note": "x=y"})
    assert checked("create", "e", "--pvc=p").source == {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "p"}
    assert checked("create", "e", "--vm=v", "--ttl=-1h").ttl == ""

    out = tmp_path / "disk.img.gz"
    out.write_bytes(b"old")
    download = checked("download", "exp", "--vm", "v", f"--output={out}", "--format=raw", "--readiness-timeout=10s")
    # The output is made (emptied) before anything else happens, as os.Create.
    assert out.read_bytes() == b"" and download.output is not None
    download.close()
    assert (download.should_create, download.decompress, download.readiness_timeout) == (True, True, 10.0)
    assert (download.messages_to_stderr, download.source["kind"]) == (False, "VirtualMachine")
    to_stdout = checked("download", "exp", "--output=-", "--keep-vme=true", "--retry=0x2")
    assert to_stdout.output is None and to_stdout.messages_to_stderr
    assert (to_stdout.keep_vme, to_stdout.retries) == (True, 2)
    manifest = checked("download", "exp", "--manifest", "--manifest-output-format=JSON", "--include-secret")
    assert (manifest.export_manifest, manifest.output_format, manifest.include_secret) == (True, "json", True)


def test_an_output_that_cannot_be_made(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "disk.img"
    assert refusal("download", "x", f"--output={missing}") == f"open {missing}: no such file or directory"


def test_go_durations() -> None:
    second = 10**9
    cases = [("2m", 120 * second, "2m0s"), ("1h", 3600 * second, "1h0m0s"), ("1.5s", 3 * second // 2, "1.5s")]
    cases += [("90m30s", 5430 * second, "1h30m30s"), ("250ms", second // 4, "250ms"), ("10us", 10_000, "10µs")]
    cases += [("5ns", 5, "5ns"), (".5h", 1800 * second, "30m0s")]
    for text, nanoseconds, printed in cases:
        assert (va.parse_duration(text), va.format_duration(nanoseconds)) == (nanoseconds, printed)


def test_go_ints() -> None:
    parsed = [va.parse_int("--retry", v) for v in ("3", "+3", "-3", "0x10", "010", "0b11", "1_000")]
    assert parsed == [3, 3, -3, 16, 8, 3, 1000]
    with pytest.raises(VirtctlError, match=r'parsing "08": invalid syntax$'):
        va.parse_int("--retry", "08")


# ------------------------------------------------------------------------------------------- links in the status


def _export(links: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Ready", "tokenSecretRef": "secret-exp"}
    if links is not None:
        status["links"] = links
    return {"metadata": {"name": "exp", "namespace": "ns"}, "status": status}


def _volume(name: str, *formats: tuple[str, str]) -> dict[str, Any]:
    return {"name": name, "formats": [{"format": f, "url": u} for f, u in formats]}


def _info(**fields: Any) -> va.VMExportInfo:
    return va.VMExportInfo(function="download", name="exp", namespace="ns", **fields)


def test_a_compressed_link_is_preferred_to_a_raw_one() -> None:
    volume = _volume("disk", ("raw", "raw1"), ("raw", "raw2"), ("gzip", "compressed"), ("raw", "raw3"))
    assert vx.volume_url(_export({"external": {"volumes": [volume]}}), _info()) == ("compressed", "gzip")
    archive = _volume("data", ("dir", "d/"), ("tar.gz", "a.tar.gz"))
    assert vx.volume_url(_export({"external": {"volumes": [archive]}}), _info()) == ("a.tar.gz", "tar.gz")
    raw_only = _volume("disk", ("raw", "raw"))
    assert vx.volume_url(_export({"external": {"volumes": [raw_only]}}), _info()) == ("raw", "raw")


def test_the_volume_is_chosen_by_name_unless_there_is_one() -> None:
    volumes = [_volume("a", ("gzip", "a.gz")), _volume("b", ("gzip", "b.gz"))]
    export = _export({"external": {"volumes": volumes}})
    assert vx.volume_url(export, _info(volume_name="b")) == ("b.gz", "gzip")
    with pytest.raises(VirtctlError) as caught:
        vx.volume_url(export, _info())
    assert str(caught.value) == (
        "detected more than one downloadable volume in 'ns/exp' VirtualMachineExport: "
        "Select the expected volume using the --volume flag"
    )
    with pytest.raises(VirtctlError, match=r"^unable to get a valid URL from 'ns/exp' VirtualMachineExport$"):
        vx.volume_url(export, _info(volume_name="c"))
    # A single volume is taken whatever its name.
    single = _export({"external": {"volumes": [_volume("other", ("raw", "r"))]}})
    assert vx.volume_url(single, _info(volume_name="disk")) == ("r", "raw")


@pytest.mark.parametrize(
    ("links", "message"),
    [
        (None, "unable to access the volume info from 'ns/exp' VirtualMachineExport"),
        ({"external": {"volumes": []}}, "unable to access the volume info from 'ns/exp' VirtualMachineExport"),
        ({"external": {"volumes": [{"name": "disk"}]}}, "unable to get a valid URL from 'ns/exp' VirtualMachineExport"),
        (
            {"external": {"volumes": [_volume("disk", ("dir", "d/"))]}},
            "unable to get a valid URL from 'ns/exp' VirtualMachineExport",
        ),
    ],
)
def test_no_usable_volume_link(links: dict[str, Any] | None, message: str) -> None:
    with pytest.raises(VirtctlError) as caught:
        vx.volume_url(_export(links), _info())
    assert str(caught.value) == message


def test_service_url_takes_the_internal_link_with_its_host() -> None:
    links = {
        "external": {"cert": "ext", "volumes": [_volume("disk", ("gzip", "https://api:6443/x/disk.img.gz"))]},
        "internal": {"cert": "int", "volumes": [_volume("disk", ("gzip", "https://svc.ns.svc/disk.img.gz"))]},
    }
    export = _export(links)
    assert vx.volume_url(export, _info(service_url="node:30443")) == ("https://node:30443/disk.img.gz", "gzip")
    assert vx.link_cert(export, "node:30443") == "int" and vx.link_cert(export, "") == "ext"


def test_manifest_urls() -> None:
    manifests = [
        {"type": "all", "url": "https://api:6443/e/manifests/all"},
        {"type": "auth-header-secret", "url": "https://api:6443/e/manifests/secret"},
    ]
    export = _export({"external": {"manifests": manifests}, "internal": {"manifests": manifests}})
    assert vx.manifest_urls(export, _info()) == {
        "all": "https://api:6443/e/manifests/all",
        "auth-header-secret": "https://api:6443/e/manifests/secret",
    }
    assert vx.manifest_urls(export, _info(service_url="h:1"))["all"] == "https://h:1/e/manifests/all"
    with pytest.raises(VirtctlError, match=r"^unable to access the manifest info from 'ns/exp' VirtualMachineExport$"):
        vx.manifest_urls(_export({"external": {"volumes": []}}), _info())


def test_which_exports_a_download_deletes() -> None:
    assert vx.should_delete(_info(should_create=True))
    assert not vx.should_delete(_info(should_create=True, keep_vme=True))
    assert not vx.should_delete(_info())
    assert vx.should_delete(_info(delete_vme=True))
    assert not vx.should_delete(_info(should_create=True, delete_vme=True, export_manifest=True))


def test_what_create_sends() -> None:
    info = _info(source={"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"}, ttl="2m0s")
    info.labels = {"l": "1"}
    assert vx.export_manifest(info) == {
        "apiVersion": "export.kubevirt.io/v1",
        "kind": "VirtualMachineExport",
        "metadata": {"name": "exp", "namespace": "ns", "labels": {"l": "1"}},
        "spec": {
            "tokenSecretRef": "secret-exp",
            "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "vm"},
            "ttlDuration": "2m0s",
        },
    }
    secret = vx.token_secret_manifest({"metadata": {"name": "exp", "namespace": "ns", "uid": "u1"}}, "t" * 20)
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "VirtualMachineExport",
        "u1",
        True,
        False,
    )
    assert (secret["metadata"]["name"], secret["type"], secret["data"]["token"]) == (
        "secret-exp",
        "Opaque",
        "dHR0" * 6 + "dHQ=",
    )
    token = vx.new_token()
    assert len(token) == 20 and token.isalnum() and token.isascii()


def test_gunzip_reads_member_after_member_with_gos_errors() -> None:
    stream = gzip.compress(b"hello ") + gzip.compress(b"world")
    gunzip = vx.Gunzip()
    assert b"".join(gunzip.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)) == b"hello world"
    gunzip.finish()
    with pytest.raises(VirtctlError, match=r"^gzip: invalid header$"):
        vx.Gunzip().feed(b"not gzip at all")
    truncated = vx.Gunzip()
    truncated.feed(stream[:15])
    with pytest.raises(VirtctlError, match=r"^unexpected EOF$"):
        truncated.finish()
    with pytest.raises(VirtctlError, match=r"^EOF$"):
        vx.Gunzip().finish()
