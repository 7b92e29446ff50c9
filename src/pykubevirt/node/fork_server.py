"""A preloaded Python that forks the node's `pykubevirt` containers instead of starting a fresh interpreter for each.

A launcher's imports are 20 MiB of private heap and 0.15 s of CPU in every pod; forked from one process that holds
them, a pod shares them copy-on-write (the zygote pattern). The node agent starts the server with one end of a
socket pair and sends it a request per container; the server forks a process that enters the container's
settings (session, network namespace, CPUs, directory, environment, log), becomes its exit recorder (as
`exit_recorder`) and forks the command, which returns from `serve` and runs as `pykubevirt ARGS...` would.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.node.exit_recorder import FORWARDED_SIGNALS, SignalForwarder, wait_and_record

# What the launcher imports, loaded once here; a module a command imports later is its own. Names, not imports:
# the node does not depend on the commands it runs.
# `runpy.run_path` imports pkgutil, the launcher's libvirt events libvirtaio (through libvirt_event_loop) and its
# first `to_thread` the executor.
PRELOAD = (
    "pykubevirt.cli.main",
    "pykubevirt.launcher.arguments",
    "pykubevirt.launcher.app",
    "pkgutil",
    "libvirtaio",
    "pykubevirt.launcher.libvirt_event_loop",
    "concurrent.futures.thread",
)
# Work each command would repeat, done once here: "module:function" called after the imports.
WARM_UP = ("pykubevirt.cli.main:pod_parser",)
REAP_INTERVAL_SECONDS = 1.0
REPLY_TIMEOUT_SECONDS = 10.0
MAX_MESSAGE = 1 << 20
CLONE_NEWNET = 0x40000000
PR_SET_MM, PR_SET_MM_MAP = 35, 14


class ForkServerError(Exception):
    """The server could not start a container (its message is why)."""


@dataclass(frozen=True, slots=True)
class Command:
    """What the forked command process runs: `pykubevirt` with these arguments."""

    argv: list[str]


# ------------------------------------------------------------------------------------------------ server side


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class _ProcessMap(ctypes.Structure):
    _fields_ = [
        *((field, ctypes.c_uint64) for field in ("start_code", "end_code", "start_data", "end_data", "start_brk")),
        *((field, ctypes.c_uint64) for field in ("brk", "start_stack", "arg_start", "arg_end", "env_start")),
        ("env_end", ctypes.c_uint64),
        ("auxv", ctypes.c_uint64),
        ("auxv_size", ctypes.c_uint32),
        ("exe_fd", ctypes.c_int32),
    ]


# The buffers /proc/<pid>/cmdline and environ point at once retitled; they live as long as the process.
_titles: list[ctypes.Array[ctypes.c_char]] = []


def _retitle(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Make /proc/<pid>/cmdline and environ show `argv` and `env`, as after an exec (ps, and the node's sweep of
    a pod's leftovers, read them). Needs CAP_SYS_RESOURCE; without it the process keeps the server's."""
    libc = _libc()
    libc.sbrk.restype = ctypes.c_void_p
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()

    def field(number: int) -> int:  # proc(5) numbers the fields from 1; `fields` starts at field 3
        return int(fields[number - 3])

    args = ctypes.create_string_buffer(b"".join(part.encode() + b"\0" for part in argv))
    environ = ctypes.create_string_buffer(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    _titles[:] = [args, environ]
    mm = _ProcessMap(
        field(26),
        field(27),
        field(45),
        field(46),
        field(47),
        libc.sbrk(0) or field(47),
        field(28),
        ctypes.addressof(args),
        ctypes.addressof(args) + len(args.raw) - 1,
        ctypes.addressof(environ),
        ctypes.addressof(environ) + len(environ.raw) - 1,
        0,
        0,
        -1,
    )
    libc.prctl(PR_SET_MM, PR_SET_MM_MAP, ctypes.byref(mm), ctypes.sizeof(mm), 0)


def _enter_netns(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ForkServerError(f"cannot enter network namespace {path}: {exc.strerror}") from exc
    try:
        if _libc().setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise ForkServerError(f"cannot enter network namespace {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def _enter(request: Mapping[str, Any], env: Mapping[str, str], log_fd: int, keep: int) -> None:
    """Become the container's recorder: its session, namespace, CPUs, directory, environment and output."""
    os.setsid()
    if request.get("netns"):
        _enter_netns(str(request["netns"]))
    if request.get("cpus"):
        os.sched_setaffinity(0, {int(cpu) for cpu in request["cpus"]})
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    # As `close_fds`: nothing of the server's (its channel, the other requests' files) leaks into the container.
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))


def _reset_signals() -> None:
    """The command starts with Python's own dispositions, as a fresh interpreter would."""
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


def _spawn(request: Mapping[str, Any], fds: list[int], channel: socket.socket) -> Command | dict[str, Any]:
    """Fork the container's recorder; in the server, the reply; in the command process, its Command."""
    argv = [str(part) for part in request["argv"]]
    env = {str(k): str(v) for k, v in request["env"].items()}
    exit_file = str(request["exit_file"])
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(report_read)
        channel.detach()
        try:
            _enter(request, env, fds[0], report_write)
            recorder_title = [sys.executable, "-P", "-m", "pykubevirt.node.exit_recorder", exit_file, "--", *argv]
            with contextlib.suppress(OSError):
                _retitle(recorder_title, env)
            forwarder = SignalForwarder()
            forwarder.install()
        except BaseException as exc:  # told to the server, which tells the node agent
            message = str(exc) if isinstance(exc, ForkServerError) else f"{type(exc).__name__}: {exc}"
            os.write(report_write, message.encode() or b"?")
            os._exit(1)
        os.close(report_write)
        # From here on this process is the recorder, and neither it nor the command may fall back into the
        # server's loop: whatever goes wrong ends the process, its traceback in the container's log.
        try:
            child = os.fork()
            if child == 0:
                _reset_signals()
                with contextlib.suppress(OSError):
                    _retitle(argv, env)
                return Command(argv)
            forwarder.attach(child)
            os._exit(wait_and_record(exit_file, child))
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    os.close(report_write)
    for fd in fds:
        os.close(fd)
    failure = b""
    while chunk := os.read(report_read, 4096):
        failure += chunk
    os.close(report_read)
    if failure:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        return {"error": failure.decode(errors="replace")}
    return {"pid": pid}


def _reap() -> None:
    """Collect the recorders that ended (this server is their parent until it ends)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(channel: socket.socket) -> Command | None:
    """Answer the node agent's requests until it closes the channel; returns only in a forked command process."""
    # The preloaded heap is never collected here or in a child: a collection would write to every page of it.
    gc.freeze()
    channel.send(json.dumps({"ready": True}).encode())
    while True:
        readable, _, _ = select.select([channel], [], [], REAP_INTERVAL_SECONDS)
        _reap()
        if not readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 1)
        except OSError:
            return None
        if not data:
            return None  # the node agent has gone
        try:
            request = json.loads(data)
            result = _spawn(request, fds, channel) if len(fds) == 1 else {"error": "the request carried no log file"}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        if isinstance(result, Command):
            return result
        channel.send(json.dumps(result).encode())


def preload() -> None:
    """Load what every container would load, and do what each would do first (its children then share it)."""
    import importlib

    for module in PRELOAD:
        importlib.import_module(module)
    for target in WARM_UP:
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m pykubevirt.node.fork_server CHANNEL-FD", file=sys.stderr)
        return 2
    preload()
    command = serve(socket.socket(fileno=int(args[0])))
    if command is None:
        return 0
    # From here this is the container's process: it runs the console script as its exec would, with the modules
    # the script imports already loaded; the script's SystemExit ends the interpreter as usual.
    sys.argv = list(command.argv)
    runpy.run_path(command.argv[0], run_name="__main__")
    return 0


# ------------------------------------------------------------------------------------------------ node agent side


class ForkServer:
    """The node agent's handle on its fork server: started once, asked for each `pykubevirt` container."""

    def __init__(self, inherited: Sequence[str]) -> None:
        self.script = os.path.join(os.path.dirname(sys.executable), "pykubevirt")
        # The interpreter settings a container gets from the agent (`inherited`, the rest of its environment is
        # its own); the server runs with exactly these, so what it forks is what a fresh interpreter would be.
        self.python_env = {k: v for k, v in os.environ.items() if k.startswith("PYTHON") and k in inherited}
        self._process: subprocess.Popen[bytes] | None = None
        self._channel: socket.socket | None = None
        self._ready = False
        # Once it failed (it would not start, or died), containers run without it: a fresh interpreter each.
        self._failed = False

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # Its own session, so a terminal's Ctrl-C meant for the node agent does not reach it: it ends when the
            # agent closes the channel.
            self._process = subprocess.Popen(
                [sys.executable, "-P", "-m", "pykubevirt.node.fork_server", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                start_new_session=True,
                env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, **self.python_env},
            )
        except OSError:
            ours.close()
            self._failed = True
            return
        finally:
            theirs.close()
        self._channel = ours

    def serves(self, executable: str, env: Mapping[str, str]) -> bool:
        """Whether it can run this container: our own `pykubevirt`, with the interpreter settings it was started
        with (a different PYTHONPATH or PYTHON* option needs an interpreter of its own), once it is ready. The
        first such container starts the server and runs without it, while the server imports."""
        try:
            if not os.path.samefile(executable, self.script):
                return False
        except OSError:
            return False
        if self.python_env != {k: v for k, v in env.items() if k.startswith("PYTHON")}:
            return False
        if self._channel is None:
            if not self._failed:
                self.start()
            return False
        return self._ready or self._poll_ready()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_file: Path,
        exit_file: Path,
        netns: str | None,
        cpus: frozenset[int] | None,
    ) -> int:
        """Start the container (`netns` a namespace's path); the pid of its recorder, its process group's leader.
        ForkServerError if the server refused it, OSError if the server is gone (then it is not asked again)."""
        assert self._channel is not None
        request = {
            "argv": [self.script, *argv[1:]],
            "env": dict(env),
            "cwd": cwd,
            "exit_file": str(exit_file),
            "netns": netns,
            "cpus": sorted(cpus) if cpus else None,
        }
        try:
            with log_file.open("ab") as output:
                socket.send_fds(self._channel, [json.dumps(request).encode()], [output.fileno()])
            self._channel.settimeout(REPLY_TIMEOUT_SECONDS)
            reply = self._channel.recv(MAX_MESSAGE)
            if not reply:
                raise ConnectionResetError("the fork server has gone")
        except OSError:
            self._failed = True
            self.close()
            raise
        answer = json.loads(reply)
        if "error" in answer:
            raise ForkServerError(str(answer["error"]))
        return int(answer["pid"])

    def _poll_ready(self) -> bool:
        assert self._channel is not None
        readable, _, _ = select.select([self._channel], [], [], 0)
        if not readable:
            return False
        message = self._channel.recv(MAX_MESSAGE)
        if not message:
            self._failed = True
            self.close()
            return False
        self._ready = bool(json.loads(message).get("ready"))
        return self._ready

    def close(self) -> None:
        """Close the channel (the server ends on its end of file); the containers it started keep running."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._ready = False
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


if __name__ == "__main__":
    sys.exit(main())
