"""`pykubevirt cdi-importer`: the importer pod's process, after CDI's `cmd/cdi-importer` (blank, clone, http, registry).

It finds its volumes through PYKUBEVIRT_MOUNTS: the target claim at /data (`disk.img`) or /dev/cdi-block-volume,
a clone's source claim at /source, a node-pulled registry image's disk under /shared. Blank filesystem volumes get
a sparse raw `disk.img` of the usable space (the claim's size less CDI's filesystem overhead); clones, http and
registry images (see http_source, registry_source) are converted to raw with `qemu-img convert` and then grown to
the usable space, never shrunk. The image is written to a hidden sibling and renamed to `disk.img` only once
complete. Progress is printed as CDI's metric line (see import_progress). Failures exit 1 with
`Unable to process data: …`, and the pod restarts (OnFailure): that is CDI's retry.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.api.volume_binding import to_bytes
from pykubevirt.storage import archive_content, http_source, registry_source
from pykubevirt.storage.datavolume_claim import DATA_DIR, SOURCE_DIR, usable_space
from pykubevirt.storage.import_progress import CHECKSUM_MISMATCH, FAILURE_PREFIX, QEMU_PROGRESS, ProgressReporter
from pykubevirt.storage.nbd_export import GrowingFile, NBDExport

DISK_IMG = "disk.img"
BLOCK_DEVICE = "/dev/cdi-block-volume"
# A checksum mismatch is CDI's one fatal import error. The kubelet may restart the failed container before the
# DataVolume controller has read why it failed and deleted the pod; the failure recorded next to the image makes that
# attempt fail the same way without downloading again. (A block volume has no room for it.)
FATAL_MARKER = ".import-fatal"


class ImporterError(Exception):
    """The data cannot be processed; the message ends the pod's log."""


def _qemu_img(*args: str) -> str:
    result = subprocess.run(["qemu-img", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImporterError(f"qemu-img {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


def _virtual_size(path: Path) -> int:
    return int(json.loads(_qemu_img("info", "--output=json", str(path)))["virtual-size"])


def _target(mounts: dict[str, str]) -> tuple[Path, bool]:
    if BLOCK_DEVICE in mounts:
        return Path(mounts[BLOCK_DEVICE]), True
    if DATA_DIR not in mounts:
        raise ImporterError(f"no volume mounted at {DATA_DIR} or {BLOCK_DEVICE}")
    return Path(mounts[DATA_DIR]) / DISK_IMG, False


def _too_large(needed: int, usable: int) -> ImporterError:
    return ImporterError(
        f"virtual image size {needed} is larger than the reported available storage {usable}. A larger PVC is required"
    )


def _convert(source: Path | str, fmt: str, dest: Path, on_progress: Callable[[float], None]) -> None:
    """qemu-img convert to raw, reporting its `-p` percentages; qemu-img's own words on failure."""
    argv = ["qemu-img", "convert", "-t", "writeback", "-p", "-f", fmt, "-O", "raw", str(source), str(dest)]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    pending = b""
    while chunk := os.read(process.stdout.fileno(), 4096):
        pending += chunk
        *done, pending = re.split(rb"[\r\n]", pending)
        for line in done:
            if found := QEMU_PROGRESS.search(line.decode(errors="replace")):
                on_progress(float(found.group(1)))
    stderr = process.stderr.read().decode(errors="replace").strip()
    if process.wait() != 0:
        raise ImporterError(f"qemu-img convert failed: {stderr}")


def _image_info(path: Path, fmt: str, source: str = "") -> dict[str, object]:
    """qemu-img info of the image at `path` (or read from `source`, an NBD URI, in its stead)."""
    info = json.loads(_qemu_img("info", "--output=json", "-f", fmt, source or str(path)))
    if info.get("backing-filename"):
        raise ImporterError(f"Image {path.name} is invalid because it has a backing file")
    return dict(info)


def _finish(partial: Path, target: Path, usable: int) -> None:
    """Grow to the usable space (never shrink), make it durable, and only then call it disk.img."""
    # CDI runs `qemu-img resize -f raw`; for a raw image that is a truncate, done here without two more processes.
    if usable > os.path.getsize(partial):
        os.truncate(partial, usable)
    os.chmod(partial, 0o660)
    with open(partial, "rb+") as image:
        os.fsync(image.fileno())
    os.replace(partial, target)


def _import_http(environ: dict[str, str], mounts: dict[str, str], target: Path, block: bool, usable: int) -> None:
    url = environ.get("IMPORTER_ENDPOINT", "")
    if not url.startswith(("http://", "https://")):
        raise ImporterError(f"unsupported endpoint {url!r}: only http and https")

    def opener() -> http_source.Download:
        return http_source.open_url(url, environ, mounts)

    import_stream(opener, target, block, usable, environ.get("OWNER_UID", ""), environ.get("IMPORTER_CHECKSUM", ""))


def _unpack_http(environ: dict[str, str], mounts: dict[str, str], target: Path, block: bool) -> None:
    """An archive DataVolume: the tar at the endpoint unpacked into the volume (no disk.img)."""
    if block:
        raise ImporterError(archive_content.BLOCK_REFUSED)
    url = environ.get("IMPORTER_ENDPOINT", "")
    if not url.startswith(("http://", "https://")):
        raise ImporterError(f"unsupported endpoint {url!r}: only http and https")
    archive_content.unpack(
        lambda: http_source.open_url(url, environ, mounts),
        target.parent,
        environ.get("OWNER_UID", ""),
        environ.get("IMPORTER_CHECKSUM", ""),
    )


def import_stream(
    open_body: Callable[[], http_source.Download],
    target: Path,
    block: bool,
    usable: int,
    owner_uid: str,
    checksum: str = "",
) -> None:
    """Unwrap, convert and size one image body (an http download, an upload) into the target volume."""
    work = Path(tempfile.mkdtemp(prefix="cdi-scratch-")) if block else target.parent
    download_path = work / f".{DISK_IMG}.download"
    partial = target if block else target.with_name(f".{target.name}.partial")
    with ProgressReporter(owner_uid) as progress:
        try:
            download = open_body()
            try:
                if checksum:
                    http_source.start_checksum(download, checksum)
                fmt, stream, close = http_source.unwrap(download)
                # Conversion is the second half of the work when there is one.
                share = 100.0 if fmt == "raw" else 50.0

                def on_chunk(_: int) -> None:
                    if download.total:
                        progress.set(share * download.read / download.total)

                if fmt != "raw" and download.total and not download.layered:

                    def finish_fetch() -> None:
                        http_source.verify_checksum(download, checksum)
                        close()

                    streamed_convert(
                        lambda chunk: http_source.write_scratch(stream, download_path, chunk),
                        finish_fetch, download.total, fmt, download_path, partial, usable, progress,
                    )  # fmt: skip
                    if not block:
                        _finish(partial, target, usable)
                    progress.set(100.0)
                    return
                if fmt == "raw" and not block:
                    written = http_source.write_sparse(stream, partial, usable, on_chunk)
                    if written > usable:
                        raise _too_large(download.total or written, usable)
                else:
                    http_source.write_scratch(stream, download_path, on_chunk)
                # Before the layers close the body: what they left unread counts for the digest too.
                http_source.verify_checksum(download, checksum)
                close()
            finally:
                download.stream.close()
            if fmt != "raw" or block:
                needed = int(str(_image_info(download_path, fmt)["virtual-size"]))
                if needed > usable:
                    raise _too_large(needed, usable)
                _convert(download_path, fmt, partial, lambda p: progress.set(100.0 - share + share * p / 100))
            if not block:
                _finish(partial, target, usable)
            progress.set(100.0)
        finally:
            with contextlib.suppress(FileNotFoundError):
                download_path.unlink()
            if not block:
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()
            if block:
                with contextlib.suppress(OSError):
                    work.rmdir()


class _Stopped(Exception):
    """The download was stopped because qemu-img gave up first (its error is the one reported)."""


def streamed_convert(
    fetch: Callable[[Callable[[int], None]], None],
    finish_fetch: Callable[[], None],
    total: int,
    fmt: str,
    scratch: Path,
    partial: Path,
    usable: int,
    progress: ProgressReporter,
) -> None:
    """Download into `scratch` while qemu-img reads it over NBD (see nbd_export): the image's header is checked
    (backing file, virtual size) as soon as it has arrived, and the conversion follows the download."""
    growing = GrowingFile(scratch, total)
    failures: list[BaseException] = []
    stop = threading.Event()

    def on_chunk(size: int) -> None:
        if stop.is_set():
            raise _Stopped()
        growing.grew(size)
        progress.set(99.0 * size / total)

    def download() -> None:
        try:
            fetch(on_chunk)
            finish_fetch()  # the checksum over the whole body, before the image may count as good
        except BaseException as exc:
            failures.append(exc)
        finally:
            growing.end()

    socket_dir = Path(tempfile.mkdtemp(prefix="cdi-nbd-"))
    thread = threading.Thread(target=download, name="import-download", daemon=True)
    try:
        with NBDExport(growing, socket_dir / "nbd.sock") as export:
            thread.start()
            try:
                needed = int(str(_image_info(scratch, fmt, export.uri)["virtual-size"]))
                if needed > usable:
                    raise _too_large(needed, usable)
                _convert(export.uri, fmt, partial, lambda _: None)
            except ImporterError:
                stop.set()
                thread.join()
                # A failed download is why qemu-img failed (it read EIO); otherwise qemu-img's own words.
                if failures and not isinstance(failures[0], _Stopped):
                    raise failures[0] from None
                raise
            thread.join()
    finally:
        shutil.rmtree(socket_dir, ignore_errors=True)
    if failures:
        raise failures[0]


def _import_registry(environ: dict[str, str], mounts: dict[str, str], target: Path, block: bool, usable: int) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".registry-", dir=None if block else target.parent))
    partial = target if block else target.with_name(f".{target.name}.partial")
    with ProgressReporter(environ.get("OWNER_UID", "")) as progress:
        try:
            if registry_source.SHARED_DIR in mounts:
                disk = registry_source.node_disk(Path(mounts[registry_source.SHARED_DIR]))
            else:
                disk = registry_source.pull_disk(environ.get("IMPORTER_ENDPOINT", ""), environ, mounts, scratch)
            with open(disk, "rb") as head:
                fmt = http_source.qemu_format(head.read(http_source.HEAD_BYTES))
            needed = int(str(_image_info(disk, fmt)["virtual-size"]))
            if needed > usable:
                raise _too_large(needed, usable)
            _convert(disk, fmt, partial, progress.set)
            if not block:
                _finish(partial, target, usable)
            progress.set(100.0)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            if not block:
                with contextlib.suppress(FileNotFoundError):
                    partial.unlink()


def volume_target(environ: dict[str, str], mounts: dict[str, str], size_env: str) -> tuple[Path, bool, int]:
    """(disk.img or the block device, whether it is a block device, the usable space for the image)."""
    target, block = _target(mounts)
    size = to_bytes(environ.get(size_env))
    overhead = float(environ.get("FILESYSTEM_OVERHEAD") or "0")
    if block:
        return target, True, os.path.getsize(target) or size
    stats = os.statvfs(target.parent)
    available = min(size, stats.f_bavail * stats.f_frsize) if size else stats.f_bavail * stats.f_frsize
    return target, False, usable_space(available, overhead)


def import_volume(environ: dict[str, str]) -> str:
    """Fill the target volume as IMPORTER_SOURCE says; returns the completion message."""
    mounts = pod_layout.mounts_from_env(environ)
    target, block, usable = volume_target(environ, mounts, "IMPORTER_IMAGE_SIZE")
    source = environ.get("IMPORTER_SOURCE", "none")
    if source == "none":
        if not block:
            _qemu_img("create", "-f", "raw", str(target), str(usable))
        return "Import Complete"
    if source == "http":
        marker = None if block else target.with_name(FATAL_MARKER)
        if marker is not None and marker.exists():
            raise ImporterError(marker.read_text())
        try:
            if environ.get("IMPORTER_CONTENTTYPE") == archive_content.CONTENT_TYPE:
                _unpack_http(environ, mounts, target, block)
            else:
                _import_http(environ, mounts, target, block, usable)
        except http_source.ChecksumError as exc:
            if marker is not None and str(exc).startswith(CHECKSUM_MISMATCH):
                marker.write_text(str(exc))
            raise ImporterError(str(exc)) from exc
        except (http_source.SourceError, archive_content.ArchiveError) as exc:
            raise ImporterError(str(exc)) from exc
        return "Import Complete"
    if source == "registry":
        try:
            _import_registry(environ, mounts, target, block, usable)
        except registry_source.RegistryError as exc:
            raise ImporterError(str(exc)) from exc
        return "Import Complete"
    if source != "pvc":
        raise ImporterError(f"unknown source {source}")
    if SOURCE_DIR not in mounts:
        raise ImporterError(f"no source volume mounted at {SOURCE_DIR}")
    origin = Path(mounts[SOURCE_DIR])
    origin = origin / DISK_IMG if origin.is_dir() else origin
    needed = _virtual_size(origin)
    if needed > usable:
        raise _too_large(needed, usable)
    partial = target.with_name(f".{target.name}.partial") if not block else target
    _qemu_img("convert", "-p", "-O", "raw", str(origin), str(partial))
    if not block:
        # Only a complete copy becomes disk.img, so a failed clone never leaves a good-looking image behind.
        _finish(partial, target, usable)
    return "Clone Complete"


def run() -> int:
    try:
        message = import_volume(dict(os.environ))
    except (ImporterError, OSError, ValueError, EOFError) as exc:
        print(f"{FAILURE_PREFIX}{exc}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"scratchSpaceRequired": False, "preallocationApplied": False, "message": message}), flush=True)
    return 0
