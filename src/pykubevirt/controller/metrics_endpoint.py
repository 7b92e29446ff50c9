"""virt-controller's HTTP endpoint: GET /metrics (Prometheus' text format, to a bearer token the API server accepts
and RBAC allows `get /metrics`), GET /healthz (open, for the liveness probe) and GET /leader (open, for the
readiness probe: 200 from every replica, saying whether it leads with its caches filled, as KubeVirt's).

KubeVirt's virt-controller serves them on its port 8443. Here it listens where `--metrics-listen` says (loopback,
an ephemeral port by default) and writes the address it got to `--metrics-address-file`, where `pykubevirt status`
reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from aiohttp import web
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pykubevirt.client.delegated_auth import DelegatedAuth, status_body
from pykubevirt.metrics.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger("pykubevirt.controller.metrics")


class _Chain(Collector):
    """The process-wide metrics (work queues, REST client, process) and this controller's own."""

    def __init__(self, own: Collector) -> None:
        self.own = own

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
        yield from self.own.collect()


class MetricsEndpoint:
    def __init__(
        self,
        collector: Collector,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        auth: DelegatedAuth | None = None,
        leading: Callable[[], bool] = lambda: False,
    ) -> None:
        self.source = _Chain(collector)
        self.leading = leading
        # /metrics wants a bearer token the API server accepts and RBAC allows `get /metrics` (None: open).
        self.auth = auth
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.auth is not None:
            decision = await self.auth.decide(request.headers.get("Authorization"), request.path)
            if decision.code != 200:
                return web.json_response(status_body(decision), status=decision.code)
        return web.Response(body=generate_latest(self.source), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    async def _healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _leader(self, request: web.Request) -> web.Response:
        return web.json_response({"apiserver": {"leader": "true" if self.leading() else "false"}})

    async def start(self, address_file: Path | None = None) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/leader", self._leader)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = int(self._runner.addresses[0][1])
        log.info("serving metrics at http://%s/metrics", self.address)
        if address_file is not None:
            address_file.parent.mkdir(parents=True, exist_ok=True)
            temporary = address_file.with_suffix(".tmp")
            temporary.write_text(self.address + "\n")
            temporary.replace(address_file)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
