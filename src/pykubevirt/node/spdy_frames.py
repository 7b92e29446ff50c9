"""SPDY/3.1 frames, the layer `kubectl port-forward` multiplexes its streams on (the kubelet's streaming server speaks
it through moby/spdystream; kubectl 1.31+ carries it inside a WebSocket).

Pure: bytes in, frames out, and back. Header blocks are deflated with one zlib context a direction for the whole
connection, primed with the protocol's dictionary, so a reader or writer is made once per connection and its blocks
are read and written in wire order. Flow control is not kept: spdystream neither sends nor honours WINDOW_UPDATE.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
# RST_STREAM status codes (SPDY/3 section 2.6.3).
PROTOCOL_ERROR, INVALID_STREAM, REFUSED_STREAM, CANCEL = 1, 2, 3, 5
MAX_LENGTH = 0xFFFFFF
_CONTROL = 0x80000000
_VALUE_SEPARATOR = "\x00"

# The preset dictionary of SPDY/3 (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): these header words, each after its
# 4-byte length, then a run of common values.
_WORDS = [
    *(
        "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
        "allow authorization cache-control connection content-base content-encoding content-language content-length "
        "content-location content-md5 content-range content-type date etag expect expires from host if-match "
        "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
        "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding "
        "upgrade user-agent vary via warning www-authenticate method get status"
    ).split(),
    *("200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"),
]
_VALUES = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
HEADER_DICTIONARY = b"".join(len(w).to_bytes(4, "big") + w.encode() for w in _WORDS) + _VALUES.encode()

Headers = dict[str, list[str]]


class ProtocolError(Exception):
    """The peer broke SPDY's framing; the connection cannot go on."""


@dataclass(frozen=True, slots=True)
class SynStream:
    stream_id: int
    fin: bool
    headers: Headers = field(default_factory=dict)

    def header(self, name: str) -> str:
        """The first value of a header (names are lower case on the wire), or ""."""
        values = self.headers.get(name.lower())
        return values[0] if values else ""


@dataclass(frozen=True, slots=True)
class SynReply:
    """A stream's acceptance, or with `fin` its refusal (what a client reads)."""

    stream_id: int
    fin: bool


@dataclass(frozen=True, slots=True)
class Data:
    stream_id: int
    fin: bool
    data: bytes


@dataclass(frozen=True, slots=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True, slots=True)
class Ping:
    ping_id: int


@dataclass(frozen=True, slots=True)
class GoAway:
    last_good_stream_id: int


@dataclass(frozen=True, slots=True)
class Ignored:
    """A frame port-forward has nothing to do with (SETTINGS, WINDOW_UPDATE, HEADERS)."""

    kind: int


Frame = SynStream | SynReply | Data | RstStream | Ping | GoAway | Ignored


class FrameReader:
    """Frames out of a byte stream fed in pieces of any size."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._inflate = zlib.decompressobj(zdict=HEADER_DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames `data` completes, in order; what is left of a frame waits for the next piece."""
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= 8:
            first, second = struct.unpack_from(">II", self._buffer)
            length = second & MAX_LENGTH
            if len(self._buffer) < 8 + length:
                break
            payload = bytes(self._buffer[8 : 8 + length])
            del self._buffer[: 8 + length]
            flags = second >> 24
            if first & _CONTROL:
                frames.append(self._control(first >> 16 & 0x7FFF, first & 0xFFFF, flags, payload))
            else:
                frames.append(Data(first & 0x7FFFFFFF, bool(flags & FLAG_FIN), payload))
        return frames

    def _control(self, version: int, kind: int, flags: int, payload: bytes) -> Frame:
        if version != VERSION:
            raise ProtocolError(f"unsupported SPDY version {version}")
        if kind == SYN_STREAM:
            if len(payload) < 10:
                raise ProtocolError("a SYN_STREAM frame too short for its fields")
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            if stream_id == 0:
                raise ProtocolError("a SYN_STREAM frame for stream 0")
            return SynStream(stream_id, bool(flags & FLAG_FIN), self._headers(payload[10:]))
        if kind in (SYN_REPLY, HEADERS):
            if len(payload) < 4:
                raise ProtocolError("a frame too short for its stream id")
            self._headers(payload[4:])  # read even when unused: it keeps the shared inflate context in step
            stream_id = struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF
            return SynReply(stream_id, bool(flags & FLAG_FIN)) if kind == SYN_REPLY else Ignored(kind)
        if kind == RST_STREAM and len(payload) >= 8:
            stream_id, status = struct.unpack_from(">II", payload)
            return RstStream(stream_id & 0x7FFFFFFF, status)
        if kind == PING and len(payload) >= 4:
            return Ping(struct.unpack_from(">I", payload)[0])
        if kind == GOAWAY and len(payload) >= 4:
            return GoAway(struct.unpack_from(">I", payload)[0] & 0x7FFFFFFF)
        return Ignored(kind)

    def _headers(self, block: bytes) -> Headers:
        try:
            raw = self._inflate.decompress(block)
        except zlib.error as exc:
            raise ProtocolError(f"a header block that does not inflate: {exc}") from exc
        return parse_header_block(raw)


def parse_header_block(raw: bytes) -> Headers:
    """Name/value pairs of an inflated block; a value holding NULs is several values."""
    try:
        (count,) = struct.unpack_from(">I", raw)
        offset, headers = 4, Headers()
        for _ in range(count):
            (size,) = struct.unpack_from(">I", raw, offset)
            name = raw[offset + 4 : offset + 4 + size].decode().lower()
            offset += 4 + size
            (size,) = struct.unpack_from(">I", raw, offset)
            value = raw[offset + 4 : offset + 4 + size].decode()
            offset += 4 + size
            headers.setdefault(name, []).extend(value.split(_VALUE_SEPARATOR))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"a malformed header block: {exc}") from exc
    if offset != len(raw):
        raise ProtocolError("a header block longer than its pairs")
    return headers


def header_block(headers: Headers) -> bytes:
    """The block of `headers` before deflating: a count, then each lower-case name and its joined values."""
    out = [struct.pack(">I", len(headers))]
    for name, values in headers.items():
        for part in (name.lower().encode(), _VALUE_SEPARATOR.join(values).encode()):
            out.append(struct.pack(">I", len(part)) + part)
    return b"".join(out)


class FrameWriter:
    """Frames to send, deflating header blocks in the order they are made (which must be the order sent)."""

    def __init__(self) -> None:
        self._deflate = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, HEADER_DICTIONARY)

    def _block(self, headers: Headers) -> bytes:
        return self._deflate.compress(header_block(headers)) + self._deflate.flush(zlib.Z_SYNC_FLUSH)

    def syn_stream(self, stream_id: int, headers: Headers, *, fin: bool = False) -> bytes:
        """A client's new stream (priority 0), as kubectl opens them."""
        payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + self._block(headers)
        return control(SYN_STREAM, FLAG_FIN if fin else 0, payload)

    def syn_reply(self, stream_id: int, headers: Headers | None = None, *, fin: bool = False) -> bytes:
        """The acceptance of a stream; with `fin`, its refusal (spdystream's way of rejecting one)."""
        return control(SYN_REPLY, FLAG_FIN if fin else 0, struct.pack(">I", stream_id) + self._block(headers or {}))


def control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", _CONTROL >> 16 | VERSION, kind, flags << 24 | len(payload)) + payload


def data(stream_id: int, payload: bytes, *, fin: bool = False) -> bytes:
    if len(payload) > MAX_LENGTH:
        raise ValueError("a data frame holds at most 16 MiB")
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (FLAG_FIN if fin else 0) << 24 | len(payload)) + payload


def rst_stream(stream_id: int, status: int) -> bytes:
    return control(RST_STREAM, 0, struct.pack(">II", stream_id, status))


def ping(ping_id: int) -> bytes:
    return control(PING, 0, struct.pack(">I", ping_id))


def goaway(last_good_stream_id: int) -> bytes:
    return control(GOAWAY, 0, struct.pack(">II", last_good_stream_id, 0))
