"""virt-handler's heartbeat: the node annotation the node controller watches, and the schedulable label."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pykubevirt.api import constants as c
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import NODES

log = logging.getLogger("pykubevirt.handler.heartbeat")

HEARTBEAT_INTERVAL_SECONDS = 15.0


def heartbeat_patch(stamp: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Node merge patch of one beat: the time, the handler's own annotations, and schedulable."""
    return {
        "metadata": {
            "annotations": {c.HEARTBEAT_ANNOTATION: stamp, **(annotations or {})},
            "labels": {c.NODE_SCHEDULABLE_LABEL: "true"},
        }
    }


async def beat(client: KubeClient, node: str, annotations: Mapping[str, str] | None = None) -> None:
    await client.patch(NODES, node, heartbeat_patch(now_rfc3339(), annotations))


async def heartbeat_loop(
    client: KubeClient,
    node: str,
    interval: float = HEARTBEAT_INTERVAL_SECONDS,
    annotations: Callable[[], Mapping[str, str]] | None = None,
    wake: asyncio.Event | None = None,
) -> None:
    """Beat every `interval` seconds (with the handler's address), and at once when `wake` is set (the address
    changed); a missing Node is waited for."""
    while True:
        try:
            await beat(client, node, annotations() if annotations else None)
        except (ApiError, OSError) as exc:
            log.warning("heartbeat for node %s failed: %s", node, exc, extra={"node": node})
            # Usually the node agent has not registered the Node yet: the node is unschedulable until we beat.
            await asyncio.sleep(min(interval, 1.0))
            continue
        if wake is None:
            await asyncio.sleep(interval)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval)
        wake.clear()
