"""The containerDisk's format from its first sector agrees with qemu-img's, or leaves it to qemu-img."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pykubevirt.launcher.image_format import probed_format


def qemu_img_format(path: Path) -> str:
    out = subprocess.run(
        ["qemu-img", "info", "--output=json", "--force-share", str(path)], capture_output=True, check=True
    ).stdout
    return str(json.loads(out)["format"])


@pytest.mark.parametrize("fmt", ["qcow2", "raw"])
def test_qcow2_and_raw_images_need_no_qemu_img(tmp_path: Path, fmt: str) -> None:
    image = tmp_path / "disk_0.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", fmt, str(image), "1M"], check=True)
    assert probed_format(image) == qemu_img_format(image) == fmt


@pytest.mark.parametrize("fmt", ["vmdk", "vdi", "vhdx", "vpc", "qed", "parallels"])
def test_other_formats_are_left_to_qemu_img(tmp_path: Path, fmt: str) -> None:
    image = tmp_path / "disk_0.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", fmt, str(image), "1M"], check=True)
    assert qemu_img_format(image) == fmt
    assert probed_format(image) is None


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00" * 4096, os.urandom(4096), b"\xeb\x63\x90" + bytes(509) + b"\x55\xaa"],
    ids=["empty", "zeros", "random", "boot-sector"],
)
def test_data_no_driver_claims_is_raw_as_qemu_img_says(tmp_path: Path, content: bytes) -> None:
    image = tmp_path / "disk_0.img"
    image.write_bytes(content)
    assert probed_format(image) == qemu_img_format(image) == "raw"


def test_text_and_an_old_qcow_are_left_to_qemu_img(tmp_path: Path) -> None:
    descriptor = tmp_path / "disk_0.img"
    descriptor.write_bytes(b'# Disk DescriptorFile\nversion=1\nCID=fffffffe\ncreateType="monolithicFlat"\n')
    assert probed_format(descriptor) is None
    qcow1 = tmp_path / "old.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow", str(qcow1), "1M"], check=True)
    assert qemu_img_format(qcow1) == "qcow"
    assert probed_format(qcow1) is None


def test_an_image_that_cannot_be_read_is_left_to_qemu_img(tmp_path: Path) -> None:
    assert probed_format(tmp_path) is None  # a directory: open() fails, qemu-img reports it
