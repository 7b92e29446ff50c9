"""The embedded API server: store, registry, admission, garbage collector and HTTPS endpoints, started as one unit.

It knows no KubeVirt: the command that starts it hands in extensions (`virtapi.embedded.extension`) that add
their CRDs, admission plugins, routes and in-process API groups.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.api.service_validation import DEFAULT_SERVICE_CIDR
from pykubevirt.apiserver import discovery, openapi, pod_exec, pod_logs, pod_port_forward, resource_metrics, security
from pykubevirt.apiserver.authorization.access_reviews import AccessReviews
from pykubevirt.apiserver.authorization.aggregation import AggregationController
from pykubevirt.apiserver.authorization.bootstrap_roles import reconcile_bootstrap_policy
from pykubevirt.apiserver.authorization.escalation import RBACAdmission
from pykubevirt.apiserver.authorization.policy_store import StorePolicy
from pykubevirt.apiserver.authorization.rbac import Authorizer
from pykubevirt.apiserver.authorization.request_filter import RequestAuthorizer
from pykubevirt.apiserver.builtin import (
    AUTHORIZATION_RESOURCES,
    BUILTIN_RESOURCES,
    EVENT_TTL_SECONDS,
    INITIAL_NAMESPACES,
    BuiltinDefaults,
)
from pykubevirt.apiserver.config_data_admission import ConfigDataAdmission
from pykubevirt.apiserver.crds import CRDController, validate_crd
from pykubevirt.apiserver.disruption_controller import DisruptionController
from pykubevirt.apiserver.garbage_collector import GarbageCollector
from pykubevirt.apiserver.http_api import USER, RestHandlers, error_response, json_response
from pykubevirt.apiserver.https_site import HTTPSOnlySite
from pykubevirt.apiserver.namespace_credentials import NamespaceCredentials
from pykubevirt.apiserver.object_api import ObjectAPI
from pykubevirt.apiserver.pod_garbage_collector import (
    CHECK_PERIOD_SECONDS,
    QUARANTINE_SECONDS,
    TERMINATED_POD_THRESHOLD,
    PodGarbageCollector,
)
from pykubevirt.apiserver.pod_validation import PodAdmission
from pykubevirt.apiserver.priority_classes import PRIORITY_CLASSES, PriorityAdmission, ensure_system_priority_classes
from pykubevirt.apiserver.request_context import SYSTEM_USER, AdmissionPlugin, RequestContext, UserInfo
from pykubevirt.apiserver.request_metrics import RequestMetrics
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.service_account_admission import ServiceAccountAdmission
from pykubevirt.apiserver.service_admission import ServiceAdmission
from pykubevirt.apiserver.storage_admission import StorageAdmission
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import StoreError
from pykubevirt.apiserver.token_requests import TokenRequests
from pykubevirt.apiserver.watch import WatchHub

log = logging.getLogger("pykubevirt.apiserver")

# system:public-info-viewer's paths.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})
# The unix socket in the data directory that the kubeconfigs this server writes name for clients on its host.
LOCAL_SOCKET_NAME = "apiserver.sock"
# Writes refused for the object's state: a conflict, or 422 (a JSON patch's failed test, an invalid object).
REJECTED_WRITE_CODES = frozenset({409, 422})
UNIX_PATH_MAX = 108  # sun_path's size on Linux, its terminating NUL included


class CRDAdmission:
    """Rejects CRDs kube-apiserver would reject (non-structural schemas, bad names)."""

    def handles(self, resource: Resource) -> bool:
        return resource.group == "apiextensions.k8s.io" and resource.kind == "CustomResourceDefinition"

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        validate_crd(obj)
        return []


@dataclass(slots=True)
class ServerOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 6443
    # History kept for watches to resume from; older resourceVersions get 410 Expired.
    history_revisions: int = 100_000
    compact_interval_seconds: float = 300.0
    # Events live this long after their last write (kube-apiserver's --event-ttl, 1h by default).
    event_ttl_seconds: int = EVENT_TTL_SECONDS
    # How often expired leases are looked for.
    lease_check_interval_seconds: float = 5.0
    # False: today's pre-durability behaviour (synchronous=NORMAL, a commit per write), for benchmarks only.
    fsync: bool = True
    extra_hostnames: list[str] = field(default_factory=list)
    # --service-cluster-ip-range: where Services get their ClusterIPs.
    service_cidr: str = DEFAULT_SERVICE_CIDR
    # The pod garbage collector's (kube-controller-manager's --terminated-pod-gc-threshold; its period and quarantine).
    terminated_pod_gc_threshold: int = TERMINATED_POD_THRESHOLD
    pod_gc_period_seconds: float = CHECK_PERIOD_SECONDS
    pod_gc_quarantine_seconds: float = QUARANTINE_SECONDS


ExtraHandler = Callable[[web.Request, UserInfo], Awaitable[web.StreamResponse]]
# Called once the server is built, before it serves; adds CRDs, admission, routes and start-up work to it.
Extension = Callable[["EmbeddedAPIServer"], None]


class EmbeddedAPIServer:
    """One process's API server; `start()` returns once it serves, `stop()` closes everything it opened."""

    def __init__(self, options: ServerOptions, extensions: Sequence[Extension] = ()) -> None:
        self.options = options
        self.data_dir = options.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.data_dir / "state.db", fsync=options.fsync)
        self.registry = Registry()
        self.registry.extend(
            dataclasses.replace(r, ttl_seconds=options.event_ttl_seconds) if r.ttl_seconds else r
            for r in BUILTIN_RESOURCES
        )
        self.registry.extend(AUTHORIZATION_RESOURCES)
        self.registry.add(PRIORITY_CLASSES)
        priority = PriorityAdmission(self.store)
        self.api = ObjectAPI(
            self.store,
            self.registry,
            admission=[
                BuiltinDefaults(),
                ConfigDataAdmission(),
                PodAdmission(),
                ServiceAccountAdmission(self.store),
                priority,
                StorageAdmission(self.store),
                ServiceAdmission(self.store, options.service_cidr),
                CRDAdmission(),
            ],
        )
        self.hub = WatchHub(self.store)
        self.crds = CRDController(self.api)
        self.openapi = openapi.OpenAPICache(self.registry)
        self.rest = RestHandlers(
            self.api, self.hub, max_body_bytes=security.MAX_BODY_BYTES, clock=lambda: datetime.now(UTC)
        )
        self.rest.delete_admission.append(priority.admit_delete)
        pod_logs.install(self.rest, self.api)
        # In-process aggregated API groups (subresources.kubevirt.io): (group, version) → (handler, APIResourceList).
        self.extra_groups: dict[tuple[str, str], tuple[ExtraHandler, dict[str, Any]]] = {}
        self.write_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.rejected_write_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.pki = security.ensure_pki(self.data_dir, list(options.extra_hostnames), [])
        self.tokens = security.ensure_tokens(self.data_dir)
        # The nodes review this token and allow it `create nodes/proxy`, as the kubelet allows kube-apiserver's.
        pod_exec.install(self.rest, self.api, lambda: self.tokens.admin_token)
        pod_port_forward.install(self.rest, self.api, lambda: self.tokens.admin_token)
        resource_metrics.install(self.extra_groups, self.api, lambda: self.tokens.admin_token)
        self.authorizer = Authorizer(StorePolicy(self.store))
        self.request_authorizer = RequestAuthorizer(self.authorizer)
        self.api.admission.append(RBACAdmission(self.authorizer))
        AccessReviews(self.authorizer, self.tokens).install(self.rest)
        TokenRequests(self.api, self.tokens, lambda: datetime.now(UTC)).install(self.rest)
        cluster_roles = self.registry.builtin("rbac.authorization.k8s.io", "v1", "clusterroles")
        self.aggregation = AggregationController(self.api, cluster_roles)
        self.gc: GarbageCollector | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._cleanups: list[Callable[[], Awaitable[None]]] = []
        self._crd_manifests: list[dict[str, Any]] = []
        self._route_adders: list[Callable[[web.Application], None]] = []
        self._policy: list[dict[str, Any]] = []
        self._namespaces: list[str] = list(INITIAL_NAMESPACES)
        # Each component gets its own identity (its service account's, in a cluster) and a kubeconfig at start.
        self._component_users: dict[str, str] = {"scheduler": security.SCHEDULER_USER}
        # The same, by user: who wrote, for the write counts.
        self._component_of_user = _component_of_each_user(self._component_users)
        self._startups: list[Callable[[], Awaitable[None]]] = []
        self._runner: web.AppRunner | None = None
        self.metrics = RequestMetrics(self.store)
        self.port = options.port
        # Paths that authenticate on their own (an extension's, e.g. CDI's upload proxy with its upload tokens).
        self.public_paths: set[str] = set(PUBLIC_PATHS)
        # Paths under these prefixes check their own credentials (an extension's proxy with tokens of its own).
        self.public_prefixes: list[str] = []
        for extension in extensions:
            extension(self)

    # -------------------------------------------------------------------------------------------------- wiring

    @property
    def url(self) -> str:
        return f"https://{self.options.host}:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.data_dir / "kubeconfig"

    def admin_token(self) -> str:
        return self.tokens.admin_token

    def add_cleanup(self, cleanup: Callable[[], Awaitable[None]]) -> None:
        """Have `stop()` await `cleanup` once the server no longer serves (extensions close their clients)."""
        self._cleanups.append(cleanup)

    def add_admission(self, plugin: AdmissionPlugin) -> None:
        """Run `plugin` on every write to the resources it handles, after the built-in ones."""
        self.api.admission.append(plugin)

    def add_crds(self, manifests: Iterable[dict[str, Any]]) -> None:
        """Install these CRDs at start (created, or updated when their spec changed)."""
        self._crd_manifests.extend(manifests)

    def add_bootstrap_policy(self, objects: Iterable[dict[str, Any]]) -> None:
        """Create these RBAC objects at start and keep them as shipped while they carry the autoupdate annotation."""
        self._policy.extend(objects)

    def add_namespace(self, name: str) -> None:
        """Create this namespace at start, as the initial ones (an extension's own, say)."""
        if name not in self._namespaces:
            self._namespaces.append(name)

    def add_component(self, name: str, service_account_user: str) -> None:
        """Mint a token for this service account at start and write `<name>.kubeconfig` for the component."""
        self._component_users[name] = service_account_user
        self._component_of_user = _component_of_each_user(self._component_users)

    def add_routes(self, add: Callable[[web.Application], None]) -> None:
        """Have `add` put its routes on the application before it serves."""
        self._route_adders.append(add)

    def on_start(self, start: Callable[[], Awaitable[None]]) -> None:
        """Await `start` once the server serves and its kubeconfigs exist (extensions open their clients)."""
        self._startups.append(start)

    def run_task(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        """Run `run` until `stop()`, restarted when it crashes (an extension's controller loop; call once serving)."""
        self._tasks.append(asyncio.create_task(self._supervise(name, run)))

    def _bootstrap(self) -> None:
        self.crds.load_stored()
        self.crds.install_crds(self._crd_manifests)
        namespaces = self.registry.builtin("", "v1", "namespaces")
        ctx = RequestContext(user=SYSTEM_USER)
        for name in self._namespaces:
            if self.api.find(namespaces, None, name) is None:
                self.api.create(
                    namespaces,
                    None,
                    {"metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
                    ctx,
                )
        ensure_system_priority_classes(self.api, ctx)
        reconcile_bootstrap_policy(self.api, self.registry, self._policy)
        self.aggregation.sync()

    def build_app(self) -> web.Application:
        app = web.Application(
            middlewares=[self.metrics.middleware, self._authenticate],
            client_max_size=security.MAX_BODY_BYTES + 1024 * 1024,
        )
        for add in self._route_adders:
            add(app)
        app.router.add_get("/debug/writes", self._debug_writes)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/livez", self._health)
        app.router.add_get("/readyz", self._health)
        app.router.add_get("/metrics", self.metrics.serve)
        # go-restful serves these with and without the trailing slash; the official Python client uses the latter.
        for slash in ("", "/"):
            app.router.add_get("/version" + slash, self._version)
            app.router.add_get("/api" + slash, self._api_versions)
            app.router.add_get("/apis" + slash, self._api_groups)
        app.router.add_get("/openapi/v2", self._openapi_v2)
        app.router.add_get("/openapi/v3", self._openapi_v3_index)
        app.router.add_get("/openapi/v3/{path:.*}", self._openapi_v3_doc)
        # Resource paths first: aiohttp tries the routes under one static prefix ("/apis") in the order they were
        # added, and nearly every request is for a resource. The shorter patterns never match a longer path.
        app.router.add_route("*", "/api/{version}/{tail:.*}", self._resource)
        app.router.add_route("*", "/apis/{group}/{version}/{tail:.*}", self._resource)
        app.router.add_route("*", "/api/{version}", self._discovery_or_resource)
        app.router.add_route("*", "/apis/{group}", self._group)
        app.router.add_route("*", "/apis/{group}/{version}", self._discovery_or_resource)
        return app

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path in self.public_paths or any(request.path.startswith(p) for p in self.public_prefixes):
            request[USER] = UserInfo("system:anonymous", ("system:unauthenticated",))
            return await handler(request)
        user = self.tokens.authenticate(request.headers.get("Authorization"))
        if user is None:
            return error_response(errors.unauthorized())
        try:
            request[USER] = self.request_authorizer.admit(request, UserInfo(user.username, tuple(user.groups)))
            response = await handler(request)
        except errors.APIError as exc:
            response = error_response(exc)
        except web.HTTPException:
            raise
        except Exception as exc:
            log.exception("request %s %s failed", request.method, request.path)
            response = error_response(errors.internal(str(exc)))
        try:
            # Group commit: whatever this request wrote (or read that another wrote) is on disk before it is answered.
            await self.store.durable()
        except StoreError as exc:
            return error_response(errors.internal(str(exc)))
        return response

    # -------------------------------------------------------------------------------------------------- handlers

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _version(self, request: web.Request) -> web.Response:
        return json_response(discovery.version_info())

    def _extra_lists(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {key: value[1] for key, value in self.extra_groups.items()}

    @staticmethod
    def _aggregated(body: dict[str, Any]) -> web.Response:
        response = web.Response(body=json.dumps(body, separators=(",", ":")).encode())
        response.headers["Content-Type"] = discovery.AGGREGATED_CONTENT_TYPE
        return response

    async def _api_versions(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept")):
            return self._aggregated(discovery.aggregated_discovery(self.registry, core=True))
        return json_response(discovery.api_versions(f"{self.options.host}:{self.port}"))

    async def _api_groups(self, request: web.Request) -> web.Response:
        if discovery.wants_aggregated(request.headers.get("Accept")):
            body = discovery.aggregated_discovery(self.registry, core=False, extra_resource_lists=self._extra_lists())
            return self._aggregated(body)
        return json_response(discovery.api_group_list(self.registry, self._extra_lists()))

    async def _group(self, request: web.Request) -> web.Response:
        group = request.match_info["group"]
        groups = discovery.api_group_list(self.registry, self._extra_lists())
        for entry in groups.get("groups", []):
            if entry.get("name") == group:
                return json_response({"kind": "APIGroup", "apiVersion": "v1", **{k: v for k, v in entry.items()}})
        return error_response(errors.resource_not_found())

    async def _discovery_or_resource(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info.get("group", "")
        version = request.match_info["version"]
        extra = self.extra_groups.get((group, version))
        if extra is not None:
            return json_response(extra[1])
        if request.method != "GET":
            return error_response(errors.method_not_allowed(request.method))
        listing = discovery.api_resource_list(self.registry, group, version, self._extra_lists())
        if listing is None:
            return error_response(errors.resource_not_found())
        return json_response(listing)

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        group = request.match_info.get("group", "")
        version = request.match_info["version"]
        extra = self.extra_groups.get((group, version))
        if extra is not None:
            response = await extra[0](request, request[USER])
        else:
            response = await self.rest.handle(request)
        if request.method != "GET" and (response.status < 400 or response.status in REJECTED_WRITE_CODES):
            self._count_write(request, response.status)
        return response

    def _count_write(self, request: web.Request, code: int) -> None:
        """Writes per component and resource, for measuring what a flow costs (GET /debug/writes).

        Writes refused for the object's state are counted apart: most are a writer working from a stale read (409,
        or a JSON patch's failed test), a request's worth of work for nothing and a retry.
        """
        user = request[USER].username
        component = self._component_of_user.get(user, "other")
        parts = [p for p in request.path.split("/") if p]
        tail = parts[2:] if parts[0] == "api" else parts[3:]
        if len(tail) >= 2 and tail[0] == "namespaces":
            tail = tail[2:] if len(tail) > 2 else tail
        resource = tail[0] if tail else ""
        if len(tail) >= 3:
            resource += "/" + tail[2]
        counts = self.write_counts if code < 400 else self.rejected_write_counts
        counts[(component, f"{request.method} {resource}")] += 1

    async def _debug_writes(self, request: web.Request) -> web.Response:
        def rows(counts: collections.Counter[tuple[str, str]]) -> list[dict[str, Any]]:
            return [{"user": u, "resource": r, "count": n} for (u, r), n in sorted(counts.items())]

        return json_response({"writes": rows(self.write_counts), "rejected": rows(self.rejected_write_counts)})

    async def _openapi_v2(self, request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        if accept and "json" not in accept and "*/*" not in accept:
            # client-go asks for protobuf here and could not parse JSON as such.
            return error_response(errors.not_acceptable("only application/json is served for /openapi/v2"))
        return web.Response(body=self.openapi.v2_bytes(), content_type="application/json")

    async def _openapi_v3_index(self, request: web.Request) -> web.Response:
        return web.Response(body=self.openapi.index_bytes(), content_type="application/json")

    async def _openapi_v3_doc(self, request: web.Request) -> web.Response:
        key = openapi.parse_document_key(request.match_info["path"])
        body = self.openapi.document_bytes(*key) if key is not None else None
        if body is None:
            return error_response(errors.resource_not_found())
        # The bytes the index's hash was computed over, serialised once per registry generation.
        return web.Response(body=body, content_type="application/json")

    # -------------------------------------------------------------------------------------------------- lifecycle

    def _pod_garbage_collector(self) -> PodGarbageCollector:
        return PodGarbageCollector(
            self.api,
            check_period=self.options.pod_gc_period_seconds,
            quarantine=self.options.pod_gc_quarantine_seconds,
            terminated_threshold=self.options.terminated_pod_gc_threshold,
        )

    async def start(self) -> None:
        self._bootstrap()
        self.gc = GarbageCollector(self.api)
        self._tasks = [
            asyncio.create_task(self._supervise("garbage-collector", self.gc.run)),
            asyncio.create_task(
                self._supervise("disruption", DisruptionController(self.api, lambda: datetime.now(UTC)).run)
            ),
            asyncio.create_task(self._supervise("pod-garbage-collector", self._pod_garbage_collector().run)),
            asyncio.create_task(self._supervise("event-expiry", self._expire_events)),
            asyncio.create_task(self._supervise("compaction", self._compact)),
            asyncio.create_task(self._supervise("clusterrole-aggregation", self.aggregation.run)),
            asyncio.create_task(
                self._supervise("namespace-credentials", NamespaceCredentials(self.api, self.pki.ca_pem.decode()).run)
            ),
        ]
        app = self.build_app()
        # handler_cancellation: a client that disconnects cancels its request, as kube-apiserver cancels the
        # request's context; an idle watch would otherwise hold its watcher until its timeout.
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        ssl_context = self.pki.server_ssl_context()
        sock = socket.socket(socket.AF_INET6 if ":" in self.options.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.options.host, self.options.port))
        self.port = sock.getsockname()[1]
        await HTTPSOnlySite(self._runner, sock, ssl_context).start()
        local_socket = await self._serve_local_socket()
        security.write_kubeconfig(
            self.kubeconfig_path,
            self.url,
            self.pki.ca_pem,
            self.tokens.admin_token,
            user_name="admin",
            local_socket=local_socket,
        )
        for component, user in self._component_users.items():
            token = self.tokens.ensure(user, security.service_account_groups(security.service_account_namespace(user)))
            security.write_kubeconfig(
                self.data_dir / f"{component}.kubeconfig",
                self.url,
                self.pki.ca_pem,
                token,
                user_name=component,
                local_socket=local_socket,
            )
        for start in self._startups:
            await start()
        log.info("serving on %s (data in %s, revision %d)", self.url, self.data_dir, self.store.revision)

    async def _serve_local_socket(self) -> str:
        """The same API, authenticated alike, on a 0600 unix socket in the data directory for clients on this host.

        A path too long for a unix socket leaves the clients on HTTPS."""
        assert self._runner is not None
        path = self.data_dir / LOCAL_SOCKET_NAME
        if len(str(path).encode()) >= UNIX_PATH_MAX:
            log.info("no local socket: %s is too long a path for a unix socket", path)
            return ""
        path.unlink(missing_ok=True)
        await web.UnixSite(self._runner, str(path)).start()
        path.chmod(0o600)
        return str(path)

    async def _supervise(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        while True:
            try:
                await run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s crashed; restarting it", name)
                await asyncio.sleep(1)

    async def _expire_events(self) -> None:
        """Remove objects whose lease ran out (Events), as kine's TTL loop does; watchers see DELETED."""
        while True:
            await asyncio.sleep(self.options.lease_check_interval_seconds)
            for record in self.store.expired():
                with contextlib.suppress(StoreError):
                    self.store.delete(record.collection, record.key, expected_revision=record.revision)

    async def _compact(self) -> None:
        while True:
            await asyncio.sleep(self.options.compact_interval_seconds)
            self.store.compact(self.options.history_revisions)
            self.store.checkpoint()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._runner is not None:
            await self._runner.cleanup()
        for cleanup in reversed(self._cleanups):
            with contextlib.suppress(Exception):
                await cleanup()
        self.store.close()
        log.info("stopped")


def _component_of_each_user(component_users: dict[str, str]) -> dict[str, str]:
    """Component by user; a user several components share is named by the first of them."""
    by_user: dict[str, str] = {}
    for component, user in component_users.items():
        by_user.setdefault(user, component)
    return by_user
