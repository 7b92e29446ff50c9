"""The tail of a pod's log, which controllers read for what a pod reports only there (progress, a server's address)."""

from __future__ import annotations

import logging

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError

log = logging.getLogger("pykubevirt.client.pod_logs")


async def pod_log_tail(client: KubeClient, namespace: str, name: str, lines: int) -> str | None:
    """The last `lines` lines of the pod's log; None while it cannot be read (not started yet, gone, node away)."""
    path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
    try:
        return await client.read_text(path, {"tailLines": str(lines)})
    except (ApiError, ConnectionError, TimeoutError) as exc:
        log.debug("no log of %s/%s yet: %s", namespace, name, exc)
        return None
