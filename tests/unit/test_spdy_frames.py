"""SPDY/3.1 framing as moby/spdystream (kubectl's side of port-forward) writes and reads it, with plain bytes."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest

from pykubevirt.node import spdy_frames as spdy

# sha256 of the 1,423-byte header dictionary of SPDY/3 (draft-mbelshe-httpbis-spdy-00 2.6.10.1) as spdystream ships it.
SPDY3_DICTIONARY_SHA256 = "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"


def test_the_header_dictionary_is_the_protocols() -> None:
    assert len(spdy.HEADER_DICTIONARY) == 1423
    assert hashlib.sha256(spdy.HEADER_DICTIONARY).hexdigest() == SPDY3_DICTIONARY_SHA256


def test_frames_split_anywhere_and_run_together_read_back_in_order() -> None:
    client = spdy.FrameWriter()
    wire = (
        client.syn_stream(1, {"streamType": ["error"], "port": ["80"], "requestID": ["0"]})
        + spdy.data(1, b"", fin=True)
        + client.syn_stream(3, {"streamType": ["data"], "port": ["80"], "requestID": ["0"]})
        + spdy.data(3, b"GET / HTTP/1.0\r\n\r\n")
        + spdy.ping(1)
        + spdy.rst_stream(3, spdy.CANCEL)
        + spdy.goaway(3)
    )
    expected = [
        spdy.SynStream(1, False, {"streamtype": ["error"], "port": ["80"], "requestid": ["0"]}),
        spdy.Data(1, True, b""),
        spdy.SynStream(3, False, {"streamtype": ["data"], "port": ["80"], "requestid": ["0"]}),
        spdy.Data(3, False, b"GET / HTTP/1.0\r\n\r\n"),
        spdy.Ping(1),
        spdy.RstStream(3, spdy.CANCEL),
        spdy.GoAway(3),
    ]
    assert spdy.FrameReader().feed(wire) == expected
    # Byte by byte: the second header block inflates only with the first one's context, so order is checked too.
    reader, frames = spdy.FrameReader(), []
    for i in range(len(wire)):
        frames += reader.feed(wire[i : i + 1])
    assert frames == expected


def test_a_reply_shows_whether_the_stream_was_refused_and_header_lookups_ignore_case() -> None:
    server = spdy.FrameWriter()
    wire = server.syn_reply(1) + server.syn_reply(3, fin=True)
    assert spdy.FrameReader().feed(wire) == [spdy.SynReply(1, False), spdy.SynReply(3, True)]
    (stream,) = spdy.FrameReader().feed(spdy.FrameWriter().syn_stream(5, {"Port": ["8080"]}))
    assert isinstance(stream, spdy.SynStream)
    assert (stream.header("port"), stream.header("PORT"), stream.header("streamType")) == ("8080", "8080", "")


def test_a_value_with_nuls_is_several_values() -> None:
    block = spdy.header_block({"accept": ["a", "b"]})
    assert block == struct.pack(">I", 1) + struct.pack(">I", 6) + b"accept" + struct.pack(">I", 3) + b"a\x00b"
    assert spdy.parse_header_block(block) == {"accept": ["a", "b"]}


def test_the_writers_header_blocks_inflate_with_the_dictionary_as_one_stream() -> None:
    writer = spdy.FrameWriter()
    first, second = writer.syn_reply(1, {"a": ["1"]}), writer.syn_reply(3, {"a": ["1"]})
    inflate = zlib.decompressobj(zdict=spdy.HEADER_DICTIONARY)
    assert spdy.parse_header_block(inflate.decompress(first[12:])) == {"a": ["1"]}
    assert spdy.parse_header_block(inflate.decompress(second[12:])) == {"a": ["1"]}
    assert len(second) < len(first)  # the second block refers back to the first


def test_data_frames_carry_their_flags_and_refuse_what_does_not_fit() -> None:
    assert spdy.data(3, b"xy", fin=True) == struct.pack(">II", 3, 0x01000002) + b"xy"
    with pytest.raises(ValueError, match="16 MiB"):
        spdy.data(3, bytes(spdy.MAX_LENGTH + 1))


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (struct.pack(">HHI", 0x8002, spdy.PING, 4) + b"\x00\x00\x00\x01", "unsupported SPDY version 2"),
        (spdy.control(spdy.SYN_STREAM, 0, b"\x00\x00\x00\x01"), "too short"),
        (spdy.control(spdy.SYN_STREAM, 0, struct.pack(">IIBB", 0, 0, 0, 0) + b"x"), "stream 0"),
        (spdy.control(spdy.SYN_STREAM, 0, struct.pack(">IIBB", 1, 0, 0, 0) + b"not zlib"), "does not inflate"),
    ],
)
def test_broken_framing_is_a_protocol_error(wire: bytes, message: str) -> None:
    with pytest.raises(spdy.ProtocolError, match=message):
        spdy.FrameReader().feed(wire)


def test_a_frame_waits_for_the_rest_of_its_payload() -> None:
    reader = spdy.FrameReader()
    assert reader.feed(spdy.data(5, b"abcdef")[:10]) == []
    assert reader.feed(b"cdef") == [spdy.Data(5, False, b"abcdef")]


def test_a_header_block_longer_than_its_pairs_is_refused() -> None:
    with pytest.raises(spdy.ProtocolError, match="longer than its pairs"):
        spdy.parse_header_block(spdy.header_block({"a": ["b"]}) + b"junk")
    with pytest.raises(spdy.ProtocolError, match="malformed"):
        spdy.parse_header_block(struct.pack(">I", 2))
