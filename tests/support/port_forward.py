"""`kubectl port-forward` in the background, as a user leaves it running in another terminal."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tests.support.apiserver_process import KUBECTL

EXIT_TIMEOUT_SECONDS = 30
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


@dataclass
class PortForward:
    """The local ports kubectl listens on (in the order of its arguments), and kubectl itself."""

    ports: list[int]
    process: asyncio.subprocess.Process

    async def stderr_at_exit(self) -> tuple[int, str]:
        """kubectl's exit code and everything it wrote to stderr, once it has ended by itself."""
        assert self.process.stderr is not None
        err = await asyncio.wait_for(self.process.stderr.read(), EXIT_TIMEOUT_SECONDS)
        return await asyncio.wait_for(self.process.wait(), EXIT_TIMEOUT_SECONDS), err.decode()


@contextlib.asynccontextmanager
async def kubectl_port_forward(env: dict[str, str], *args: str, count: int = 1) -> AsyncIterator[PortForward]:
    """Start `kubectl port-forward ARGS` and wait until it listens on `count` ports; stopped (SIGTERM) at the end."""
    process = await asyncio.create_subprocess_exec(
        KUBECTL, "port-forward", *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None and process.stderr is not None
    try:
        ports: list[int] = []
        while len(ports) < count:
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            if not line:
                err = (await asyncio.wait_for(process.stderr.read(), 10)).decode()
                raise AssertionError(f"kubectl port-forward {' '.join(args)} did not start: {err.strip()}")
            if match := _FORWARDING.search(line):
                ports.append(int(match[1]))
        yield PortForward(ports, process)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
