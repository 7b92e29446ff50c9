"""`virtctl create clone` without a server: the manifests of KubeVirt's clone_test.go cases, its defaults and errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from pykubevirt.virtctl.main import main

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]{5}"
VM = ("VirtualMachine", "kubevirt.io")
SNAPSHOT = ("VirtualMachineSnapshot", "snapshot.kubevirt.io")


def create(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["create", "clone", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    manifest: dict[str, Any] = yaml.safe_load(out)
    return manifest


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["create", "clone", *argv]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    return err.strip()


def test_source_name_is_the_only_required_flag(capsys: pytest.CaptureFixture[str]) -> None:
    clone = create(capsys, "--source-name", "fake-name")
    assert (clone["apiVersion"], clone["kind"]) == ("clone.kubevirt.io/v1beta1", "VirtualMachineClone")
    assert re.fullmatch(f"clone-{SUFFIX}", clone["metadata"]["name"]) and "namespace" not in clone["metadata"]
    # The target stays unnamed for the create mutator to name; the empty template is Go's encoding of the struct.
    assert clone["spec"] == {
        "source": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "fake-name"},
        "target": {"apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": ""},
        "template": {},
    }
    assert clone["status"] == {}
    assert create(capsys, "--source-name", "fake-name")["metadata"]["name"] != clone["metadata"]["name"]
    assert refused(capsys) == 'required flag(s) "source-name" not set'
    assert refused(capsys, "--source-name=") == "source name must not be empty"


@pytest.mark.parametrize(
    ("source_type", "source", "target_type"),
    [
        ("vm", VM, "vm"),
        ("VM", VM, "vm"),
        ("VirtualMachine", VM, "vm"),
        ("virtualmachine", VM, "vm"),
        ("vm", VM, "VirtualMachine"),
        ("snapshot", SNAPSHOT, "vm"),
        ("VirtualMachineSnapshot", SNAPSHOT, "vm"),
        ("vmsnapshot", SNAPSHOT, "vm"),
        ("VMSnapshot", SNAPSHOT, "vm"),
    ],
)
def test_supported_types(
    capsys: pytest.CaptureFixture[str], source_type: str, source: tuple[str, str], target_type: str
) -> None:
    argv = ["--source-name", "source-name", "--target-name", "target-name"]
    spec = create(capsys, *argv, "--source-type", source_type, "--target-type", target_type)["spec"]
    assert spec["source"] == {"kind": source[0], "apiGroup": source[1], "name": "source-name"}
    assert spec["target"] == {"kind": "VirtualMachine", "apiGroup": "kubevirt.io", "name": "target-name"}


def test_unsupported_types(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("--source-name", "source-vm")
    assert refused(capsys, *base, "--target-type", "snapshot") == (
        "target type snapshot is not supported. Supported types: vm"
    )
    assert refused(capsys, *base, "--source-type", "unknown type") == (
        "source type unknown type is not supported. Supported types: vm, vmsnapshot"
    )
    assert refused(capsys, *base, "--target-type", "unknown type") == (
        "target type unknown type is not supported. Supported types: vm"
    )
    # The source's type is checked first, and the spellings are exact.
    assert refused(capsys, *base, "--source-type=Vm", "--target-type=x").startswith("source type Vm ")


def test_filters_name_namespace_and_serial(capsys: pytest.CaptureFixture[str]) -> None:
    clone = create(
        capsys,
        *("--source-name", "source-vm", "--name", "my-clone", "-n", "my-namespace"),
        *("--label-filter", "*", "--label-filter", '"!some/key"'),
        *("--annotation-filter", "*", "--annotation-filter", "!some/key"),
        *("--template-label-filter", "*", "--template-label-filter", "!a,b"),
        *("--template-annotation-filter", "x*"),
        *("--new-smbios-serial", "newSerial"),
    )
    assert clone["metadata"] == {"name": "my-clone", "namespace": "my-namespace"}
    spec = clone["spec"]
    # String arrays: each value as given, no splitting on commas.
    assert spec["labelFilters"] == ["*", '"!some/key"']
    assert spec["annotationFilters"] == ["*", "!some/key"]
    assert spec["template"] == {"labelFilters": ["*", "!a,b"], "annotationFilters": ["x*"]}
    assert spec["newSMBiosSerial"] == "newSerial"
    assert "newMacAddresses" not in spec


def test_new_mac_addresses(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--source-name", "source-vm", "--new-mac-address", "interface0:custom-mac-address0"]
    spec = create(capsys, *argv, "--new-mac-address", "interface1:custom-mac-address1")["spec"]
    assert spec["newMacAddresses"] == {"interface0": "custom-mac-address0", "interface1": "custom-mac-address1"}
    base = ("--source-name", "source-vm", "--new-mac-address")
    assert refused(capsys, *base, ":custom-mac-address") == (
        "newMacAddress parameter :custom-mac-address has empty interface name"
    )
    assert refused(capsys, *base, "interface:") == "newMacAddress parameter interface: has empty address name"
    assert refused(capsys, *base, "interf:ace:custom-mac-address") == (
        "newMacAddress parameter interf:ace:custom-mac-address is invalid: exactly one ':' is expected. "
        "For example: 'interface0:address0'"
    )


def test_the_manifest_is_go_yaml_sorted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["create", "clone", "--name=c", "--source-name=vm", "--target-name=t"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "apiVersion: clone.kubevirt.io/v1beta1",
        "kind: VirtualMachineClone",
        "metadata:",
        "  name: c",
    ]
    assert out.endswith("  template: {}\nstatus: {}\n")
