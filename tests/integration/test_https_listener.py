"""The API server's port speaks TLS only and answers malformed clients as kube-apiserver's Go server does."""

from __future__ import annotations

import asyncio
import ssl

from tests.support.apiserver_process import APIServerProcess
from tests.support.http_client import APIClient


async def _exchange(server: APIServerProcess, request: bytes, *, tls: bool) -> bytes:
    """Send raw bytes to the server's port and read its whole answer."""
    context = ssl.create_default_context(cafile=str(server.ca_file())) if tls else None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    return answer


async def test_plain_http_on_the_tls_port_gets_a_400_in_words(apiserver: APIServerProcess) -> None:
    answer = await _exchange(apiserver, b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n", tls=False)
    assert answer == b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"


async def test_an_oversized_header_is_431_without_a_traceback(fresh_apiserver: APIServerProcess) -> None:
    server = fresh_apiserver
    big = b"X-Big: " + b"a" * (2 << 20) + b"\r\n"
    answer = await _exchange(server, b"GET /version HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n", tls=True)
    assert answer.split(b"\r\n")[0].endswith(b" 431 Request Header Fields Too Large"), answer[:200]
    # The server still serves, and only a line about the refusal reached the log.
    async with APIClient(server) as api:
        assert (await api.get("/version")).status == 200
    server.stop()
    logged = server.log_path.read_text()
    assert "header larger than" in logged
    assert "Traceback" not in logged


async def test_a_header_under_a_mebibyte_is_served(apiserver: APIServerProcess) -> None:
    """Go's limit is 1 MiB of headers; aiohttp's default 8 KiB line would refuse a long header kube accepts."""
    async with APIClient(apiserver) as api:
        reply = await api.request("GET", "/version", headers={"X-Long": "a" * 100_000})
    assert reply.status == 200
