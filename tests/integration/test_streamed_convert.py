"""qemu-img converting an image while it downloads (storage/nbd_export.py, importer.streamed_convert), with the real
qemu-img: the result is the image's, a download that breaks off fails with its own reason, and a checksum that
does not match after a complete conversion still fails the import."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pykubevirt.storage.http_source import ChecksumError, SourceError
from pykubevirt.storage.import_progress import ProgressReporter
from pykubevirt.storage.importer import streamed_convert
from pykubevirt.storage.nbd_export import GrowingFile, NBDExport

MI = 1 << 20


@pytest.fixture
def qcow2(tmp_path: Path) -> Path:
    """A 64 MiB qcow2 with 8 MiB of random data spread over it."""
    raw = tmp_path / "source.raw"
    with raw.open("wb") as out:
        out.truncate(64 * MI)
        for i in range(0, 64, 8):
            out.seek(i * MI)
            out.write(os.urandom(MI))
    image = tmp_path / "source.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(image)], check=True)
    return image


def trickle(data: bytes, dest: Path, on_chunk: Callable[[int], None], fail_at: int | None = None) -> None:
    """Write `data` to `dest` in 256 KiB pieces, a little at a time, as a slow download would."""
    with open(dest, "wb", buffering=0) as out:
        for start in range(0, len(data), 256 * 1024):
            if fail_at is not None and start >= fail_at:
                raise SourceError("unexpected EOF")
            out.write(data[start : start + 256 * 1024])
            on_chunk(min(start + 256 * 1024, len(data)))
            time.sleep(0.002)


def test_qemu_img_reads_a_file_still_arriving(qcow2: Path, tmp_path: Path) -> None:
    data = qcow2.read_bytes()
    scratch, out, expected = tmp_path / "scratch", tmp_path / "out.raw", tmp_path / "expected.raw"
    growing = GrowingFile(scratch, len(data))
    with NBDExport(growing, tmp_path / "nbd.sock") as export:
        writer = threading.Thread(target=trickle, args=(data, scratch, growing.grew))
        writer.start()
        subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", export.uri, str(out)], check=True)
        writer.join()
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(qcow2), str(expected)], check=True)
    assert out.read_bytes() == expected.read_bytes()


def test_a_download_that_breaks_off_fails_with_its_own_reason(qcow2: Path, tmp_path: Path) -> None:
    data = qcow2.read_bytes()
    scratch = tmp_path / "scratch"
    with pytest.raises(SourceError, match="unexpected EOF"), ProgressReporter("uid", io.StringIO()) as progress:
        streamed_convert(
            lambda chunk: trickle(data, scratch, chunk, fail_at=len(data) // 2),
            lambda: None, len(data), "qcow2", scratch, tmp_path / "out.raw", 100 * MI, progress,
        )  # fmt: skip


def test_a_checksum_mismatch_fails_a_complete_conversion(qcow2: Path, tmp_path: Path) -> None:
    data = qcow2.read_bytes()
    scratch, out = tmp_path / "scratch", tmp_path / "out.raw"

    def mismatch() -> None:
        raise ChecksumError("checksum mismatch: expected sha256:00, got sha256:ff")

    with pytest.raises(ChecksumError), ProgressReporter("uid", io.StringIO()) as progress:
        streamed_convert(
            lambda chunk: trickle(data, scratch, chunk), mismatch, len(data), "qcow2", scratch, out, 100 * MI, progress
        )
