"""The migration proxies: a unix socket on the source, TCP between the nodes, the target's unix socket, spliced."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pykubevirt.handler.migration_proxy import MigrationProxy, ProxySet, dial_tcp, dial_unix

PAYLOAD = bytes(range(256)) * 40_000  # 10 MB, more than a pipe holds


async def echo_reversed_server(path: Path) -> tuple[asyncio.AbstractServer, list[int]]:
    """A unix server that reads to EOF and answers with the byte count, then closes."""
    sizes: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        sizes.append(len(data))
        writer.write(str(len(data)).encode() + data[:16])
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path=str(path)), sizes


def talk(path: str, payload: bytes) -> bytes:
    """Send `payload`, half-close, and read the answer to EOF (a blocking client, as QEMU is)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def read_to_end(path: str) -> bytes:
    """Connect and read to EOF without writing: a write could race the proxy's close and fail with EPIPE."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


async def test_bytes_cross_both_proxies_both_ways_and_end_of_stream_follows(tmp_path: Path) -> None:
    server, sizes = await echo_reversed_server(tmp_path / "target.sock")
    proxies = ProxySet()
    target = await proxies.add(MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1"))
    await proxies.add(MigrationProxy(dial_tcp("127.0.0.1", target.port), path=str(tmp_path / "source.sock")))
    answers = await asyncio.gather(
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), PAYLOAD),
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), b"second connection"),
    )
    assert answers == [str(len(PAYLOAD)).encode() + PAYLOAD[:16], b"17second connectio"]
    assert sorted(sizes) == [17, len(PAYLOAD)]
    await proxies.stop()
    server.close()


async def test_an_unreachable_upstream_closes_the_accepted_connection(tmp_path: Path) -> None:
    proxy = MigrationProxy(dial_unix(str(tmp_path / "nobody.sock")), path=str(tmp_path / "source.sock"))
    await proxy.start()
    assert await asyncio.to_thread(read_to_end, str(tmp_path / "source.sock")) == b""
    await proxy.stop()


async def test_a_stopped_proxy_accepts_nothing_more_and_removes_its_socket(tmp_path: Path) -> None:
    server, _ = await echo_reversed_server(tmp_path / "target.sock")
    proxy = MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1")
    port = await proxy.start()
    await proxy.stop()
    refused = False
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        refused = True
    assert refused
    unix = MigrationProxy(dial_unix(str(tmp_path / "target.sock")), path=str(tmp_path / "source.sock"))
    await unix.start()
    await unix.stop()
    assert not (tmp_path / "source.sock").exists()
    server.close()
