"""The work queue of the in-process controllers that sync one namespace at a time (disruption budgets, namespace
credentials): a namespace is queued once until it is taken, a conflict queues it again, and a failure is logged
without stopping the controller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pykubevirt.api import errors

log = logging.getLogger("pykubevirt.apiserver.namespace_queue")


class NamespaceQueue:
    """Namespaces waiting for `sync`, each at most once."""

    def __init__(self, what: str, quiet_codes: frozenset[int] = frozenset({404})) -> None:
        self.what = what  # for the log: "disruption budgets of <namespace>: …"
        self.quiet_codes = quiet_codes
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pending: set[str] = set()

    def add(self, namespace: str) -> None:
        if namespace and namespace not in self._pending:
            self._pending.add(namespace)
            self._queue.put_nowait(namespace)

    async def run(self, sync: Callable[[str], None]) -> None:
        """Sync namespaces as they come until cancelled."""
        while True:
            namespace = await self._queue.get()
            self._pending.discard(namespace)
            try:
                sync(namespace)
            except errors.APIError as exc:
                if exc.code == 409:
                    self.add(namespace)
                elif exc.code not in self.quiet_codes:
                    log.warning("%s of %s: %s", self.what, namespace, exc.message)
            except Exception:
                log.exception("%s of %s failed", self.what, namespace)
            await asyncio.sleep(0)
