"""The process "container runtime": a container is its command run detached under the exit recorder (our own
`pykubevirt` commands forked, recorder and all, from the node's fork server; see `fork_server`).

Each process is a session leader (`start_new_session`), so it outlives the agent and a SIGKILL of its process group
ends everything it started. Its stdout and stderr go to the pod's log file; its environment is the pod's env plus
PYKUBEVIRT_MOUNTS; its `command[0]` is looked up in PATH and then next to this Python (the venv's bin, home of
the `pykubevirt` console script).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout
from pykubevirt.api.pod_layout import MOUNTS_ENV
from pykubevirt.node import processes
from pykubevirt.node.env import expand
from pykubevirt.node.exit_recorder import FORWARDED_SIGNALS
from pykubevirt.node.fork_server import ForkServer, ForkServerError
from pykubevirt.node.netns import enter_argv, netns_path

log = logging.getLogger("pykubevirt.node.containers")

# What a process inherits from the agent's own environment (a container would get these from its image).
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class StartError(Exception):
    """The container's process could not be started (the kubelet's RunContainerError)."""


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    ticks: int
    executable: str


def search_path(env: Mapping[str, str]) -> str:
    """The container's PATH followed by the directory of this Python, where our console scripts live."""
    path = env.get("PATH") or os.environ.get("PATH") or DEFAULT_PATH
    venv_bin = os.path.dirname(sys.executable)
    parts = path.split(os.pathsep)
    if venv_bin not in parts:
        parts.append(venv_bin)
    return os.pathsep.join(parts)


def resolve_command(command: str, path: str) -> str:
    """The executable `command` names: a path as written, or a name looked up in `path`."""
    # Not mapped through the volumeMounts: the process sees the host's files, only its mounts are told apart.
    if "/" in command:
        if os.path.isfile(command) and os.access(command, os.X_OK):
            return command
        raise StartError(f'exec: "{command}": stat {command}: no such file or directory')
    found = shutil.which(command, path=path)
    if found is None:
        raise StartError(f'exec: "{command}": executable file not found in $PATH')
    return found


def container_argv(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """command + args with `$(VAR)` expanded, as the kubelet passes them to the runtime."""
    command = [str(x) for x in container.get("command") or []]
    args = [str(x) for x in container.get("args") or []]
    argv = [expand(part, env) for part in [*command, *args]]
    if not command:
        raise StartError(
            f'container "{container.get("name")}" has no command: the pykubevirt node agent runs commands, '
            "it cannot run an image's entrypoint"
        )
    return argv


def process_env(spec_env: Mapping[str, str], mounts: Mapping[str, str], hostname: str, path: str) -> dict[str, str]:
    env = {key: os.environ[key] for key in INHERITED_ENV if key in os.environ}
    env["PATH"] = path
    env["HOSTNAME"] = hostname
    env.update(spec_env)
    env[MOUNTS_ENV] = json.dumps(dict(mounts), sort_keys=True)
    return env


def working_dir(container: Mapping[str, Any], mounts: Mapping[str, str], default: Path) -> str:
    """The host directory of workingDir: created inside a mount, required to exist elsewhere."""
    wanted = str(container.get("workingDir") or "")
    if not wanted:
        return str(default)
    host = pod_layout.host_path(wanted, mounts)
    if host != wanted:
        os.makedirs(host, exist_ok=True)
        return host
    if not os.path.isdir(host):
        raise StartError(f"working directory {wanted!r} does not exist on this host and is in no volume")
    return host


class ProcessRuntime:
    """Starts and signals container processes; remembers its own children only to reap them."""

    def __init__(self, *, fork_server: bool = True) -> None:
        self.watcher = processes.ExitWatcher()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # Our own `pykubevirt` commands (launchers above all) are forked from one preloaded Python.
        self.fork_server = ForkServer(INHERITED_ENV) if fork_server else None

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_file: Path,
        exit_file: Path,
        netns: str | None = None,
        cpus: frozenset[int] | None = None,
    ) -> Started:
        """Run argv under the exit recorder, detached (in the pod's network namespace, if it has one); raises
        StartError when it cannot be started."""
        executable = resolve_command(argv[0], env.get("PATH", ""))
        exit_file.unlink(missing_ok=True)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        if self.fork_server is not None and self.fork_server.serves(executable, env):
            try:
                pid = self.fork_server.spawn(
                    argv,
                    env=env,
                    cwd=cwd,
                    log_file=log_file,
                    exit_file=exit_file,
                    netns=netns_path(netns) if netns is not None else None,
                    cpus=cpus,
                )
                return Started(pid, processes.start_ticks(pid) or 0, executable)
            except ForkServerError as exc:
                raise StartError(f"cannot start {executable}: {exc}") from exc
            except OSError as exc:
                log.warning("the fork server has gone; containers start without it: %s", exc)
        wrapper = [
            sys.executable,
            "-P",
            "-m",
            "pykubevirt.node.exit_recorder",
            str(exit_file),
            "--",
            executable,
            *argv[1:],
        ]
        if cpus:
            # taskset execs in place too; the affinity holds before the command runs, and its children inherit it.
            wrapper = ["taskset", "-c", ",".join(map(str, sorted(cpus))), *wrapper]
        if netns is not None:
            # nsenter execs the recorder in place: the pid recorded is still the process group's leader.
            wrapper = [*enter_argv(netns), *wrapper]
        # The recorder is a Python that needs a while to start: a SIGTERM arriving before its handlers are in place
        # would kill it alone (the command never told, its exit never recorded). It starts with the signals it
        # forwards blocked, so they wait until it can forward them; the mask survives nsenter's and taskset's exec.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            with log_file.open("ab") as output:
                child = subprocess.Popen(
                    wrapper,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env=dict(env),
                    start_new_session=True,
                    close_fds=True,
                )
        except OSError as exc:
            raise StartError(f"cannot start {executable}: {exc.strerror or exc}") from exc
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self._children[child.pid] = child
        ticks = processes.start_ticks(child.pid) or 0
        return Started(child.pid, ticks, executable)

    def reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.poll()
        else:
            processes.reap(pid)

    def terminate(self, pid: int, ticks: int) -> bool:
        """SIGTERM to the exit recorder, which forwards it to the command (the container's PID 1 gets it)."""
        return processes.signal_process(pid, ticks, 15)

    def kill(self, pid: int, ticks: int) -> bool:
        return processes.kill_group(pid, ticks)

    def close(self) -> None:
        """Stop watching and forking; the processes themselves keep running."""
        self.watcher.close()
        if self.fork_server is not None:
            self.fork_server.close()
        for pid, child in list(self._children.items()):
            if child.poll() is not None:
                self._children.pop(pid, None)
