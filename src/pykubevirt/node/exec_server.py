"""The node's exec endpoint: `GET /exec/{namespace}/{pod}/{container}?command=…&stdin=&stdout=&stderr=&tty=`, a
WebSocket speaking Kubernetes' channel protocol, what the API server's pods/exec relays (the kubelet's streaming
server for `kubectl exec`). Its caller's bearer token must be one the API server's RBAC lets `create nodes/proxy` on
this node, as the kubelet's webhook authorization decides.

Each binary message starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 the final Status, 4 a terminal resize
(`{"Width": w, "Height": h}`); in v5 a client's `255, 0` closes stdin. The command runs as the pod's containers
run here: a host process in the pod's network namespace, with the container's environment and working directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pty
import signal
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import WSMsgType, web

from pykubevirt.client.delegated_auth import Decision, status_body
from pykubevirt.log import object_fields
from pykubevirt.node import containers as runtime_mod
from pykubevirt.node.env import ConfigError
from pykubevirt.node.exit_recorder import exit_code_of
from pykubevirt.node.log_server import LogError
from pykubevirt.node.netns import enter_argv

if TYPE_CHECKING:
    from pykubevirt.node.pod_worker import PodWorker

log = logging.getLogger("pykubevirt.node.exec_server")

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
READ_CHUNK = 32768
_TRUE = ("true", "1")


@dataclass(frozen=True, slots=True)
class ExecTarget:
    """How to run a command in a container: the network namespace's prefix, the environment and directory."""

    prefix: list[str]
    env: dict[str, str]
    cwd: str
    resolve: Callable[[str], str]


class ExecSource(Protocol):
    async def authorize(self, authorization: str | None) -> Decision: ...

    async def exec_target(self, namespace: str, pod: str, container: str) -> ExecTarget: ...


async def container_exec_target(worker: PodWorker, pod: dict[str, Any], container: dict[str, Any]) -> ExecTarget:
    """What the container's own process got: its environment, working directory and network namespace."""
    if worker.volumes is None:
        raise LogError(400, f'unable to upgrade connection: container not found ("{container.get("name")}")')
    try:
        spec_env, env, cwd = await worker.process_context(pod, container)
    except (ConfigError, runtime_mod.StartError, OSError) as exc:
        raise LogError(500, f"error preparing the command's environment: {exc}") from exc
    netns = worker.sandbox.netns()
    return ExecTarget(
        enter_argv(netns) if netns is not None else [],
        env,
        cwd,
        lambda command: runtime_mod.resolve_command(command, runtime_mod.search_path(spec_env)),
    )


def exit_status(code: int, argv: list[str]) -> dict[str, Any]:
    """The kubelet's Status for a command's end: Success, or NonZeroExitCode with the code as its cause."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command {_go_list(argv)}, "
        f"exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_error(message: str) -> dict[str, Any]:
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


def _go_list(argv: list[str]) -> str:
    return "[" + " ".join(argv) + "]"


class ExecSession:
    """One command: its process, and the WebSocket its streams travel on."""

    def __init__(self, ws: web.WebSocketResponse, argv: list[str], *, stdin: bool, stdout: bool, stderr: bool) -> None:
        self.ws = ws
        self.argv = argv
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.process: asyncio.subprocess.Process | None = None
        self.master: int | None = None  # the pty's side we read and write, with a terminal

    async def send(self, channel: int, data: bytes) -> None:
        if not self.ws.closed:
            await self.ws.send_bytes(bytes([channel]) + data)

    async def run(self, target: ExecTarget, tty: bool) -> None:
        try:
            executable = target.resolve(self.argv[0])
        except runtime_mod.StartError as exc:
            await self.send(ERROR, json.dumps(internal_error(f"error executing command in container: {exc}")).encode())
            return
        argv = [*target.prefix, executable, *self.argv[1:]]
        pumps: list[Awaitable[None]] = []
        if tty:
            self.master, slave = pty.openpty()
            argv = [*target.prefix, "setsid", "--ctty", executable, *self.argv[1:]]
            self.process = await asyncio.create_subprocess_exec(
                *argv, stdin=slave, stdout=slave, stderr=slave, env=target.env, cwd=target.cwd
            )
            os.close(slave)
            pumps.append(self._pump_terminal(self.master))
        else:
            pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
            self.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=pipe if self.stdin else null,
                stdout=pipe if self.stdout else null,
                stderr=pipe if self.stderr else null,
                env=target.env,
                cwd=target.cwd,
                start_new_session=True,
            )
            for channel, stream in ((STDOUT, self.process.stdout), (STDERR, self.process.stderr)):
                if stream is not None:
                    pumps.append(self._pump(channel, stream))
        reader = asyncio.create_task(self._read_client())
        try:
            await asyncio.gather(*pumps)
            code = exit_code_of(await self.process.wait())
            await self.send(ERROR, json.dumps(exit_status(code, self.argv)).encode())
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._stop()

    async def _pump(self, channel: int, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(READ_CHUNK):
            await self.send(channel, chunk)

    async def _pump_terminal(self, master: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                chunk = await loop.run_in_executor(None, os.read, master, READ_CHUNK)
            except OSError:  # EIO: every holder of the terminal's other side has closed it
                return
            if not chunk:
                return
            await self.send(STDOUT, chunk)

    async def _read_client(self) -> None:
        """stdin, resizes and v5's close of stdin from the client; the client gone ends the command."""
        async for message in self.ws:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            channel, data = message.data[0], message.data[1:]
            if channel == STDIN and data:
                await self._write_stdin(data)
            elif channel == RESIZE and self.master is not None:
                self._resize(data)
            elif channel == CLOSE and data[:1] == bytes([STDIN]):
                self._close_stdin()
        self._stop()

    async def _write_stdin(self, data: bytes) -> None:
        if self.master is not None:
            os.write(self.master, data)
        elif self.process is not None and self.process.stdin is not None:
            self.process.stdin.write(data)
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                await self.process.stdin.drain()

    def _close_stdin(self) -> None:
        if self.master is not None:
            os.write(self.master, b"\x04")  # a terminal's end of input
        elif self.process is not None and self.process.stdin is not None:
            self.process.stdin.close()

    def _resize(self, data: bytes) -> None:
        assert self.master is not None
        with contextlib.suppress(ValueError, TypeError, OSError):
            size = json.loads(data)
            packed = struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0)
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, packed)

    def _stop(self) -> None:
        """Kill what the command left running (its session), as a runtime ends an exec whose client left."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None


async def serve_exec(request: web.Request, source: ExecSource) -> web.StreamResponse:
    """The handler: refuse with a plain answer before the upgrade, else run the command over the socket; a request
    without the upgrade only asks whether the command could run (200), as the API server does before it upgrades."""
    # A command as root on this host: only a caller the API server's RBAC lets `create nodes/proxy` (the kubelet's
    # rule for exec), which the API server is when it relays a user's pods/exec.
    decision = await source.authorize(request.headers.get("Authorization"))
    if decision.code != 200:
        return web.json_response(status_body(decision), status=decision.code)
    query = request.query
    argv = query.getall("command", [])
    flags = {name: query.get(name, "").lower() in _TRUE for name in ("stdin", "stdout", "stderr", "tty")}
    try:
        if not argv:
            raise LogError(400, "you must specify at least one command for the container")
        target = await source.exec_target(
            request.match_info["namespace"], request.match_info["pod"], request.match_info["container"]
        )
    except LogError as exc:
        return web.Response(status=exc.status, text=exc.message + "\n")
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.Response(text="ok\n")  # a look before the upgrade: the command could run
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0)
    await ws.prepare(request)
    pod = {"kind": "Pod", "metadata": {"namespace": request.match_info["namespace"], "name": request.match_info["pod"]}}
    log.info("exec in container %s: %s", request.match_info["container"], " ".join(argv), extra=object_fields(pod))
    session = ExecSession(ws, argv, stdin=flags["stdin"], stdout=flags["stdout"], stderr=flags["stderr"])
    try:
        await session.run(target, flags["tty"])
    finally:
        await ws.close()
    return ws
