"""`pykubevirt cdi-clone-source`: the source pod of a clone from another namespace, after CDI's `cmd/cdi-cloner`.

A pod mounts claims of its own namespace only, so CDI clones across namespaces with two pods: an upload server on the
target claim and this one, in the source's namespace, on the source claim. It POSTs the source image (`disk.img` of
the claim mounted at /var/run/cdi/clone/source, or the block device /dev/cdi-block-volume) to UPLOAD_URL, with CDI's
`x-cdi-content-type` header. A refused or broken transfer exits 1; the pod's OnFailure policy sends it again.
"""

from __future__ import annotations

import http.client
import os
import sys
import urllib.parse
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.storage.datavolume_claim import CLONER_MOUNT
from pykubevirt.storage.import_progress import FAILURE_PREFIX
from pykubevirt.storage.importer import BLOCK_DEVICE, DISK_IMG

CHUNK = 1 << 20


class CloneSourceError(Exception):
    """Why the source could not be sent."""


def source_path(environ: dict[str, str]) -> tuple[Path, str]:
    """The image to send and CDI's content type for it (blockdevice-clone or filesystem-clone)."""
    mounts = pod_layout.mounts_from_env(environ)
    if BLOCK_DEVICE in mounts:
        return Path(mounts[BLOCK_DEVICE]), "blockdevice-clone"
    if CLONER_MOUNT not in mounts:
        raise CloneSourceError(f"no source volume mounted at {CLONER_MOUNT} or {BLOCK_DEVICE}")
    image = Path(mounts[CLONER_MOUNT]) / DISK_IMG
    if not image.is_file():
        raise CloneSourceError(f"the source claim has no {DISK_IMG}: it was never populated")
    return image, "filesystem-clone"


def _size(path: Path) -> int:
    with path.open("rb") as f:
        return f.seek(0, os.SEEK_END)


def send(environ: dict[str, str]) -> int:
    """POST the source image to the upload server; the bytes sent."""
    url = environ.get("UPLOAD_URL") or ""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname:
        raise CloneSourceError(f"UPLOAD_URL must be the upload server's http URL, got {url!r}")
    path, content_type = source_path(environ)
    size = _size(path)
    print(f"Sending {size} bytes of {content_type} to {url}", flush=True)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port or 80, timeout=300)
    try:
        connection.putrequest("POST", parsed.path or "/")
        connection.putheader("Content-Length", str(size))
        connection.putheader("Content-Type", "application/octet-stream")
        connection.putheader("x-cdi-content-type", content_type)
        connection.endheaders()
        with path.open("rb") as f:
            while chunk := f.read(CHUNK):
                connection.send(chunk)
        response = connection.getresponse()
        answer = response.read().decode(errors="replace").strip()
    finally:
        connection.close()
    if response.status != 200:
        raise CloneSourceError(f"the upload server answered {response.status}: {answer}")
    return size


def run() -> int:
    try:
        size = send(dict(os.environ))
    except (CloneSourceError, OSError, http.client.HTTPException) as exc:
        print(f"{FAILURE_PREFIX}{exc}", file=sys.stderr, flush=True)
        return 1
    print(f"Wrote {size} bytes", flush=True)
    return 0
