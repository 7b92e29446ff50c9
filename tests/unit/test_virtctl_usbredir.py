"""`virtctl usbredir`'s arguments, as KubeVirt's: a device and a VMI, or with --no-launch the VMI alone."""

from __future__ import annotations

import pytest

from pykubevirt.virtctl import usbredir
from pykubevirt.virtctl.client import VirtctlError
from pykubevirt.virtctl.main import build_parser


def test_no_launch_needs_only_the_vmi() -> None:
    args = build_parser().parse_args(["usbredir", "testvmi", "--no-launch"])
    assert usbredir.device_and_vmi(args.usb_args, args.no_launch) == ("", "testvmi")


def test_a_device_and_a_vmi_need_the_local_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usbredir.shutil, "which", lambda name: f"/usr/bin/{name}")
    args = build_parser().parse_args(["usbredir", "0951:1666", "testvmi"])
    assert usbredir.device_and_vmi(args.usb_args, args.no_launch) == ("0951:1666", "testvmi")
    monkeypatch.setattr(usbredir.shutil, "which", lambda name: None)
    with pytest.raises(VirtctlError) as missing:
        usbredir.device_and_vmi(args.usb_args, args.no_launch)
    assert str(missing.value) == (
        'Error on finding usbredirect in $PATH: exec: "usbredirect": executable file not found in $PATH'
    )


@pytest.mark.parametrize(
    ("words", "message"),
    [(["testvmi"], "Missing argument"), (["a", "b", "c"], "accepts between 1 and 2 arg(s), received 3")],
)
def test_wrong_arguments(words: list[str], message: str) -> None:
    with pytest.raises(VirtctlError) as refused:
        usbredir.device_and_vmi(words, False)
    assert str(refused.value) == message
