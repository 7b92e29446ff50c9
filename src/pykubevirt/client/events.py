"""Kubernetes Events about objects, as client-go's recorder posts them (repeats aggregated into a count)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import OrderedDict
from typing import Any

from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import EVENTS

log = logging.getLogger("pykubevirt.client.events")

NORMAL = "Normal"
WARNING = "Warning"
# Repeats of the same event within this window bump the count of the existing Event instead of adding one.
AGGREGATION_WINDOW_SECONDS = 600.0
# The events remembered for that, least recently recorded forgotten first (client-go's maxLruCacheEntries).
RECENT_EVENTS = 4096


class EventRecorder:
    """Posts Events in the background so reconcilers never wait on them; failures are only logged."""

    def __init__(self, client: KubeClient, component: str, host: str | None = None) -> None:
        self.client = client
        self.component = component
        self.host = host or socket.gethostname()
        self._recent: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, float]] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def event(self, obj: Object, event_type: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(self._post(obj, event_type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Wait for every Event posted so far (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _involved(self, obj: Object) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        ref = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        return {k: v for k, v in ref.items() if v}

    async def _post(self, obj: Object, event_type: str, reason: str, message: str) -> None:
        involved = self._involved(obj)
        namespace = str(involved.get("namespace") or "default")
        signature = (str(involved.get("uid", "")), event_type, reason, message)
        previous = self._recent.get(signature)
        now = time.monotonic()
        try:
            if previous is not None and now - previous[3] < AGGREGATION_WINDOW_SECONDS:
                name, event_namespace, count, _ = previous
                patch = {"count": count + 1, "lastTimestamp": now_rfc3339()}
                try:
                    await self.client.patch(EVENTS, name, patch, event_namespace)
                    self._remember(signature, (name, event_namespace, count + 1, now))
                    return
                except NotFound:
                    pass
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{involved.get('name', 'object')}.", "namespace": namespace},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": event_type,
                "source": {"component": self.component, "host": self.host},
                "firstTimestamp": now_rfc3339(),
                "lastTimestamp": now_rfc3339(),
                "eventTime": None,
                "count": 1,
                "reportingComponent": self.component,
                "reportingInstance": self.host,
            }
            created = await self.client.create(EVENTS, event, namespace)
            self._remember(signature, (str(created["metadata"]["name"]), namespace, 1, now))
        except (ApiError, OSError) as exc:
            log.warning("could not record event %s for %s: %s", reason, involved.get("name"), exc)

    def _remember(self, signature: tuple[str, str, str, str], entry: tuple[str, str, int, float]) -> None:
        """An LRU of RECENT_EVENTS: O(1) a post. (Filtering the whole map once it was full cost O(n) a post, for
        a node agent starting 1,000 pods a fifth of its CPU.)"""
        self._recent[signature] = entry
        self._recent.move_to_end(signature)
        while len(self._recent) > RECENT_EVENTS:
            self._recent.popitem(last=False)
