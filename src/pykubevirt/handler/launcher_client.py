"""virt-handler's side of the launcher command socket (the protocol is `launcher.protocol`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from pykubevirt.api import pod_layout
from pykubevirt.launcher import protocol
from pykubevirt.launcher.protocol import (
    Command,
    HotplugReply,
    MigrationRequest,
    PingReply,
    ProtocolMismatch,
    ShutdownReply,
    Status,
)

REQUEST_TIMEOUT = 60.0
PEER = "virt-launcher"

__all__ = ["CommandFailed", "LauncherClient", "LauncherUnavailable", "ProtocolMismatch", "connectable"]


class LauncherUnavailable(Exception):
    """The launcher's socket does not exist yet (`initializing`) or nobody answers on it (`unresponsive`)."""

    def __init__(self, message: str, *, initializing: bool) -> None:
        super().__init__(message)
        self.initializing = initializing


class CommandFailed(Exception):
    """The launcher answered with an error."""


def connectable(path: str) -> str:
    """A unix socket path short enough to connect to (the link resolved when the given one is too long)."""
    if len(path.encode()) <= pod_layout.UNIX_PATH_MAX:
        return path
    return os.path.realpath(path)


def _reply(line: bytes, command: str) -> dict[str, Any]:
    """A reply line checked for this protocol version; a launcher's error becomes CommandFailed."""
    try:
        answer = protocol.decode(line)
    except ValueError as exc:
        raise CommandFailed(f"{PEER} answered {command} with something that is not a JSON object") from exc
    protocol.check_version(answer, PEER)
    if not answer.get("ok"):
        raise CommandFailed(str(answer.get("error") or f"{command} failed"))
    return answer


class LauncherClient:
    """Requests to one launcher; each request uses its own short connection.

    Every answer is checked for the protocol version first: a launcher of another version raises ProtocolMismatch.
    """

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path

    @classmethod
    def of_pod(cls, pods_dir: Path, pod_uid: str) -> LauncherClient:
        """The launcher of the pod `pod_uid` on this node."""
        return cls(Path(pod_layout.launcher_socket(str(pods_dir), pod_uid)))

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not self.socket_path.exists() and not self.socket_path.is_symlink():
            raise LauncherUnavailable(f"launcher socket {self.socket_path} does not exist", initializing=True)
        path = connectable(str(self.socket_path))
        try:
            return await asyncio.open_unix_connection(path, limit=protocol.MAX_LINE)
        except FileNotFoundError as exc:
            raise LauncherUnavailable(f"launcher socket {path} is gone", initializing=False) from exc
        except (ConnectionRefusedError, OSError) as exc:
            raise LauncherUnavailable(f"launcher on {path} does not answer: {exc}", initializing=False) from exc

    async def request(
        self,
        command: Command | str,
        *,
        vmi: dict[str, Any] | None = None,
        hotplug: dict[str, dict[str, Any]] | None = None,
        migration: MigrationRequest | dict[str, Any] | None = None,
        move_cursor: bool | None = None,
        unfreeze_timeout: int | None = None,
    ) -> dict[str, Any]:
        """Send one command and return the launcher's answer (CommandFailed when it answers with an error)."""
        reader, writer = await self._open()
        try:
            writer.write(
                protocol.encode(
                    protocol.request(
                        command,
                        vmi=vmi,
                        request_id=1,
                        hotplug=hotplug,
                        migration=protocol.parse_migration(dict(migration)) if migration is not None else None,
                        move_cursor=move_cursor,
                        unfreeze_timeout=unfreeze_timeout,
                    )
                )
            )
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
        except (ConnectionError, TimeoutError) as exc:
            raise LauncherUnavailable(f"launcher did not answer {command}: {exc}", initializing=False) from exc
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if not line:
            raise LauncherUnavailable(f"launcher closed the connection during {command}", initializing=False)
        return _reply(line, str(command))

    # The typed commands. The casts stand on the version check: a launcher of this version answers these shapes.

    async def ping(self) -> PingReply:
        return cast(PingReply, await self.request(Command.PING))

    async def status(self) -> Status:
        return cast(Status, await self.request(Command.STATUS))

    async def sync(self, vmi: dict[str, Any]) -> Status:
        """Define and start the domain of `vmi` unless it exists."""
        return cast(Status, await self.request(Command.SYNC, vmi=vmi))

    async def hotplug(self, vmi: dict[str, Any], mounts: dict[str, dict[str, Any]]) -> HotplugReply:
        """Mount `mounts` (volume → {"path"}) into the launcher and attach/detach hotplugged disks as `vmi` says."""
        return cast(HotplugReply, await self.request(Command.HOTPLUG, vmi=vmi, hotplug=mounts))

    async def shutdown(self) -> ShutdownReply:
        """Press the guest's ACPI power button."""
        return cast(ShutdownReply, await self.request(Command.SHUTDOWN))

    async def kill(self) -> Status:
        return cast(Status, await self.request(Command.KILL))

    async def delete(self) -> Status:
        """Undefine the domain; the launcher exits afterwards."""
        return cast(Status, await self.request(Command.DELETE))

    async def watch(self) -> AsyncIterator[Status]:
        """Status updates until the launcher closes the stream."""
        reader, writer = await self._open()
        try:
            writer.write(protocol.encode(protocol.request(Command.WATCH)))
            await writer.drain()
            while True:
                line = await reader.readline()
                if not line:
                    return
                update = protocol.decode(line)
                protocol.check_version(update, PEER)
                yield cast(Status, update)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
