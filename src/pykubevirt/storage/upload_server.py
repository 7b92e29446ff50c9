"""`pykubevirt cdi-uploadserver`: the upload pod's process, after CDI's `cmd/cdi-uploadserver`.

It listens on loopback on a port of its own (the pod has no network namespace; the line `Upload server listening
on <url>` in its log is how the DataVolume controller learns where, in place of CDI's Service), takes one image
`POST`ed by the upload proxy to `/v1beta1/upload` (or `/v1alpha1/upload`), and processes it as the http importer
does (gz/xz/tar unwrapped, converted to raw, sized with the filesystem overhead, renamed to disk.img when
complete); one `POST`ed to `/v1beta1/upload-archive` (an archive claim's) is a tar unpacked into the volume. A body
that fails is answered 500 with the reason and the server waits for another; after a success it exits 0, which
completes the pod.
"""

from __future__ import annotations

import http.server
import io
import os
import sys
import threading
from typing import IO, Any, cast

from pykubevirt.api import pod_layout
from pykubevirt.storage import archive_content, http_source
from pykubevirt.storage.import_progress import FAILURE_PREFIX
from pykubevirt.storage.importer import ImporterError, import_stream, volume_target

UPLOAD_PATHS = ("/v1beta1/upload", "/v1alpha1/upload")
# CDI's archive paths (common.ArchiveUploadPaths): the upload proxy sends an archive claim's uploads here.
ARCHIVE_PATHS = ("/v1beta1/upload-archive", "/v1alpha1/upload-archive")
LISTENING = "Upload server listening on "


class _Body(io.RawIOBase):
    """The request body, Content-Length bytes of the connection, with the read1 the importer's reader uses."""

    def __init__(self, rfile: Any, length: int) -> None:
        self.rfile = rfile
        self.remaining = length

    def readable(self) -> bool:
        return True

    def read1(self, n: int = -1) -> bytes:
        if self.remaining <= 0:
            return b""
        data: bytes = self.rfile.read1(min(n if n > 0 else 1 << 20, self.remaining))
        self.remaining -= len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read1(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def serve(environ: dict[str, str]) -> int:
    mounts = pod_layout.mounts_from_env(environ)
    target, block, usable = volume_target(environ, mounts, "UPLOAD_IMAGE_SIZE")
    done = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, code: int, text: str) -> None:
            body = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(200 if self.path == "/healthz" else 404, "OK" if self.path == "/healthz" else "not found")

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            if path not in UPLOAD_PATHS + ARCHIVE_PATHS:
                self._answer(404, "not found")
                return
            if done.is_set():
                self._answer(409, "the upload is complete")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = _Body(self.rfile, length)

            def opener() -> http_source.Download:
                return http_source.Download(cast(IO[bytes], body), length)

            try:
                if path in ARCHIVE_PATHS:
                    if block:
                        raise ImporterError(archive_content.BLOCK_REFUSED)
                    archive_content.unpack(opener, target.parent, environ.get("OWNER_UID", ""))
                else:
                    import_stream(opener, target, block, usable, environ.get("OWNER_UID", ""))
            except (
                ImporterError,
                archive_content.ArchiveError,
                http_source.SourceError,
                OSError,
                ValueError,
                EOFError,
            ) as exc:
                print(f"{FAILURE_PREFIX}{exc}", file=sys.stderr, flush=True)
                self.close_connection = True
                self._answer(500, f"{FAILURE_PREFIX}{exc}")
                return
            self._answer(200, "")
            done.set()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", int(environ.get("UPLOAD_SERVER_PORT") or 0)), Handler)
    print(f"{LISTENING}http://127.0.0.1:{server.server_address[1]}", flush=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    done.wait()
    server.shutdown()
    server.server_close()
    print('{"message": "Upload Complete"}', flush=True)
    return 0


def run() -> int:
    try:
        return serve(dict(os.environ))
    except (ImporterError, OSError, ValueError) as exc:
        print(f"{FAILURE_PREFIX}{exc}", file=sys.stderr, flush=True)
        return 1
