"""Certificates read from files that change under a running process: a Secret volume, which the kubelet updates in
place (an atomic swap of its `..data` link) when the Secret changes or first appears."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

log = logging.getLogger("pykubevirt.pki")

T = TypeVar("T")
Signature = tuple[tuple[int, int] | None, ...]


def signature(paths: Sequence[Path]) -> Signature:
    """Each file's modification time and size (None when it is missing), through the volume's links."""
    found: list[tuple[int, int] | None] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append(None)
        else:
            found.append((stat.st_mtime_ns, stat.st_size))
    return tuple(found)


class FileWatch(Generic[T]):
    """What `load` makes of `paths`, made again when they change; the last good one is kept while they are missing
    or unreadable, so a half-updated volume never takes working certificates away."""

    def __init__(self, paths: Sequence[Path], load: Callable[[], T]) -> None:
        self.paths = tuple(paths)
        self._load = load
        self._seen: Signature | None = None
        self._value: T | None = None

    def current(self) -> T | None:
        """The value for the files as they are now (None until they have all been there once, or without files)."""
        if not self.paths:
            return None
        now = signature(self.paths)
        if now == self._seen or any(entry is None for entry in now):
            return self._value
        try:
            self._value = self._load()
        except (OSError, ValueError, ssl.SSLError) as exc:
            # Retried at the next call: the signature is not recorded.
            log.warning("cannot load %s: %s", ", ".join(str(p) for p in self.paths), exc)
            return self._value
        self._seen = now
        return self._value

    async def wait(self, poll: float, what: str) -> T:
        """The value, once the files are all there (`what` is logged once while they are not)."""
        value = self.current()
        if value is None:
            log.info("waiting for %s in %s", what, ", ".join(str(p) for p in self.paths))
        while value is None:
            await asyncio.sleep(poll)
            value = self.current()
        return value

    async def follow(self, poll: float, applied: T, apply: Callable[[T, T], Awaitable[bool]]) -> None:
        """From `applied` on, call `apply(new, old)` each time the value changes; one that returns False (it could not
        take the new value, say the files changed again meanwhile) is called again at the next poll."""
        while True:
            await asyncio.sleep(poll)
            value = self.current()
            if value is not None and value is not applied and await apply(value, applied):
                applied = value
