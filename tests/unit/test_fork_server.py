"""The node's fork server with real processes: a `pykubevirt` container forked from the preloaded Python behaves
as one started afresh (its arguments, environment, directory, log, session, signals and exit code)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.api import pod_layout
from pykubevirt.node import processes
from pykubevirt.node.containers import INHERITED_ENV, ProcessRuntime, Started, StartError

SCRIPT = os.path.join(os.path.dirname(sys.executable), "pykubevirt")


def container_env(**extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
    env["PATH"] = f"{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    env.update(extra)
    return env


@pytest.fixture
def runtime() -> Iterator[ProcessRuntime]:
    runtime = ProcessRuntime()
    yield runtime
    runtime.close()


def forking(runtime: ProcessRuntime, env: dict[str, str]) -> None:
    """Start the server (the first eligible container would) and wait until it has imported."""
    assert runtime.fork_server is not None
    deadline = time.monotonic() + 30
    while not runtime.fork_server.serves(SCRIPT, env):
        assert time.monotonic() < deadline, "the fork server did not become ready"
        time.sleep(0.05)


def children_of(pid: int, timeout: float = 10.0) -> list[int]:
    """The children of `pid`, once it has one (the recorder forks its command right after it is reported)."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = processes._stat_fields(int(entry))
                if fields is not None and int(fields[1]) == pid:
                    found.append(int(entry))
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def wait_gone(started: Started, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while processes.is_alive(started.pid, started.ticks):
        assert time.monotonic() < deadline, f"pid {started.pid} did not end"
        time.sleep(0.05)


def parent_of(pid: int) -> int:
    fields = processes._stat_fields(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[1])


def start_failing_validate(runtime: ProcessRuntime, tmp_path: Path, env: dict[str, str]) -> Started:
    """A short `pykubevirt` command that fails: validating a file that does not exist."""
    return runtime.start(
        ["pykubevirt", "validate", "-f", str(tmp_path / "missing.yaml")],
        env=env,
        cwd=str(tmp_path),
        log_file=tmp_path / "log",
        exit_file=tmp_path / "exit",
    )


def recorded_exit_code(runtime: ProcessRuntime, started: Started, tmp_path: Path) -> int:
    wait_gone(started)
    runtime.reap(started.pid)
    return int(json.loads((tmp_path / "exit").read_text())["exitCode"])


def test_a_launcher_forked_from_the_server_looks_and_ends_as_a_fresh_one(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    uid = f"fork-{uuid.uuid4().hex[:8]}"
    env = container_env(POD_UID=uid, MARKER="forked-launcher")
    forking(runtime, env)
    argv = ["pykubevirt", "virt-launcher", "--name", "vm1", "--uid", uid, "--namespace", "default"]
    argv += ["--kubevirt-share-dir", str(tmp_path / "share"), "--libvirt-uri", "test:///default"]
    (tmp_path / "work").mkdir()
    started = runtime.start(
        argv, env=env, cwd=str(tmp_path / "work"), log_file=tmp_path / "log", exit_file=tmp_path / "exit"
    )
    try:
        # The recorder leads its own session and process group; the launcher is its only child.
        assert os.getsid(started.pid) == started.pid == os.getpgid(started.pid)
        (command,) = children_of(started.pid)
        assert os.getpgid(command) == started.pid
        # It takes the command's arguments right after the fork (ps, and the node's sweep of a pod's leftovers).
        expected = [SCRIPT.encode(), *map(str.encode, argv[1:])]
        deadline = time.monotonic() + 10
        while (cmdline := Path(f"/proc/{command}/cmdline").read_bytes().split(b"\0")[:-1]) != expected:
            assert time.monotonic() < deadline, cmdline
            time.sleep(0.01)
        environ = dict(
            item.split(b"=", 1) for item in Path(f"/proc/{command}/environ").read_bytes().split(b"\0") if item
        )
        assert environ[b"MARKER"] == b"forked-launcher" and environ[b"POD_UID"] == uid.encode()
        assert os.readlink(f"/proc/{command}/cwd") == str(tmp_path / "work")
        # Not an interpreter of its own: its parent's parent is the fork server.
        assert runtime.fork_server is not None and runtime.fork_server._process is not None
        assert parent_of(started.pid) == runtime.fork_server._process.pid
        socket_path = Path(pod_layout.short_runtime_dir(uid)) / "launcher-sock"
        deadline = time.monotonic() + 30
        while not socket_path.exists():
            assert time.monotonic() < deadline, (tmp_path / "log").read_text()
            time.sleep(0.05)
        # Nothing blocked or ignored that a fresh interpreter would have: the SIGTERM reaches the launcher's handler.
        assert runtime.terminate(started.pid, started.ticks)
        wait_gone(started)
        state = json.loads((tmp_path / "exit").read_text())
        assert (state["exitCode"], state["pid"]) == (0, command)
        log_text = (tmp_path / "log").read_text()
        assert "launcher serving on" in log_text and "graceful shutdown requested" in log_text
    finally:
        runtime.kill(started.pid, started.ticks)
        shutil.rmtree(pod_layout.short_runtime_dir(uid), ignore_errors=True)


def test_a_forked_command_s_exit_code_and_error_are_recorded(runtime: ProcessRuntime, tmp_path: Path) -> None:
    env = container_env()
    forking(runtime, env)
    started = start_failing_validate(runtime, tmp_path, env)
    assert recorded_exit_code(runtime, started, tmp_path) == 1
    assert "missing.yaml" in (tmp_path / "log").read_text()


def test_a_container_that_cannot_enter_its_network_namespace_fails_to_start(
    runtime: ProcessRuntime, tmp_path: Path
) -> None:
    env = container_env()
    forking(runtime, env)
    with pytest.raises(StartError, match="network namespace"):
        runtime.start(
            ["pykubevirt", "validate", "-f", "-"],
            env=env,
            cwd=str(tmp_path),
            log_file=tmp_path / "log",
            exit_file=tmp_path / "exit",
            netns=f"pkv-missing-{uuid.uuid4().hex[:8]}",
        )
    # The server is still there for the next container.
    assert runtime.fork_server is not None and runtime.fork_server.serves(SCRIPT, env)


def test_other_interpreter_settings_get_a_fresh_interpreter(runtime: ProcessRuntime, tmp_path: Path) -> None:
    env = container_env()
    forking(runtime, env)
    other = {**env, "PYTHONPATH": f"{tmp_path}:{env.get('PYTHONPATH', '')}"}
    started = start_failing_validate(runtime, tmp_path, other)
    # A fresh interpreter under the stdlib recorder: the recorder's parent is this process, not the server.
    assert parent_of(started.pid) == os.getpid()
    assert recorded_exit_code(runtime, started, tmp_path) == 1


def test_containers_start_without_the_server_once_it_has_gone(runtime: ProcessRuntime, tmp_path: Path) -> None:
    env = container_env()
    forking(runtime, env)
    assert runtime.fork_server is not None and runtime.fork_server._process is not None
    server = runtime.fork_server._process
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    started = start_failing_validate(runtime, tmp_path, env)
    assert parent_of(started.pid) == os.getpid()
    assert recorded_exit_code(runtime, started, tmp_path) == 1
    assert not runtime.fork_server.serves(SCRIPT, env)
