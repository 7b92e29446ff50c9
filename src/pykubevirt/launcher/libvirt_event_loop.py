"""libvirt's event loop on the launcher's asyncio loop, safe for the libvirt threads that change it.

libvirt arms its event timers and handles from any thread: a QEMU driver worker queues a domain event (the guest
panicked, QEMU exited) and sets the dispatch timer to fire at once. libvirt-python's libvirtaio then starts an
asyncio task from that thread, which does not wake the loop: the event waited for whatever woke the loop next (a
command, a poll), seconds later on an idle launcher, and a status read in between could show the stopped guest
before the event that explains it. Here a change made off the loop's thread is handed to the loop with
`call_soon_threadsafe`, which wakes it; the loop's own changes apply at once, as before.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import libvirtaio


class ThreadSafeEventImpl(libvirtaio.virEventAsyncIOImpl):  # type: ignore[misc]  # libvirtaio has no types
    """libvirtaio's implementation, with the registrations of other threads applied on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        # Made where the loop runs (the launcher connects to libvirt from a coroutine).
        self._loop_thread = threading.get_ident()

    def _elsewhere(self) -> bool:
        return threading.get_ident() != self._loop_thread

    def _later(self, change: Any, iden: int, *args: Any) -> None:
        """`change(iden, *args)` on the loop, unless the callback was removed before the loop got to it."""

        def apply() -> None:
            if iden in self.callbacks:
                change(iden, *args)

        self.loop.call_soon_threadsafe(apply)

    def _remove_later(self, remove: Any, iden: int) -> int:
        if iden not in self.callbacks:
            return -1
        self._later(remove, iden)
        return 0

    # -------------------------------------------------------------------------------------------------- timers

    def _add_timeout(self, timeout: int, cb: Any, opaque: Any) -> int:
        if not self._elsewhere():
            return int(super()._add_timeout(timeout, cb, opaque))
        # Registered now (libvirt needs its number back), armed on the loop.
        timer = int(super()._add_timeout(-1, cb, opaque))
        self._later(super()._update_timeout, timer, timeout)
        return timer

    def _update_timeout(self, timer: int, timeout: int) -> None:
        if self._elsewhere():
            self._later(super()._update_timeout, timer, timeout)
        else:
            super()._update_timeout(timer, timeout)

    def _remove_timeout(self, timer: int) -> int:
        if self._elsewhere():
            return self._remove_later(super()._remove_timeout, timer)
        return int(super()._remove_timeout(timer))

    # ------------------------------------------------------------------------------------------------- handles

    def _add_handle(self, fd: int, event: int, cb: Any, opaque: Any) -> int:
        if not self._elsewhere():
            return int(super()._add_handle(fd, event, cb, opaque))
        callback = libvirtaio.FDCallback(self, cb, opaque, descriptor=self.descriptors[fd], event=event)
        self.callbacks[callback.iden] = callback
        self._pending_inc()
        self._later(lambda _iden: callback.descriptor.add_handle(callback), callback.iden)
        return int(callback.iden)

    def _update_handle(self, watch: int, event: int) -> None:
        if self._elsewhere():
            self._later(super()._update_handle, watch, event)
        else:
            super()._update_handle(watch, event)

    def _remove_handle(self, watch: int) -> int:
        if self._elsewhere():
            return self._remove_later(super()._remove_handle, watch)
        return int(super()._remove_handle(watch))
