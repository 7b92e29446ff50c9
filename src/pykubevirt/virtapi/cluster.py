"""virt-api in a real cluster: the aggregated subresource API and the admission webhooks on one HTTPS port.

Aggregated calls are authorized as upstream rest/authorizer.go does: requestheader client certificate, then a SAR.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api import constants as c
from pykubevirt.client.api import JSON_PATCH, KubeClient, Object
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.informer import EventHandler, Informer
from pykubevirt.client.resources import (
    CLUSTER_INSTANCETYPES,
    CLUSTER_PREFERENCES,
    CONFIG_MAPS,
    CONTROLLER_REVISIONS,
    DATA_VOLUMES,
    INSTANCETYPES,
    KUBEVIRTS,
    MIGRATIONS,
    PREFERENCES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    VM_RESTORES,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
    ResourceRef,
)
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.config.kubevirt_cr import ConfigFromKubeVirt
from pykubevirt.handler.certificates import client_watch
from pykubevirt.log import set_verbosity
from pykubevirt.pki.file_watch import FileWatch
from pykubevirt.virtapi import discovery
from pykubevirt.virtapi.app import SubresourceAPI
from pykubevirt.virtapi.eviction_webhook import EVICTION_PATH, EvictionWebhook
from pykubevirt.virtapi.handler_client import HandlerClient
from pykubevirt.virtapi.serving_certificates import POLL_SECONDS as SERVING_POLL_SECONDS
from pykubevirt.virtapi.webhooks import add_webhook_routes

log = logging.getLogger("pykubevirt.virtapi.cluster")

AUTH_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
APISERVICES = ResourceRef("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)
MUTATING_WEBHOOKS = ResourceRef(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
)
VALIDATING_WEBHOOKS = ResourceRef(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False
)
MUTATING_WEBHOOK_NAME = "virt-api-mutator"
VALIDATING_WEBHOOK_NAME = "virt-api-validator"
# Reachable without a client certificate (upstream noAuthEndpoints): discovery, health, version.
NO_AUTH_SUFFIXES = ("", "/version", "/healthz", "/guestfs")
# What admission looks up, by kind.
LOOKUP_RESOURCES: dict[str, ResourceRef] = {
    c.VMI_KIND: VIRTUAL_MACHINE_INSTANCES,
    c.VMIM_KIND: MIGRATIONS,
    c.INSTANCETYPE_KIND: INSTANCETYPES,
    c.CLUSTER_INSTANCETYPE_KIND: CLUSTER_INSTANCETYPES,
    c.PREFERENCE_KIND: PREFERENCES,
    c.CLUSTER_PREFERENCE_KIND: CLUSTER_PREFERENCES,
    c.DATA_VOLUME_KIND: DATA_VOLUMES,
    "ControllerRevision": CONTROLLER_REVISIONS,
    c.KUBEVIRT_KIND: KUBEVIRTS,
    # The restore admitter: its snapshot, the snapshot's content, the target VM and the namespace's restores.
    c.VM_KIND: VIRTUAL_MACHINES,
    c.VM_SNAPSHOT_KIND: VM_SNAPSHOTS,
    c.VM_SNAPSHOT_CONTENT_KIND: VM_SNAPSHOT_CONTENTS,
    c.VM_RESTORE_KIND: VM_RESTORES,
}


class InformerLookup:
    """Admission's read-only view of other objects, from informer caches (admission functions do no I/O)."""

    def __init__(self, client: KubeClient) -> None:
        self.informers = {kind: Informer(client, ref) for kind, ref in LOOKUP_RESOURCES.items()}

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        informer = self.informers.get(kind)
        return informer.get_by_name(namespace, name) if informer is not None else None

    def list(self, kind: str, namespace: str | None) -> list[dict[str, Any]]:
        informer = self.informers.get(kind)
        if informer is None:
            return []
        items = informer.items()
        return [o for o in items if namespace is None or (o.get("metadata") or {}).get("namespace") == namespace]


@dataclass
class RequestHeaderAuth:
    """The aggregator's requestheader configuration (configmap extension-apiserver-authentication)."""

    client_ca: str = ""
    allowed_names: list[str] = field(default_factory=list)
    user_headers: list[str] = field(default_factory=lambda: ["X-Remote-User"])
    group_headers: list[str] = field(default_factory=lambda: ["X-Remote-Group"])
    extra_prefixes: list[str] = field(default_factory=lambda: ["X-Remote-Extra-"])

    @classmethod
    async def load(cls, client: KubeClient) -> RequestHeaderAuth:
        namespace, name = AUTH_CONFIGMAP
        data = (await client.get(CONFIG_MAPS, name, namespace)).get("data") or {}
        if not data.get("requestheader-client-ca-file"):
            raise RuntimeError("requestheader-client-ca-file not found in extension-apiserver-authentication ConfigMap")

        def strings(key: str, default: list[str]) -> list[str]:
            raw = data.get(key)
            return [str(v) for v in json.loads(raw)] if raw else default

        auth = cls(client_ca=str(data["requestheader-client-ca-file"]))
        auth.allowed_names = strings("requestheader-allowed-names", [])
        auth.user_headers = strings("requestheader-username-headers", auth.user_headers)
        auth.group_headers = strings("requestheader-group-headers", auth.group_headers)
        auth.extra_prefixes = strings("requestheader-extra-headers-prefix", auth.extra_prefixes)
        return auth

    def review(self, request: web.Request) -> dict[str, Any] | str:
        """The SubjectAccessReview for a request, or why there can be none."""
        user = next((request.headers[h] for h in self.user_headers if h in request.headers), None)
        if user is None:
            return "a valid user header is required for authorization"
        groups = next((request.headers.getall(h) for h in self.group_headers if h in request.headers), None)
        if groups is None:
            return "a valid group header is required for authorization"
        extra: dict[str, list[str]] = {}
        for key in request.headers:
            for prefix in self.extra_prefixes:
                if key.lower().startswith(prefix.lower()):
                    extra[unquote(key[len(prefix) :].lower())] = list(request.headers.getall(key))
        parts = request.path.split("/")
        # /apis/<group>/<version>/namespaces/<ns>/<resource>/<name>/<subresource…>
        if len(parts) < 9 or parts[6] not in ("virtualmachines", "virtualmachineinstances"):
            return f"unknown api endpoint: {request.path}"
        verbs = {"GET": "get", "HEAD": "get", "PUT": "update", "POST": "create", "PATCH": "patch", "DELETE": "delete"}
        if request.method not in verbs:
            return f"unknown http verb in request: {request.method}"
        attributes = {
            "namespace": parts[5],
            "verb": verbs[request.method],
            "group": parts[2],
            "version": parts[3],
            "resource": parts[6],
            "subresource": "/".join(parts[8:]),
            "name": parts[7],
        }
        spec = {"user": user, "groups": groups, "extra": extra, "resourceAttributes": attributes}
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}

    def peer_allowed(self, request: web.Request) -> bool:
        """A client certificate was presented (TLS verified it against the requestheader CA) with an allowed CN."""
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if not peer:
            return False
        if not self.allowed_names:
            return True
        subject = dict(item[0] for item in peer.get("subject", ()))
        return subject.get("commonName") in self.allowed_names


def authorization_middleware(client: KubeClient, auth: RequestHeaderAuth) -> Any:
    """Authorize subresource calls like upstream virt-api: 401 with the reason as plain text when refused."""
    base = f"/apis/{discovery.GROUP}"
    open_paths = {base, "/", "/apis"} | {f"{base}/{v}{s}" for v in discovery.VERSIONS for s in NO_AUTH_SUFFIXES}

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not request.path.startswith(base) or request.path.rstrip("/") in open_paths:
            return await handler(request)
        if not auth.peer_allowed(request):
            return web.Response(status=401, text="request is not authenticated")
        review = auth.review(request)
        if isinstance(review, str):
            return web.Response(status=401, text=review)
        try:
            result = await client.request("POST", SUBJECT_ACCESS_REVIEWS, body=review)
        except (ApiError, OSError) as exc:
            log.error("internal error during auth request: %s", exc)
            return web.Response(status=500)
        status = (result or {}).get("status") or {}
        if not status.get("allowed"):
            return web.Response(status=401, text=str(status.get("reason") or ""))
        return await handler(request)

    return middleware


def build_app(
    api: SubresourceAPI,
    admission: Callable[[], AdmissionContext],
    middleware: Any | None,
    eviction: EvictionWebhook | None = None,
) -> web.Application:
    """Webhook paths, the subresource group and the discovery roots the aggregator probes."""
    app = web.Application(middlewares=[middleware] if middleware is not None else [])
    add_webhook_routes(app, admission)
    if eviction is not None:
        app.router.add_post(EVICTION_PATH, eviction.handle)
    base = f"/apis/{discovery.GROUP}"
    paths = ["/apis", "/openapi/v2"] + [p for v in discovery.VERSIONS for p in (base, f"{base}/{v}")]

    async def root(request: web.Request) -> web.Response:
        return web.json_response({"paths": paths})

    async def groups(request: web.Request) -> web.Response:
        return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": [discovery.api_group()]})

    async def group(request: web.Request) -> web.Response:
        return web.json_response(discovery.api_group())

    async def openapi(request: web.Request) -> web.Response:
        # The aggregator merges this into the cluster's OpenAPI; the subresources have no schemas of their own.
        return web.json_response({"swagger": "2.0", "info": {"title": "KubeVirt API", "version": "v1"}, "paths": {}})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_get("/", root)
    app.router.add_get("/apis", groups)
    app.router.add_get(base, group)
    app.router.add_get("/openapi/v2", openapi)
    app.router.add_get("/healthz", healthz)
    app.router.add_route("*", base + "/{tail:.*}", api.handle)
    return app


async def publish_ca_bundle(client: KubeClient, ca_pem: bytes) -> None:
    """Point the APIServices and webhook configurations at our CA, as virt-operator does for upstream's virt-api."""
    bundle = base64.b64encode(ca_pem).decode()
    for version in discovery.VERSIONS:
        name = f"{version}.{discovery.GROUP}"
        patch = {"spec": {"caBundle": bundle, "insecureSkipTLSVerify": False}}
        with contextlib.suppress(NotFound):
            await client.patch(APISERVICES, name, patch)
    for ref, name in ((MUTATING_WEBHOOKS, MUTATING_WEBHOOK_NAME), (VALIDATING_WEBHOOKS, VALIDATING_WEBHOOK_NAME)):
        try:
            config: Object = await client.get(ref, name)
        except NotFound:
            continue
        ops = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i, _ in enumerate(config.get("webhooks") or [])
        ]
        if ops:
            await client.patch(ref, name, ops, patch_type=JSON_PATCH)


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    host: str
    port: int
    cert_file: Path
    key_file: Path
    feature_gates: frozenset[str]
    handler_ca_file: Path | None
    handler_certificates_dir: Path | None = None
    authorize: bool = True
    # The serving pair's watch (virtapi/serving_certificates.py): a renewal is loaded in place and its CA published.
    serving: FileWatch[bytes] | None = None
    publish_ca_bundle: bool = True


async def _follow_serving(client: KubeClient, options: ClusterOptions, context: ssl.SSLContext) -> None:
    """Load a renewed serving pair into the listening context, and publish its CA when that changed."""
    assert options.serving is not None

    async def reload(ca: bytes, before: bytes) -> bool:
        try:
            context.load_cert_chain(options.cert_file, options.key_file)
            if options.publish_ca_bundle and ca != before:
                await publish_ca_bundle(client, ca)
        except (OSError, ssl.SSLError, ApiError) as exc:
            log.warning("cannot load the renewed serving certificate: %s", exc)
            return False
        log.info("virt-api serving certificate reloaded")
        return True

    # virt-api waited for the pair before it listened: this returns it at once.
    served = await options.serving.wait(SERVING_POLL_SECONDS, "the serving certificate")
    await options.serving.follow(SERVING_POLL_SECONDS, served, reload)


async def serve(client: KubeClient, options: ClusterOptions, stop: asyncio.Event) -> None:
    """Run until `stop` is set."""
    auth = await RequestHeaderAuth.load(client) if options.authorize else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(options.cert_file, options.key_file)
    if auth is not None:
        # Optional: the aggregator's health probe of "/" and the webhook calls carry no client certificate.
        context.load_verify_locations(cadata=auth.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    handler_ssl: ssl.SSLContext | FileWatch[ssl.SSLContext] | None = None
    if options.handler_certificates_dir is not None:
        handler_ssl = client_watch(options.handler_certificates_dir)
    elif options.handler_ca_file is not None:
        handler_ssl = ssl.create_default_context(cafile=str(options.handler_ca_file))
    lookup = InformerLookup(client)
    tasks = [asyncio.create_task(informer.run()) for informer in lookup.informers.values()]
    config = ConfigFromKubeVirt(ClusterConfig(feature_gates=options.feature_gates))

    def follow_verbosity(*_: Any) -> None:
        # logVerbosity.virtAPI of the KubeVirt object, as virt-api's config watch applies it.
        set_verbosity(config(lookup.list(c.KUBEVIRT_KIND, None)).verbosity("virtAPI"))

    lookup.informers[c.KUBEVIRT_KIND].add_handler(
        EventHandler(on_add=follow_verbosity, on_update=follow_verbosity, on_delete=follow_verbosity)
    )

    def admission() -> AdmissionContext:
        # The KubeVirt object in the informer's cache, over the command line's values, as virt-api's virt-config.
        return AdmissionContext(config=config(lookup.list(c.KUBEVIRT_KIND, None)), lookup=lookup)

    api = SubresourceAPI(client, HandlerClient(client, handler_ssl), lambda: config(lookup.list(c.KUBEVIRT_KIND, None)))
    middleware = authorization_middleware(client, auth) if auth is not None else None
    eviction = EvictionWebhook(client, lambda: config(lookup.list(c.KUBEVIRT_KIND, None)))
    app = build_app(api, admission, middleware, eviction)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, options.host, options.port, ssl_context=context)
    await site.start()
    log.info("virt-api serving on https://%s:%d", options.host, options.port)
    if options.serving is not None:
        tasks.append(asyncio.create_task(_follow_serving(client, options, context), name="serving-certificates"))
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await api.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
