"""Process identity and signalling through /proc: a pid plus its start time names one process, even across pid reuse."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger("pykubevirt.node.processes")

POLL_INTERVAL_SECONDS = 0.5


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None if it is gone."""
    fields = _stat_fields(pid)
    # fields[0] is field 3 (state); starttime is field 22.
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def is_alive(pid: int, ticks: int) -> bool:
    """Whether `pid` is still the process that started at `ticks` and has not exited (zombies have)."""
    if pid <= 0:
        return False
    fields = _stat_fields(pid)
    if fields is None or len(fields) <= 19:
        return False
    return int(fields[19]) == ticks and fields[0] not in ("Z", "X", "x")


def reap(pid: int) -> None:
    """Collect the exit status of a child of ours so it does not linger as a zombie (no-op for others)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def signal_process(pid: int, ticks: int, signum: int) -> bool:
    """Send `signum` to the process if it is still the one we started; returns whether it was sent."""
    if not is_alive(pid, ticks):
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def kill_group(pid: int, ticks: int) -> bool:
    """SIGKILL the process group led by `pid` (the wrapper, its command and what that forked)."""
    if not is_alive(pid, ticks):
        return False
    try:
        # The wrapper is a session and group leader (start_new_session), and alive: the group id is its pid.
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    except PermissionError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return True


def pod_strays(marker: str) -> list[int]:
    """Processes that left a pod's process groups but still belong to it: `marker` is in their command line or
    environment (libvirt daemonizes QEMU into its own session; a container runtime's cgroup would still hold it)."""
    return strays_of_pods([marker])[marker]


def strays_of_pods(markers: Iterable[str]) -> dict[str, list[int]]:
    """`pod_strays` for many pods in one pass over /proc: a scan costs O(processes), and with one scan per pod a
    node tearing down n pods (each with its processes) would read O(n²) files."""
    needles = {marker: marker.encode() for marker in markers}
    found: dict[str, list[int]] = {marker: [] for marker in needles}
    if not needles:
        return found
    own = os.getpid()
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit() or int(entry.name) == own:
                continue
            for marker in markers_in(entry.name, needles):
                found[marker].append(int(entry.name))
    return found


def markers_in(pid: str, needles: Mapping[str, bytes]) -> list[str]:
    """The markers whose bytes are in the process's command line or environment (none once it has gone)."""
    left, found = dict(needles), []
    for part in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as source:
                content = source.read()
        except OSError:
            break
        for marker, needle in list(left.items()):
            if needle in content:
                found.append(marker)
                del left[marker]
    return found


def kill_pod_strays(marker: str) -> int:
    """SIGKILL every stray process of a pod (see `pod_strays`); returns how many were signalled."""
    return kill_strays_of_pods([marker])[marker]


def kill_strays_of_pods(markers: Iterable[str]) -> dict[str, int]:
    """SIGKILL the stray processes of many pods after one scan of /proc; how many were signalled, per marker."""
    killed: dict[str, int] = {}
    for marker, pids in strays_of_pods(markers).items():
        killed[marker] = 0
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed[marker] += 1
            log.warning("killed process %d left behind by a pod's containers", pid)
    return killed


class ExitWatcher:
    """Calls back once a process exits: a pidfd readable event where Linux offers it, else polling /proc."""

    def __init__(self) -> None:
        self._fds: dict[tuple[int, int], int] = {}
        self._polls: dict[tuple[int, int], asyncio.Task[None]] = {}

    def watch(self, pid: int, ticks: int, callback: Callable[[], None]) -> None:
        key = (pid, ticks)
        if key in self._fds or key in self._polls:
            return
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            loop.call_soon(callback)
            return
        except (AttributeError, OSError):
            self._polls[key] = loop.create_task(self._poll(key, callback))
            return
        # Checked after opening: the pidfd now pins this pid, so the start time cannot change under us.
        if not is_alive(pid, ticks):
            os.close(fd)
            loop.call_soon(callback)
            return
        self._fds[key] = fd

        def readable() -> None:
            self._close(key)
            callback()

        loop.add_reader(fd, readable)

    async def _poll(self, key: tuple[int, int], callback: Callable[[], None]) -> None:
        try:
            # Without a pidfd there is nothing to wait on but /proc.
            while is_alive(*key):  # noqa: ASYNC110
                await asyncio.sleep(POLL_INTERVAL_SECONDS)
        finally:
            self._polls.pop(key, None)
        callback()

    def _close(self, key: tuple[int, int]) -> None:
        fd = self._fds.pop(key, None)
        if fd is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def close(self) -> None:
        for key in list(self._fds):
            self._close(key)
        for task in list(self._polls.values()):
            task.cancel()
        self._polls.clear()
