"""A test's own watch of one object, and informer caches that list once and then hear nothing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.informer import EventHandler, Informer
from pykubevirt.client.resources import ResourceRef


@contextlib.asynccontextmanager
async def watching(
    client: KubeClient, resource: ResourceRef, namespace: str | None, name: str, on_version: Callable[[Object], None]
) -> AsyncIterator[None]:
    """Call `on_version` with each version of namespace/name (the listed one, updates, the deleted one) meanwhile."""
    informer = Informer(client, resource, namespace=namespace, field_selector=f"metadata.name={name}")
    informer.add_handler(
        EventHandler(on_add=on_version, on_update=lambda _, obj: on_version(obj), on_delete=on_version)
    )
    task = asyncio.create_task(informer.run())
    await informer.synced.wait()
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def listed_once(*informers: Informer) -> None:
    """Fill the caches from one list each, then stop the informers: no later write comes back as an event."""
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    try:
        await asyncio.wait_for(asyncio.gather(*(informer.synced.wait() for informer in informers)), 10)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
