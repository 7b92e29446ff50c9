"""This process's stdin and stdout as byte streams for the event loop, whatever they are (tty, pipe, socket, file)."""

from __future__ import annotations

import asyncio
import os
import select
from collections.abc import AsyncIterator

READ_SIZE = 65536


class StdinChunks:
    """Chunks of a file descriptor as they arrive, without a thread (a blocked reader thread would hold the process
    at exit); `close()` stops watching it."""

    def __init__(self, fd: int, read_size: int = READ_SIZE) -> None:
        self.fd = fd
        self.read_size = read_size
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()
        try:
            self.loop.add_reader(fd, self._readable)
            self.polled = True
        except (PermissionError, ValueError):
            # Regular files cannot be polled; reading them never blocks for long.
            self.polled = False

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, self.read_size)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        self.queue.put_nowait(data)
        if not data:
            self.loop.remove_reader(self.fd)

    async def read(self) -> bytes:
        """The next chunk; b"" at end of input."""
        if self.polled:
            return await self.queue.get()
        return await asyncio.to_thread(os.read, self.fd, self.read_size)

    async def chunks(self) -> AsyncIterator[bytes]:
        while data := await self.read():
            yield data

    def close(self) -> None:
        if self.polled:
            self.loop.remove_reader(self.fd)


async def write_all(fd: int, data: bytes) -> None:
    """Write everything to `fd`, waiting for it to drain when it is non-blocking (a socket shared with stdin)."""
    view = memoryview(data)
    loop = asyncio.get_running_loop()
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_writer(fd, ready.set_result, None)
            try:
                await ready
            finally:
                loop.remove_writer(fd)
            continue
        view = view[written:]


async def reader_gone(fd: int, interval: float = 0.5) -> None:
    """Return once nobody reads `fd` any more: the far end of a pipe or socket closed (poll reports an error or a
    hang-up). A terminal or a file never ends this way."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    while True:
        events = poller.poll(0)
        if any(mask & (select.POLLERR | select.POLLHUP) for _, mask in events):
            return
        await asyncio.sleep(interval)
