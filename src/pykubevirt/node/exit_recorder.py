"""The wrapper every container process runs under: `python -m pykubevirt.node.exit_recorder STATE -- CMD...`.

It starts CMD, forwards SIGTERM/SIGINT/SIGHUP to it and, when it ends, writes `{"exitCode": N, "finishedAt": …}`
to STATE, so the node agent learns exit codes even for processes it did not start (after its own restart). Like a
container runtime ending a container, it then kills whatever CMD left behind in its process group. Stdlib only:
it runs with the container's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from types import FrameType

from pykubevirt.api.timestamps import now_rfc3339

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# Exit status when CMD cannot be started at all (a shell's "command not executable").
START_FAILURE_EXIT_CODE = 128


def write_state(path: str, state: dict[str, object]) -> None:
    """Write `state` atomically (write a sibling, then rename), so readers never see half a file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as out:
        json.dump(state, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def exit_code_of(returncode: int) -> int:
    """A shell's convention, which Kubernetes reports too: killed by signal N → 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _kill_leftovers() -> None:
    """SIGKILL the other members of our process group (what CMD forked and left running)."""
    me = os.getpid()
    group = os.getpgrp()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


class SignalForwarder:
    """Forwards FORWARDED_SIGNALS to the command; those that arrive before it exists are delivered once it does."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.pending: list[int] = []

    def install(self) -> None:
        # Handlers first, so a SIGTERM racing the start is forwarded rather than killing us alone. The node agent
        # starts us with these signals blocked (one sent before this point waits); unblocking delivers it here, and
        # the command, started after, gets the ordinary mask.
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self._forward)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED_SIGNALS)

    def attach(self, pid: int) -> None:
        self.child = pid
        for early in self.pending:
            with contextlib.suppress(OSError):
                os.kill(pid, early)
        self.pending.clear()

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        if self.child is None:
            self.pending.append(signum)
            return
        with contextlib.suppress(OSError):
            os.kill(self.child, signum)


def wait_and_record(state_path: str, pid: int) -> int:
    """Wait for the command `pid`, write its exit to `state_path`, kill what it left in our group; its exit code."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    returncode = os.waitstatus_to_exitcode(status)
    code = exit_code_of(returncode)
    state: dict[str, object] = {"exitCode": code, "finishedAt": now_rfc3339(), "pid": pid}
    if returncode < 0:
        state["signal"] = -returncode
    write_state(state_path, state)
    _kill_leftovers()
    return code


def run(state_path: str, command: list[str]) -> int:
    forwarder = SignalForwarder()
    forwarder.install()
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"exit_recorder: cannot start {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        write_state(state_path, {"exitCode": START_FAILURE_EXIT_CODE, "finishedAt": now_rfc3339(), "message": str(exc)})
        return START_FAILURE_EXIT_CODE
    forwarder.attach(child.pid)
    return wait_and_record(state_path, child.pid)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m pykubevirt.node.exit_recorder STATE-FILE -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return run(args[0], args[2:])


if __name__ == "__main__":
    sys.exit(main())
