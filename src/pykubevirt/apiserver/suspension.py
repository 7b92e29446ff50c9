"""Lets a synchronous write await I/O (an admission webhook) without letting any other request run inside it.

The object API is synchronous and single-threaded. `run_suspendable` runs a write in a worker thread while the
event loop's thread waits for it, so only one of them runs at a time; when the write calls `await_from_write`,
the loop's thread awaits the coroutine (serving other requests meanwhile) and hands the result back. Between two
such points the write runs alone, as it would inline, so the store sees the same single writer.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_local = threading.local()


class _Channel:
    def __init__(self) -> None:
        # Worker → loop: ("await", coroutine) | ("done", value) | ("error", exception).
        self.up: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # Loop → worker: ("ok", value) | ("error", exception).
        self.down: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()


def in_suspendable_write() -> bool:
    """Whether the calling code runs under `run_suspendable` (and so may call `await_from_write`)."""
    return getattr(_local, "channel", None) is not None


def await_from_write(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await `coroutine` on the event loop from inside a write run by `run_suspendable`; returns its result."""
    channel: _Channel | None = getattr(_local, "channel", None)
    if channel is None:
        coroutine.close()
        raise RuntimeError("await_from_write outside run_suspendable")
    channel.up.put(("await", coroutine))
    kind, value = channel.down.get()
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


class WriteCancelled(Exception):
    """The request was cancelled (its client went away) while its write awaited."""


async def run_suspendable(write: Callable[[], T]) -> T:
    """Run `write` with the event loop's thread held, except while it awaits through `await_from_write`."""
    channel = _Channel()

    def body() -> None:
        _local.channel = channel
        try:
            channel.up.put(("done", write()))
        except BaseException as exc:  # handed to the awaiting request as raised
            channel.up.put(("error", exc))
        finally:
            _local.channel = None

    threading.Thread(target=body, name="suspendable-write", daemon=True).start()
    while True:
        # Blocking here is the point: the worker runs alone until it finishes or awaits.
        kind, value = channel.up.get()
        if kind == "done":
            return value  # type: ignore[no-any-return]
        if kind == "error":
            raise value
        try:
            result = await value
        except asyncio.CancelledError:
            # The write must still unwind before the loop runs anything else that touches the store.
            channel.down.put(("error", WriteCancelled()))
            while True:
                kind, value = channel.up.get()
                if kind != "await":
                    raise
                value.close()
                channel.down.put(("error", WriteCancelled()))
        except Exception as exc:
            channel.down.put(("error", exc))
        else:
            channel.down.put(("ok", result))
