"""The reconcile loop: events map to keys on a work queue; workers reconcile keys level-triggered.

A reconciler reads the informer caches and writes through the API. Errors requeue the key with backoff;
`Result(requeue_after=…)` asks to look again later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pykubevirt.api.objects import controller_owner, metadata
from pykubevirt.client.api import Object
from pykubevirt.client.informer import EventHandler, Informer, object_key, wait_for_sync
from pykubevirt.client.workqueue import ShutDown, WorkQueue

log = logging.getLogger("pykubevirt.client.controller")

KeyMapper = Callable[[Object], Iterable[str]]


@dataclass(frozen=True, slots=True)
class Result:
    requeue_after: float | None = None


class Reconciler(Protocol):
    async def reconcile(self, key: str) -> Result | None: ...


def own_key(obj: Object) -> list[str]:
    return [object_key(obj)]


def controller_owner_key(obj: Object, kind: str) -> str:
    """The key of the object's controlling owner of `kind`; "" when it has none."""
    ref = controller_owner(obj, kind)
    if ref is None:
        return ""
    namespace = metadata(obj).get("namespace")
    return f"{namespace}/{ref['name']}" if namespace else str(ref["name"])


def owner_keys(kind: str) -> KeyMapper:
    """Keys of the controlling owner of `kind` (EnqueueRequestForOwner with IsController)."""

    def keys(obj: Object) -> list[str]:
        key = controller_owner_key(obj, kind)
        return [key] if key else []

    return keys


async def run_until_failure(tasks: list[asyncio.Task[None]]) -> None:
    """Wait for the tasks; the first one to fail is raised, and whatever still runs is cancelled."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Controller:
    """A named work queue, its event sources and `workers` reconcile tasks."""

    def __init__(self, name: str, reconciler: Reconciler, *, workers: int = 1) -> None:
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self.queue: WorkQueue[str] = WorkQueue(name=name)
        self.informers: list[Informer] = []
        self.failures = 0

    def watch(self, informer: Informer, mapper: KeyMapper = own_key) -> Controller:
        """Enqueue `mapper(obj)` for every add, update and delete the informer sees."""

        def enqueue(obj: Object) -> None:
            for key in mapper(obj):
                self.queue.add(key)

        def on_update(old: Object, new: Object) -> None:
            enqueue(new)
            if mapper is not own_key:
                enqueue(old)

        informer.add_handler(EventHandler(on_add=enqueue, on_update=on_update, on_delete=enqueue))
        if informer not in self.informers:
            self.informers.append(informer)
        return self

    async def run(self) -> None:
        """Wait for the caches, then reconcile until cancelled."""
        await wait_for_sync(self.informers)
        log.info("controller %s: caches synced, starting %d workers", self.name, self.workers)
        workers = [asyncio.create_task(self._worker(i), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        try:
            await asyncio.gather(*workers)
        finally:
            self.queue.shutdown()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)

    async def _worker(self, index: int) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.monotonic()
            try:
                result = await self.reconciler.reconcile(key)
                self.queue.forget(key)
                if result is not None and result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                retries = self.queue.retries(key)
                self.queue.add_rate_limited(key)
                level = logging.WARNING if retries < 5 else logging.ERROR
                log.log(
                    level,
                    "%s: reconcile of %s failed (attempt %d): %s",
                    self.name,
                    key,
                    retries + 1,
                    exc,
                    exc_info=not isinstance(exc, OSError) and retries == 0,
                )
            finally:
                self.queue.done(key)
                elapsed = time.monotonic() - started
                if elapsed > 1.0:
                    log.info("%s: reconcile of %s took %.2fs", self.name, key, elapsed)
