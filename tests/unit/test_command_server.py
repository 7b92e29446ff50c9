"""The launcher's command socket: every watcher is told of a change at once; at shutdown, answers under way are sent,
then every connection ends."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pykubevirt.launcher import protocol
from pykubevirt.launcher.command_server import CommandServer
from pykubevirt.launcher.protocol import Command, Request
from tests.support.waiting import consistently


async def test_stop_waits_for_the_command_under_way_and_ends_the_connection(tmp_path: Path) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    closed_after: list[str] = []

    async def slow_status(request: Request) -> Mapping[str, Any]:
        started.set()
        await release.wait()
        # The launcher closes libvirt after stop(): a command still running would then fail on a closed connection.
        closed_after.append("answered")
        return {"domain": {"state": "Running"}}

    server = CommandServer(tmp_path / "launcher.sock", {Command.STATUS: slow_status}, dict)
    await server.start()
    reader, writer = await asyncio.open_unix_connection(str(tmp_path / "launcher.sock"))
    writer.write(protocol.encode(protocol.request(Command.STATUS, request_id=1)))
    await writer.drain()
    await started.wait()

    stopping = asyncio.create_task(server.stop())
    # stop() must not return while a command is still being answered.
    await consistently(lambda: not stopping.done(), for_=0.2)
    release.set()
    await asyncio.wait_for(stopping, 5)
    assert closed_after == ["answered"]

    answer = protocol.decode(await reader.readline())
    assert answer["ok"] is True and answer["domain"]["state"] == "Running"
    # Then the launcher closes the connection: the handler sees it go instead of a failure from a closed libvirt.
    assert await asyncio.wait_for(reader.readline(), 5) == b""
    writer.close()


async def test_a_published_status_is_on_every_watchers_socket_before_the_loop_runs_again(tmp_path: Path) -> None:
    # The handler acts on what its watch said last: a watcher told of a change must not find another one (the
    # handler's) still waiting for its turn on the loop, so a launcher that dies right then has told both.
    server = CommandServer(tmp_path / "launcher.sock", {}, lambda: {"domain": {"state": "Running"}})
    await server.start()
    watchers = []
    for _ in range(2):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, str(tmp_path / "launcher.sock"))
        sock.sendall(protocol.encode(protocol.request(Command.WATCH)))
        watchers.append(sock)
    for sock in watchers:
        first = await asyncio.get_running_loop().sock_recv(sock, protocol.MAX_LINE)
        assert protocol.decode(first)["domain"]["state"] == "Running"

    server.publish({"domain": {"state": "Shutoff"}})
    # No await since publish(): these reads block the loop, so only what publish() itself sent can be there.
    for sock in watchers:
        sock.setblocking(True)
        sock.settimeout(2)
        assert protocol.decode(sock.recv(protocol.MAX_LINE))["domain"]["state"] == "Shutoff"
        sock.close()
    await server.stop()
