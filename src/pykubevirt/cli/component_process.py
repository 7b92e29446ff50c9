"""One embedded-cluster component as a child process: started detached, stopped by its PID, never by name."""

from __future__ import annotations

import os
import signal
import subprocess

from pykubevirt.cli.cluster_layout import Component


class ComponentProcess:
    """A component's process; output is appended to the component's log file."""

    def __init__(self, component: Component, env: dict[str, str] | None = None) -> None:
        self.component = component
        self.name = component.name
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ComponentProcess:
        self.component.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.component.log_file.open("ab") as log:
            # Its own session: a terminal's Ctrl+C reaches the supervisor, which stops components in order.
            self.process = subprocess.Popen(
                self.component.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Signal the process and wait for it; SIGKILL when it outlasts `timeout`."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
