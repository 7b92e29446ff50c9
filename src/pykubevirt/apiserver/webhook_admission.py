"""Admission through MutatingWebhookConfiguration and ValidatingWebhookConfiguration objects, as kube-apiserver's
MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins do it (the only admission of `apiserver --plain`).

Mutating webhooks run one after another in configuration-name order, each JSONPatch applied before the next call;
validating webhooks run concurrently. A failed call fails the request or is ignored as the webhook's failurePolicy
says. The object API is synchronous, so the calls are awaited through `suspension` (writes that did not come from a
request, such as the garbage collector's, reach no webhook). A webhook whose matchPolicy is Equivalent (the default)
and whose rules name another served version of a custom resource gets the object in that version.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
from typing import Any

import aiohttp

from pykubevirt.api import errors
from pykubevirt.api.json_patch import apply_patch
from pykubevirt.api.structural import apply_defaults, prune
from pykubevirt.apiserver import fields_v1, suspension
from pykubevirt.apiserver.request_context import RequestContext
from pykubevirt.apiserver.resources import Registry, Resource
from pykubevirt.apiserver.served_versions import served
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.webhook_calls import DEFAULT_TIMEOUT_SECONDS, CallError, call, review_request, target_of
from pykubevirt.apiserver.webhook_matching import Attributes, rule_names, webhook_matches

log = logging.getLogger("pykubevirt.apiserver.webhooks")

GROUP = "admissionregistration.k8s.io"
EVICTION_KIND = ("policy", "v1", "Eviction")
MUTATING = f"{GROUP}/mutatingwebhookconfigurations"
VALIDATING = f"{GROUP}/validatingwebhookconfigurations"


def denied(webhook: str, status: dict[str, Any] | None) -> errors.APIError:
    """kube-apiserver's ToStatusErr: the webhook's Status with the 'denied the request' prefix, code at least 400."""
    status = dict(status or {})
    prefix = f'admission webhook "{webhook}" denied the request'
    if status.get("message"):
        message = f"{prefix}: {status['message']}"
    elif status.get("reason"):
        message = f"{prefix}: {status['reason']}"
    else:
        message = f"{prefix} without explanation"
    code = int(status.get("code") or 0)
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return errors.APIError(max(code, 400), str(status.get("reason") or ""), message, details=details)


def _failed(webhook: str, exc: CallError) -> errors.APIError:
    return errors.internal(f'failed calling webhook "{webhook}": {exc}')


@dataclasses.dataclass(frozen=True, slots=True)
class Matched:
    """A webhook a request reaches, and the version of the resource it is called with."""

    webhook: dict[str, Any]
    resource: Resource


def as_version(attrs: Attributes, resource: Resource) -> Attributes:
    """The request's attributes as they read in another served version of its custom resource."""
    if attrs.version == resource.version:
        return attrs
    return dataclasses.replace(
        attrs,
        version=resource.version,
        obj=served(resource, attrs.obj) if attrs.obj is not None else None,
        old=served(resource, attrs.old) if attrs.old is not None else None,
    )


class WebhookAdmission:
    """The two webhook admission plugins over the stored configurations."""

    def __init__(self, store: Store, registry: Registry | None = None) -> None:
        self.store = store
        self.registry = registry
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _webhooks(self, collection: str, attrs: Attributes, resource: Resource) -> list[Matched]:
        """The webhooks the request reaches, each with the version of the resource it is called for."""
        found = []
        for record in self.store.records(collection):
            for webhook in record.value.get("webhooks") or []:
                if webhook_matches(webhook, attrs, self._namespace_labels):
                    found.append(Matched(webhook, resource))
                elif webhook.get("matchPolicy", "Equivalent") == "Equivalent":
                    # kube's matcher: the first equivalent resource the rules name, the object converted to it.
                    for other in self._equivalents(resource):
                        if webhook_matches(webhook, as_version(attrs, other), self._namespace_labels):
                            found.append(Matched(webhook, other))
                            break
        return found

    def _equivalents(self, resource: Resource) -> list[Resource]:
        """The other served versions of a custom resource (conversion None: they differ in apiVersion only)."""
        if self.registry is None or not resource.storage_version:
            return []
        return [
            r
            for r in self.registry.all()
            if r.group == resource.group and r.plural == resource.plural and r.version != resource.version
        ]

    def _namespace_labels(self, name: str) -> dict[str, str] | None:
        record = self.store.get("core/namespaces", name)
        if record is None:
            return None
        labels = (record.value.get("metadata") or {}).get("labels")
        return dict(labels) if isinstance(labels, dict) else {}

    def may_apply(self, resource: Resource) -> bool:
        """Whether a write to `resource` (or its eviction) could reach a webhook: only such writes run where they
        can await the calls (a thread each), so Leases, Events and the like never pay for it."""
        if resource.group == GROUP:
            return False
        candidates = [resource, *self._equivalents(resource)]
        for collection in (MUTATING, VALIDATING):
            for record in self.store.records(collection):
                for webhook in record.value.get("webhooks") or []:
                    rules = webhook.get("rules") or []
                    if webhook.get("matchPolicy", "Equivalent") != "Equivalent":
                        if any(rule_names(rule, resource) for rule in rules):
                            return True
                    elif any(rule_names(rule, r) for rule in rules for r in candidates):
                        return True
        return False

    def handles(self, resource: Resource) -> bool:
        # kube-apiserver never calls webhooks for the webhook configurations themselves.
        return resource.group != GROUP and suspension.in_suspendable_write()

    @staticmethod
    def _attributes(resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None) -> Attributes:
        meta = obj.get("metadata") or {}
        return Attributes(
            operation,
            resource.group,
            resource.version,
            resource.plural,
            "",
            str(meta.get("namespace") or "") if resource.namespaced else "",
            str(meta.get("name") or ""),
            obj,
            old,
        )

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        attrs = self._attributes(resource, operation, obj, old)
        webhooks = self._webhooks(MUTATING, attrs, resource)
        if not webhooks:
            return obj
        return suspension.await_from_write(self._mutate(webhooks, attrs, resource, ctx))

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        attrs = self._attributes(resource, operation, obj, old)
        webhooks = self._webhooks(VALIDATING, attrs, resource)
        if not webhooks:
            return []
        return suspension.await_from_write(self._validate(webhooks, attrs, resource, ctx))

    def admit_delete(self, resource: Resource, current: dict[str, Any], ctx: RequestContext) -> None:
        """A DELETE reaches the validating webhooks whose rules name it, with the stored object as oldObject."""
        if not self.handles(resource):
            return
        meta = current.get("metadata") or {}
        namespace = str(meta.get("namespace") or "") if resource.namespaced else ""
        attrs = Attributes(
            "DELETE",
            resource.group,
            resource.version,
            resource.plural,
            "",
            namespace,
            str(meta.get("name")),
            None,
            current,
        )
        webhooks = self._webhooks(VALIDATING, attrs, resource)
        if webhooks:
            suspension.await_from_write(self._validate(webhooks, attrs, resource, ctx))

    def evict(self, pod: dict[str, Any], eviction: dict[str, Any] | None, ctx: RequestContext) -> None:
        """A CREATE of pods/eviction reaches the validating webhooks whose rules name `pods/eviction`."""
        if not suspension.in_suspendable_write():
            return
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        body = eviction or {"apiVersion": "policy/v1", "kind": "Eviction"}
        body = {**body, "metadata": {"name": name, "namespace": namespace, **(body.get("metadata") or {})}}
        attrs = Attributes("CREATE", "", "v1", "pods", "eviction", namespace, name, body, None)
        pods = Resource("", "v1", "Pod", "pods", "pod", True)
        webhooks = self._webhooks(VALIDATING, attrs, pods)
        if webhooks:
            suspension.await_from_write(self._validate(webhooks, attrs, pods, ctx))

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(
        self, matched: Matched, attrs: Attributes, resource: Resource, ctx: RequestContext
    ) -> dict[str, Any] | None:
        """The webhook's response, or None when a failed call is to be ignored (failurePolicy: Ignore).

        `attrs` are the request's; the webhook gets them in `matched.resource`'s version."""
        webhook = matched.webhook
        name = str(webhook.get("name", ""))
        timeout = int(webhook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        kind = (matched.resource.group, matched.resource.version, matched.resource.kind)
        if attrs.subresource == "eviction":
            kind = EVICTION_KIND
        review = review_request(
            as_version(attrs, matched.resource), (ctx.user.username, ctx.user.groups), kind, ctx.dry_run
        )
        if matched.resource is not resource:
            # What was asked for, as kube sends it beside what the webhook registered for.
            review["request"]["requestKind"] = {"group": resource.group, "version": resource.version, "kind": kind[2]}
            review["request"]["requestResource"] = {
                "group": resource.group,
                "version": resource.version,
                "resource": resource.plural,
            }
        try:
            target = target_of(self.store, dict(webhook.get("clientConfig") or {}), timeout)
            return await call(self._session_now(), target, review, timeout)
        except CallError as exc:
            if webhook.get("failurePolicy", "Fail") == "Ignore":
                log.warning('failed calling webhook "%s" (failurePolicy Ignore): %s', name, exc)
                return None
            raise _failed(name, exc) from exc

    async def _mutate(
        self, webhooks: list[Matched], attrs: Attributes, resource: Resource, ctx: RequestContext
    ) -> dict[str, Any]:
        obj = attrs.obj
        assert obj is not None
        original = obj
        # What each webhook left: one with reinvocationPolicy IfNeeded is called once more when a later one changed
        # the object after it (kube's single reinvocation pass).
        left: list[dict[str, Any]] = []
        for webhook in webhooks:
            obj = await self._mutate_once(webhook, dataclasses.replace(attrs, obj=obj), resource, ctx)
            left.append(obj)
        for webhook, after in zip(webhooks, left, strict=True):
            if webhook.webhook.get("reinvocationPolicy") == "IfNeeded" and obj != after:
                obj = await self._mutate_once(webhook, dataclasses.replace(attrs, obj=obj), resource, ctx)
        schema = resource.schema
        if obj is not original and schema is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            # As for custom resources in kube: what a webhook added is pruned and defaulted like any request's.
            obj = prune(obj, schema)
            apply_defaults(obj, schema)
        return obj

    async def _mutate_once(
        self, matched: Matched, attrs: Attributes, resource: Resource, ctx: RequestContext
    ) -> dict[str, Any]:
        """The object after one call of one webhook (unchanged when it sends no patch or is ignored)."""
        obj = attrs.obj
        assert obj is not None
        response = await self._call(matched, attrs, resource, ctx)
        if response is None:
            return obj
        name = str(matched.webhook.get("name", ""))
        ctx.warnings.extend(str(w) for w in response.get("warnings") or [])
        if not response.get("allowed"):
            raise denied(name, response.get("status"))
        if not response.get("patch"):
            return obj
        # The patch is of the object in the webhook's version; the request goes on in its own.
        patched = self._patched(name, matched.webhook, served(matched.resource, obj), response)
        return served(resource, patched)

    def _patched(
        self, name: str, webhook: dict[str, Any], obj: dict[str, Any], response: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            if response.get("patchType") != "JSONPatch":
                raise CallError(
                    f'received invalid webhook response: unsupported patch type "{response.get("patchType")}"'
                )
            try:
                patch = json.loads(base64.b64decode(response["patch"], validate=True))
                patched = apply_patch(fields_v1.patch_target(obj, patch), patch)
            except (binascii.Error, ValueError, KeyError, IndexError, TypeError) as exc:
                raise CallError(f"JSON Patch: {exc}") from exc
            if not isinstance(patched, dict):
                raise CallError("JSON Patch: the patched object is not an object")
            return patched
        except CallError as exc:
            if webhook.get("failurePolicy", "Fail") == "Ignore":
                return obj
            raise _failed(name, exc) from exc

    async def _validate(
        self, webhooks: list[Matched], attrs: Attributes, resource: Resource, ctx: RequestContext
    ) -> list[str]:
        results = await asyncio.gather(*(self._call(w, attrs, resource, ctx) for w in webhooks), return_exceptions=True)
        warnings: list[str] = []
        for matched, result in zip(webhooks, results, strict=True):
            if isinstance(result, BaseException):
                raise result
            if result is None:
                continue
            warnings.extend(str(w) for w in result.get("warnings") or [])
            name = str(matched.webhook.get("name", ""))
            if not result.get("allowed"):
                raise denied(name, result.get("status"))
            if result.get("patch"):
                raise _failed(
                    name, CallError("received invalid webhook response: validating webhook may not return a patch")
                )
        return warnings
