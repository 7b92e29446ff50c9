"""virt-handler's side of the launcher command socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout

REQUEST_TIMEOUT = 60.0


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


class LauncherClient:
    """Requests to one launcher; each request uses its own short connection."""

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
            return await asyncio.open_unix_connection(path, limit=4 * 1024 * 1024)
        except FileNotFoundError as exc:
            raise LauncherUnavailable(f"launcher socket {path} is gone", initializing=False) from exc
        except (ConnectionRefusedError, OSError) as exc:
            raise LauncherUnavailable(f"launcher on {path} does not answer: {exc}", initializing=False) from exc

    async def request(self, command: str, **fields: Any) -> dict[str, Any]:
        reader, writer = await self._open()
        try:
            writer.write(json.dumps({"id": 1, "cmd": command, **fields}).encode() + b"\n")
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
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise CommandFailed(str(answer.get("error") or f"{command} failed"))
        return answer

    async def watch(self) -> AsyncIterator[dict[str, Any]]:
        """Status updates until the launcher closes the stream."""
        reader, writer = await self._open()
        try:
            writer.write(b'{"cmd":"watch"}\n')
            await writer.drain()
            while True:
                line = await reader.readline()
                if not line:
                    return
                yield json.loads(line)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
