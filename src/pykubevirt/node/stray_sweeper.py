"""Killing the processes pods left behind, for every pod ending at about the same time with one scan of /proc.

A scan reads two files per process on the host; with one scan per ending pod, a node stopping n pods reads O(n²)
files on its event loop. Here the pods that end while a scan runs wait for the next one, which serves them all, and
scans run in a thread.
"""

from __future__ import annotations

import asyncio

from pykubevirt.node.processes import kill_strays_of_pods


class StraySweeper:
    """`await kill(marker)`: SIGKILL a pod's strays (see `processes.pod_strays`); concurrent calls share a scan."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[int]]] = {}
        self._task: asyncio.Task[None] | None = None
        self.scans = 0

    async def kill(self, marker: str) -> int:
        """How many stray processes of the pod `marker` names were signalled."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(marker, []).append(future)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._sweep(), name="stray-sweeper")
        return await future

    async def _sweep(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            self.scans += 1
            try:
                killed = await asyncio.to_thread(kill_strays_of_pods, list(batch))
            except Exception as exc:  # every waiter hears of it, not only the first
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(exc)
                continue
            for marker, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(killed.get(marker, 0))
