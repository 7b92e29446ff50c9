"""The kind an instancetype or preference matcher names, as admission, virt-controller and virt-api all read it."""

from __future__ import annotations

import pytest

from pykubevirt.instancetype.matcher_kind import is_namespaced, named_kind


@pytest.mark.parametrize(
    ("matcher", "kind", "named"),
    [
        ("instancetype", "", "VirtualMachineClusterInstancetype"),
        ("instancetype", "VirtualMachineInstancetype", "VirtualMachineInstancetype"),
        ("instancetype", "virtualmachineinstancetypes", "VirtualMachineInstancetype"),
        ("instancetype", "VirtualMachineClusterInstancetypes", "VirtualMachineClusterInstancetype"),
        ("preference", "", "VirtualMachineClusterPreference"),
        ("preference", "virtualmachinepreference", "VirtualMachinePreference"),
        ("preference", "VIRTUALMACHINECLUSTERPREFERENCES", "VirtualMachineClusterPreference"),
    ],
)
def test_a_matcher_kind_is_read_in_any_case_singular_or_plural(matcher: str, kind: str, named: str) -> None:
    assert named_kind(matcher, kind) == named


@pytest.mark.parametrize(
    ("matcher", "kind"),
    [
        ("instancetype", "VirtualMachinePreference"),
        ("preference", "VirtualMachineClusterInstancetype"),
        ("instancetype", "Pod"),
        ("preference", "virtualmachinepreferencess"),
    ],
)
def test_a_kind_the_matcher_cannot_name_is_none(matcher: str, kind: str) -> None:
    assert named_kind(matcher, kind) is None


def test_only_the_namespaced_kinds_live_in_the_vms_namespace() -> None:
    assert is_namespaced("VirtualMachineInstancetype") and is_namespaced("VirtualMachinePreference")
    assert not is_namespaced("VirtualMachineClusterInstancetype")
    assert not is_namespaced("VirtualMachineClusterPreference")
