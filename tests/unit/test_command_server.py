"""The launcher's command socket at shutdown: answers under way are sent, then every connection ends."""

from __future__ import annotations

import asyncio
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
