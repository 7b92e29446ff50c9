"""CDI's `archive` content type: a tar (maybe gzip- or xz-compressed) unpacked into a filesystem volume, for an
upload to `/v1beta1/upload-archive` or an http import of a DataVolume with `contentType: archive`.

As CDI's UnArchiveTar, GNU tar does the unpacking (`--preserve-permissions --no-same-owner`): it keeps members
inside the directory, and its exit status is the error CDI reports.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from pykubevirt.storage import http_source
from pykubevirt.storage.import_progress import ProgressReporter

TAR = "/usr/bin/tar"
CONTENT_TYPE = "archive"
BLOCK_REFUSED = "archive content needs a filesystem volume, not a block device"


class ArchiveError(Exception):
    """The archive could not be unpacked; the message is CDI's."""


def unpack(open_body: Callable[[], http_source.Download], directory: Path, owner_uid: str, checksum: str = "") -> None:
    """Unpack the body's tar into `directory`, decompressing gzip and xz layers on the way."""
    with ProgressReporter(owner_uid) as progress:
        download = open_body()
        try:
            if checksum:
                http_source.start_checksum(download, checksum)
            _, stream, close = http_source.unwrap(download, keep_tar=True)
            untar = subprocess.Popen(
                [TAR, "--preserve-permissions", "--no-same-owner", "-xC", str(directory)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            assert untar.stdin is not None
            try:
                while chunk := stream.read(http_source.CHUNK):
                    untar.stdin.write(chunk)
                    if download.total:
                        progress.set(100.0 * download.read / download.total)
            except BrokenPipeError:
                pass  # tar gave up: its status says why
            finally:
                untar.stdin.close()
                errors = untar.stderr.read().decode(errors="replace").strip() if untar.stderr else ""
                status = untar.wait()
            if status != 0:
                detail = f" ({errors.splitlines()[-1]})" if errors else ""
                raise ArchiveError(f"unable to untar files from endpoint: exit status {status}{detail}")
            http_source.verify_checksum(download, checksum)
            close()
        finally:
            download.stream.close()
        progress.set(100.0)
