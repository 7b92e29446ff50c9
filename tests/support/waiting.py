"""Waiting in tests: until a condition holds (`eventually`), or checking that it keeps holding (`consistently`).

A fixed sleep before an assertion passes when the system is merely slow; these poll the condition itself. A probe
or check may be a plain function or a coroutine function. An AssertionError it raises fails the wait at once.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import ResourceRef

T = TypeVar("T")


async def _call(probe: Callable[[], Any]) -> Any:
    result = probe()
    return await result if inspect.isawaitable(result) else result


async def eventually(
    probe: Callable[[], Awaitable[T | None]] | Callable[[], T | None],
    *,
    timeout: float = 20.0,  # noqa: ASYNC109
    interval: float = 0.05,
) -> T:
    """Poll `probe` until it returns something truthy and return that; fail with the last value after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await _call(probe)
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


async def status_when(
    client: KubeClient,
    resource: ResourceRef,
    namespace: str,
    name: str,
    check: Callable[[dict[str, Any]], Any],
    timeout: float = 30.0,  # noqa: ASYNC109
) -> Object:
    """Poll the object until `check` holds for its status (an object not there yet keeps it waiting); return it."""

    async def probe() -> Object | None:
        try:
            found = await client.get(resource, name, namespace)
        except NotFound:
            return None
        return found if check(found.get("status") or {}) else None

    return await eventually(probe, timeout=timeout, interval=0.2)


async def consistently(check: Callable[[], Any], *, for_: float, interval: float = 0.05) -> None:
    """Poll `check` for `for_` seconds, first and last time included; fail as soon as it returns something falsy."""
    started = time.monotonic()
    deadline = started + for_
    while True:
        value = await _call(check)
        if not value:
            raise AssertionError(f"condition stopped holding after {time.monotonic() - started:.2f}s: {value!r}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(interval, remaining))


def eventually_sync(probe: Callable[[], T | None], *, timeout: float = 20.0, interval: float = 0.05) -> T:
    """`eventually` for tests without an event loop (kubectl, the Kubernetes Python client, libvirt)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


def consistently_sync(check: Callable[[], Any], *, for_: float, interval: float = 0.05) -> None:
    """`consistently` for tests without an event loop."""
    started = time.monotonic()
    deadline = started + for_
    while True:
        value = check()
        if not value:
            raise AssertionError(f"condition stopped holding after {time.monotonic() - started:.2f}s: {value!r}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(interval, remaining))
