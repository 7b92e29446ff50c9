"""The UDP side of the launcher's DHCP servers: each datagram answered as its function says, to the sender or to a
fixed destination, and one without an answer dropped."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pykubevirt.launcher.datagram_responder import respond_on


def upper_unless_junk(data: bytes) -> bytes | None:
    return None if data == b"junk" else data.upper()


def bound_udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(10)
    return sock


@pytest.mark.parametrize("fixed_destination", [False, True], ids=["back-to-the-sender", "to-a-fixed-destination"])
async def test_a_datagram_is_answered_where_the_server_says_and_one_without_an_answer_is_dropped(
    fixed_destination: bool,
) -> None:
    client, elsewhere, server = bound_udp(), bound_udp(), bound_udp()
    receiver = elsewhere if fixed_destination else client
    answered: list[bytes] = []
    transport = await respond_on(
        server, upper_unless_junk, answered.append, receiver.getsockname() if fixed_destination else None
    )
    try:
        # The junk gets no answer: what arrives first is the answer to the second datagram.
        client.sendto(b"junk", server.getsockname())
        client.sendto(b"hello", server.getsockname())
        data, sender = await asyncio.to_thread(receiver.recvfrom, 1500)
        assert (data, sender) == (b"HELLO", server.getsockname())
        assert answered == [b"HELLO"]
    finally:
        transport.close()
        client.close()
        elsewhere.close()
