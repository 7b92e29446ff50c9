"""The importer's `http` source, after CDI's `pkg/importer/http-datasource.go` and `format-readers.go`.

The body is fetched with the DataVolume's headers, basic credentials (the secret's accessKeyId/secretKey) and CA
bundle (/certs), then unwrapped as CDI's format readers do, sniffing magic bytes again after each layer: gzip, xz,
and a tar's first regular file. What is left is either a format qemu-img converts (qcow2, vmdk, vdi, vhd, vhdx) or
raw data (an ISO is raw), which is written sparse straight away.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import lzma
import os
import ssl
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pykubevirt.storage.import_progress import CHECKSUM_MISMATCH

CERTS_DIR = "/certs"
EXTRA_HEADERS_DIR = "/extraheaders"
HEAD_BYTES = 8192
CHUNK = 1 << 20
CONNECT_TIMEOUT_SECONDS = 30.0

# Magic bytes (cdi:pkg/image/filefmt.go): the formats qemu-img converts.
QEMU_FORMATS: tuple[tuple[str, int, bytes], ...] = (
    ("qcow2", 0, b"QFI\xfb"),
    ("vmdk", 0, b"KDMV"),
    ("vdi", 0x40, b"\x7f\x10\xda\xbe"),
    ("vpc", 0, b"conectix"),
    ("vhdx", 0, b"vhdxfile"),
)


class SourceError(Exception):
    """The source cannot be read; the message is the importer's failure reason."""


class ChecksumError(SourceError):
    """The body is not what the DataVolume's checksum says: fatal, CDI does not retry it."""


CHECKSUM_ALGORITHMS = ("md5", "sha1", "sha256", "sha512")


def start_checksum(download: Download, checksum: str) -> None:
    """Hash the body as it is read, for `algorithm:hex` (CDI's md5, sha1, sha256 and sha512)."""
    algorithm, _, expected = checksum.partition(":")
    if algorithm not in CHECKSUM_ALGORITHMS or not expected:
        raise ChecksumError(f"invalid checksum {checksum!r}: want one of {'/'.join(CHECKSUM_ALGORITHMS)}:<hex>")
    download.hasher = hashlib.new(algorithm)


def verify_checksum(download: Download, checksum: str) -> None:
    """Read what the image layers left unread (a tar's other members) and compare the body's digest."""
    if download.hasher is None:
        return
    while data := download.stream.read1(CHUNK):  # type: ignore[attr-defined]
        download.hasher.update(data)
    algorithm, _, expected = checksum.partition(":")
    actual = download.hasher.hexdigest()
    if actual != expected.lower():
        raise ChecksumError(f"{CHECKSUM_MISMATCH}: expected {checksum}, got {algorithm}:{actual}")


@dataclass
class Download:
    """An open HTTP body: `stream` to read, `total` its Content-Length (0 when unknown), `read` bytes so far."""

    stream: IO[bytes]
    total: int
    read: int = 0
    # hashlib object fed every byte of the body, when the DataVolume gives a checksum.
    hasher: Any = None
    # Whether unwrap removed a gzip, xz or tar layer (then `total` is not the image's size).
    layered: bool = False


class _Counting(io.RawIOBase):
    """The response body as a raw stream that counts what was read (progress is over the bytes on the wire)."""

    def __init__(self, download: Download) -> None:
        self.download = download

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.download.stream.read1(len(buffer))  # type: ignore[attr-defined]
        buffer[: len(data)] = data
        self.download.read += len(data)
        if self.download.hasher is not None:
            self.download.hasher.update(data)
        return len(data)


class _Peeked(io.RawIOBase):
    """A stream whose first bytes were read to sniff its format, put back in front of the rest."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head = head
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        count: int = self.rest.readinto(buffer)  # type: ignore[attr-defined]
        return count


def _headers(environ: Mapping[str, str], mounts: Mapping[str, str]) -> dict[str, str]:
    """CDI's IMPORTER_EXTRA_HEADER_<n> values and the secretExtraHeaders files, then basic credentials."""
    lines = [v for k, v in sorted(environ.items()) if k.startswith("IMPORTER_EXTRA_HEADER_")]
    for path, host in sorted(mounts.items()):
        if path == EXTRA_HEADERS_DIR or path.startswith(EXTRA_HEADERS_DIR + "/"):
            for file in sorted(Path(host).rglob("*")):
                if file.is_file() and not file.name.startswith(".."):
                    lines.extend(file.read_text().splitlines())
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers[name.strip()] = value.strip()
    user, password = environ.get("IMPORTER_ACCESS_KEY_ID", ""), environ.get("IMPORTER_SECRET_KEY", "")
    if user or password:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return headers


def _tls_context(environ: Mapping[str, str], mounts: Mapping[str, str]) -> ssl.SSLContext:
    if environ.get("INSECURE_TLS", "").lower() == "true":
        context = ssl._create_unverified_context()  # the DataVolume asked for insecureSkipVerify
        return context
    context = ssl.create_default_context()
    if CERTS_DIR in mounts:
        # The certConfigMap's files are CA bundles, added to the system's as CDI's importer does.
        for file in sorted(Path(mounts[CERTS_DIR]).iterdir()):
            if file.is_file() and not file.name.startswith("."):
                context.load_verify_locations(cafile=str(file))
    return context


def open_url(url: str, environ: Mapping[str, str], mounts: Mapping[str, str]) -> Download:
    """GET the endpoint; a status other than 200 or a failed connection is a SourceError in Go's words."""
    request = urllib.request.Request(url, headers=_headers(environ, mounts))
    context = _tls_context(environ, mounts) if url.startswith("https:") else None
    try:
        response = urllib.request.urlopen(request, timeout=CONNECT_TIMEOUT_SECONDS, context=context)
    except urllib.error.HTTPError as exc:
        raise SourceError(f"expected status code 200, got {exc.code}. Status: {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SourceError(f'Get "{url}": {reason}') from exc
    if response.status != 200:
        response.close()
        raise SourceError(
            f"expected status code 200, got {response.status}. Status: {response.status} {response.reason}"
        )
    return Download(response, int(response.headers.get("Content-Length") or 0))


def _sniff(stream: IO[bytes]) -> tuple[bytes, IO[bytes]]:
    head = b""
    while len(head) < HEAD_BYTES:
        data = stream.read(HEAD_BYTES - len(head))
        if not data:
            break
        head += data
    return head, io.BufferedReader(_Peeked(head, stream), CHUNK)


def qemu_format(head: bytes) -> str:
    """The qemu-img format of data starting with `head`, or "raw"."""
    for name, offset, magic in QEMU_FORMATS:
        if head[offset : offset + len(magic)] == magic:
            return name
    return "raw"


def unwrap(download: Download, *, keep_tar: bool = False) -> tuple[str, IO[bytes], Callable[[], None]]:
    """The body with gzip/xz/tar layers removed (a tar kept as is with `keep_tar`, for archive content):
    (qemu-img format or "raw", stream, close)."""
    stream: IO[bytes] = io.BufferedReader(_Counting(download), CHUNK)
    opened: list[Any] = [download.stream]
    while True:
        head, stream = _sniff(stream)
        if head[:2] == b"\x1f\x8b":
            stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
        elif head[:6] == b"\xfd7zXZ\x00":
            stream = lzma.LZMAFile(stream, mode="rb")
        elif head[257:262] == b"ustar" and not keep_tar:
            archive = tarfile.open(fileobj=stream, mode="r|")
            opened.append(archive)
            member = next((m for m in archive if m.isfile()), None)
            extracted = archive.extractfile(member) if member is not None else None
            if extracted is None:
                raise SourceError("no regular file in the tar archive")
            stream = extracted
        else:
            break
        opened.append(stream)
        download.layered = True

    def close() -> None:
        for item in reversed(opened):
            item.close()

    return qemu_format(head), stream, close


def write_scratch(stream: IO[bytes], dest: Path, on_chunk: Callable[[int], None]) -> None:
    """Copy `stream` to a scratch file qemu-img reads (no hole punching, no fsync: it is thrown away). Unbuffered:
    what `on_chunk` reports is in the file, for a reader that follows the download."""
    size = 0
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(dest, "wb", buffering=0) as out:
        while n := stream.readinto(view):  # type: ignore[attr-defined]
            done = 0
            while done < n:
                done += out.write(view[done:n]) or 0
            size += n
            on_chunk(size)


def write_sparse(stream: IO[bytes], dest: Path, limit: int, on_chunk: Callable[[int], None]) -> int:
    """Copy `stream` to `dest` leaving holes for zero blocks; stops past `limit` bytes. Returns the size."""
    size = 0
    zero = bytes(CHUNK)
    with open(dest, "wb") as out:
        while True:
            data = stream.read(CHUNK)
            if not data:
                break
            if data == zero[: len(data)]:
                out.seek(len(data), os.SEEK_CUR)
            else:
                out.write(data)
            size += len(data)
            on_chunk(size)
            if size > limit:
                return size
        out.truncate(size)
        out.flush()
        os.fsync(out.fileno())
    return size
