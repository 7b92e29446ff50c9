"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection package does it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from pykubevirt.api.timestamps import parse_time
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.resources import LEASES

log = logging.getLogger("pykubevirt.client.leader")


def _micro(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquires and renews a Lease; runs `lead` while holding it and stops it when the lease is lost."""

    def __init__(
        self,
        client: KubeClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._observed: Object | None = None

    def _spec(self, now: datetime, transitions: int, acquired: str | None) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquired or _micro(now),
            "renewTime": _micro(now),
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, 0, None),
            }
            try:
                self._observed = await self.client.create(LEASES, body, self.namespace)
                return True
            except AlreadyExists:
                return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        held_by_other = holder and holder != self.identity
        if held_by_other and renewed is not None and renewed + timedelta(seconds=duration) > now:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if holder != self.identity else 0)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        lease["spec"] = self._spec(now, transitions, acquired)
        try:
            self._observed = await self.client.update(LEASES, lease)
            return True
        except Conflict:
            return False

    async def release(self) -> None:
        """Give the lease up so another replica takes over at once (on a clean shutdown)."""
        if self._observed is None or (self._observed.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease = dict(self._observed)
        spec = dict(lease.get("spec") or {})
        spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro(datetime.now(UTC))})
        lease["spec"] = spec
        try:
            self._observed = await self.client.update(LEASES, lease)
            log.info("released lease %s/%s", self.namespace, self.name)
        except (ApiError, OSError) as exc:
            log.info("could not release lease %s/%s: %s", self.namespace, self.name, exc)

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Block until leadership is won, run `lead` while renewing; return when leadership ends."""
        while True:
            try:
                if await self.try_acquire_or_renew():
                    break
            except (ApiError, OSError) as exc:
                log.warning("leader election for %s: %s", self.name, exc)
            await asyncio.sleep(self.retry_period)
        log.info("became leader of %s/%s as %s", self.namespace, self.name, self.identity)
        leading: asyncio.Task[None] = asyncio.create_task(lead())
        try:
            last_renew = asyncio.get_running_loop().time()
            while not leading.done():
                await asyncio.wait({leading}, timeout=self.retry_period)
                if leading.done():
                    break
                try:
                    if await self.try_acquire_or_renew():
                        last_renew = asyncio.get_running_loop().time()
                        continue
                except (ApiError, OSError) as exc:
                    log.warning("renewing lease %s failed: %s", self.name, exc)
                if asyncio.get_running_loop().time() - last_renew > self.renew_deadline:
                    log.error("lost leadership of %s/%s", self.namespace, self.name)
                    break
        finally:
            if not leading.done():
                leading.cancel()
            await asyncio.gather(leading, return_exceptions=True)
        if leading.done() and not leading.cancelled():
            failure = leading.exception()
            if failure is not None:
                raise failure
