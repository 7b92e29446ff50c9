"""`virtctl image-upload`'s flags and checks (KubeVirt's parseArgs and validateDefaultInstancetypeArgs, in order) and
the claim, DataVolume and DataSource it creates, without a cluster."""

from __future__ import annotations

import argparse

import pytest

from pykubevirt.virtctl import image_upload_args as ua
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser, main, normalise_bools


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(normalise_bools(["image-upload", *argv]))


def options(*argv: str) -> ua.UploadOptions:
    return ua.parse_options(parse(*argv))


# ------------------------------------------------------------------------------------------------------ arguments


def test_defaults_and_positionals_among_the_flags() -> None:
    args = parse("dv", "--size=1Gi", "disk", "--image-path", "/img", "--insecure=true", "--block-volume=false")
    assert args.positionals == ["dv", "disk"]
    assert (args.size, args.image_path, args.insecure, args.block_volume) == ("1Gi", "/img", True, False)
    assert (args.wait_secs, args.retry, args.datasource, args.deprecated_used) == ("300", "5", False, [])
    assert ua.check_flag_values(args) == (300, 5)


def test_options_after_parse_args() -> None:
    dv = options("DV", "disk", "--image-path=/img", "--size=2Gi", "--volume-mode=filesystem", "--force-bind")
    assert (dv.name, dv.create_pvc, dv.size, dv.image_path, dv.archive_upload) == ("disk", False, "2Gi", "/img", False)
    assert (dv.volume_mode, dv.force_bind) == ("filesystem", True)
    pvc = options("pvc", "disk", "--archive-path=/a.tar", "--pvc-size=3Gi", "--size=3Gi")
    assert (pvc.create_pvc, pvc.size, pvc.image_path, pvc.archive_upload) == (True, "3Gi", "/a.tar", True)
    assert options("dv", "d", "--image-path=/i", "--block-volume").volume_mode == "block"


def test_the_deprecated_name_flag_skips_every_other_check() -> None:
    # KubeVirt returns from parseArgs at once: no path is required and --block-volume is not turned into a mode.
    opts = options("--pvc-name=old", "--block-volume", "--volume-mode=bogus")
    assert (opts.name, opts.create_pvc, opts.volume_mode, opts.image_path) == ("old", True, "bogus", "")


def test_deprecation_lines_per_use_in_order() -> None:
    args = parse("--block-volume", "--pvc-size=1Gi", "--pvc-name=x", "--pvc-size=2Gi")
    assert ua.deprecation_lines(args) == [
        "Flag --block-volume has been deprecated, specify volume mode (filesystem/block) with --volume-mode instead.",
        "Flag --pvc-size has been deprecated, use --size instead.",
        "Flag --pvc-name has been deprecated, specify the name as the second argument instead.",
        "Flag --pvc-size has been deprecated, use --size instead.",
    ]
    assert args.pvc_size == "2Gi" and args.block_volume is True


def test_deprecated_flags_are_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image-upload", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--size" in text and "--datasource" in text and "--default-preference-kind" in text
    assert "--pvc-size" not in text and "--pvc-name" not in text and "--block-volume" not in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["dv", "a", "b"], "accepts at most 2 arg(s), received 3"),
        (["--size=1Gi", "--pvc-size=2Gi"], "--pvc-size and --size can not be specified at the same time"),
        (["--pvc-name=x", "dv"], "cannot use --pvc-name and args"),
        (["--volume-mode=filesystem", "--block-volume"], "incompatible --volume-mode 'filesystem' and --block-volume"),
        (["--volume-mode=Block"], "Invalid volume mode 'Block'. Valid values are 'block' and 'filesystem'."),
        (["dv", "x"], "either image-path or archive-path must be provided"),
        (["--image-path=i", "--archive-path=a"], "cannot handle both image-path and archive-path, provide only one"),
        (["--archive-path=a", "--volume-mode=block"], "In archive upload the volume mode should always be filesystem"),
        (["--archive-path=a", "--block-volume"], "In archive upload the volume mode should always be filesystem"),
        (["--image-path=i", "dv"], "expecting two args"),
        (["--image-path=i"], "expecting two args"),
        (["--image-path=i", "vm", "x"], "invalid resource type vm"),
        (
            ["--image-path=i", "dv", "x", "--default-instancetype-kind=k"],
            "--default-instancetype must be provided with --default-instancetype-kind",
        ),
        (
            ["--image-path=i", "dv", "x", "--default-preference-kind=k"],
            "--default-preference must be provided with --default-preference-kind",
        ),
        (
            ["--image-path=i", "dv", "x", "--default-preference=p", "--no-create"],
            "--default-instancetype and --default-preference cannot be used with --no-create",
        ),
        (
            ["--pvc-name=x", "--default-instancetype-kind=k"],
            "--default-instancetype must be provided with --default-instancetype-kind",
        ),
    ],
)
def test_checks_and_texts_in_kubevirts_order(argv: list[str], message: str) -> None:
    with pytest.raises(VirtctlError) as caught:
        options(*argv)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("value", "number"), [("0", 0), ("42", 42), ("0x10", 16), ("017", 15), ("0o17", 15), ("0b11", 3), ("1_000", 1000)]
)
def test_unsigned_flags_as_strconv(value: str, number: int) -> None:
    assert ua.parse_uint("--retry", value) == number


@pytest.mark.parametrize(
    ("value", "cause"),
    [
        *[(bad, "invalid syntax") for bad in ("-1", "abc", "", "08", "+3", " 1", "0x")],
        ("18446744073709551616", "value out of range"),
    ],
)
def test_unsigned_flag_errors_as_pflag(value: str, cause: str) -> None:
    with pytest.raises(VirtctlError) as caught:
        ua.check_flag_values(parse(f"--wait-secs={value}"))
    assert str(caught.value) == (
        f'invalid argument "{value}" for "--wait-secs" flag: strconv.ParseUint: parsing "{value}": {cause}'
    )


# ------------------------------------------------------------------------------------------------------ manifests


def test_pvc_manifest_defaults() -> None:
    opts = options("pvc", "disk", "--image-path=/i", "--size=10Gi")
    assert ua.pvc_manifest(opts, "ns") == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "disk",
            "namespace": "ns",
            "annotations": {
                "cdi.kubevirt.io/storage.upload.target": "",
                "cdi.kubevirt.io/storage.contentType": "kubevirt",
            },
            "labels": {"cdi.kubevirt.io/applyStorageProfile": "true"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
    }


def test_pvc_manifest_with_every_flag() -> None:
    opts = options(
        *("pvc", "disk", "--archive-path=/a.tar", "--size=500M", "--force-bind", "--storage-class=fast"),
        *("--access-mode=ReadWriteMany", "--volume-mode=filesystem", "--default-instancetype=u1.small"),
        *("--default-instancetype-kind=VirtualMachineClusterInstancetype", "--default-preference=fedora"),
        "--default-preference-kind=VirtualMachinePreference",
    )
    claim = ua.pvc_manifest(opts, "ns")
    assert claim["metadata"]["annotations"] == {
        "cdi.kubevirt.io/storage.upload.target": "",
        "cdi.kubevirt.io/storage.contentType": "archive",
        "cdi.kubevirt.io/storage.bind.immediate.requested": "",
    }
    assert claim["metadata"]["labels"] == {
        "cdi.kubevirt.io/applyStorageProfile": "true",
        "instancetype.kubevirt.io/default-instancetype": "u1.small",
        "instancetype.kubevirt.io/default-instancetype-kind": "VirtualMachineClusterInstancetype",
        "instancetype.kubevirt.io/default-preference": "fedora",
        "instancetype.kubevirt.io/default-preference-kind": "VirtualMachinePreference",
    }
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": "500M"}},
        "storageClassName": "fast",
        "volumeMode": "Filesystem",
    }
    block = ua.pvc_manifest(options("pvc", "d", "--image-path=/i", "--size=1Gi", "--block-volume"), "ns")
    assert block["spec"]["volumeMode"] == "Block"


def test_data_volume_manifest() -> None:
    opts = options("dv", "disk", "--image-path=/i", "--size=1Gi")
    assert ua.data_volume_manifest(opts, "ns", ua.storage_spec(opts)) == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": "disk", "namespace": "ns"},
        "spec": {
            "source": {"upload": {}},
            "contentType": "kubevirt",
            "storage": {"resources": {"requests": {"storage": "1Gi"}}},
        },
    }
    full = options(
        *("dv", "disk", "--archive-path=/a.tar", "--size=1Gi", "--force-bind", "--storage-class=fast"),
        *("--access-mode=ReadWriteOnce", "--volume-mode=filesystem", "--default-preference=fedora"),
    )
    dv = ua.data_volume_manifest(full, "ns", ua.storage_spec(full))
    assert dv["metadata"] == {
        "name": "disk",
        "namespace": "ns",
        "annotations": {"cdi.kubevirt.io/storage.bind.immediate.requested": ""},
        "labels": {"instancetype.kubevirt.io/default-preference": "fedora"},
    }
    assert dv["spec"]["contentType"] == "archive"
    assert dv["spec"]["storage"] == {
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "fast",
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
    }


def test_size_and_access_mode_refusals() -> None:
    bad = options("dv", "d", "--image-path=/i", "--size=ten")
    with pytest.raises(VirtctlError) as caught:
        ua.storage_spec(bad)
    assert str(caught.value) == (
        "validation failed for size=ten: "
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    read_only = options("pvc", "d", "--image-path=/i", "--size=1Gi", "--access-mode=ReadOnlyMany")
    with pytest.raises(VirtctlError) as refused:
        ua.check_access_mode(read_only)
    assert str(refused.value) == (
        "cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany if supported"
    )
    with pytest.raises(VirtctlError, match=r"^cannot upload to a readonly volume"):
        ua.storage_spec(read_only)


def test_data_source_manifest_and_patch() -> None:
    opts = options("dv", "disk", "--image-path=/i", "--size=1Gi", "--default-instancetype=u1.small")
    assert ua.data_source_manifest(opts, "ns") == {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataSource",
        "metadata": {
            "name": "disk",
            "namespace": "ns",
            "labels": {"instancetype.kubevirt.io/default-instancetype": "u1.small"},
        },
        "spec": {"source": {"pvc": {"name": "disk", "namespace": "ns"}}},
    }
    existing = {"metadata": {"name": "disk", "labels": {"team": "a"}}}
    assert ua.data_source_patch(opts, "ns", existing) == [
        {
            "op": "replace",
            "path": "/metadata/labels",
            "value": {"team": "a", "instancetype.kubevirt.io/default-instancetype": "u1.small"},
        },
        {"op": "replace", "path": "/spec/source/pvc", "value": {"name": "disk", "namespace": "ns"}},
    ]
    plain = ua.data_source_manifest(options("pvc", "disk", "--image-path=/i"), "ns")
    assert "labels" not in plain["metadata"]
