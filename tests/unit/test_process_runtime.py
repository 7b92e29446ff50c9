"""The process runtime with real processes: a SIGTERM sent the moment a container starts still reaches its command."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from pykubevirt.node import processes
from pykubevirt.node.containers import ProcessRuntime


def _wait_gone(pid: int, ticks: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while processes.is_alive(pid, ticks):
        assert time.monotonic() < deadline, f"pid {pid} outlived its SIGTERM"
        time.sleep(0.02)


def test_a_sigterm_sent_while_the_exit_recorder_starts_is_forwarded_to_the_command(tmp_path: Path) -> None:
    # The agent reports Running as soon as the wrapper exists and may SIGTERM it (a pod deleted at once) while the
    # wrapper's Python is still starting, before its handlers are installed. The command must get the SIGTERM and
    # its exit be recorded as 143, not lost with a wrapper the default disposition killed (then reported as 137).
    runtime = ProcessRuntime()
    try:
        for attempt in range(3):
            exit_file = tmp_path / f"exit-{attempt}"
            started = runtime.start(
                [sys.executable, "-c", "import time; time.sleep(600)"],
                env={"PATH": "/usr/bin:/bin"},
                cwd=str(tmp_path),
                log_file=tmp_path / "log",
                exit_file=exit_file,
            )
            assert runtime.terminate(started.pid, started.ticks)
            _wait_gone(started.pid, started.ticks)
            runtime.reap(started.pid)
            assert exit_file.exists(), "the exit recorder died before it could record the command's exit"
            result = json.loads(exit_file.read_text())
            assert (result["exitCode"], result.get("signal")) == (128 + signal.SIGTERM.value, signal.SIGTERM.value)
    finally:
        runtime.close()


def test_the_command_itself_does_not_inherit_blocked_signals(tmp_path: Path) -> None:
    runtime = ProcessRuntime()
    try:
        code = "import signal; print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])), flush=True)"
        started = runtime.start(
            [sys.executable, "-c", code],
            env={"PATH": "/usr/bin:/bin"},
            cwd=str(tmp_path),
            log_file=tmp_path / "log",
            exit_file=tmp_path / "exit",
        )
        _wait_gone(started.pid, started.ticks)
        runtime.reap(started.pid)
        assert json.loads((tmp_path / "exit").read_text())["exitCode"] == 0
        assert (tmp_path / "log").read_text().strip() == "[]"
    finally:
        runtime.close()
