"""Mutating/ValidatingWebhookConfiguration writes as kube-apiserver takes them: its defaults filled in
(admissionregistration/v1 defaults.go) and what its validation refuses refused with its messages."""

from __future__ import annotations

from typing import Any

from pykubevirt.api import errors
from pykubevirt.apiserver.request_context import RequestContext
from pykubevirt.apiserver.resources import Resource

GROUP = "admissionregistration.k8s.io"
KINDS = frozenset({"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"})
SIDE_EFFECTS = ("None", "NoneOnDryRun")
REVIEW_VERSIONS = ("v1", "v1beta1")


def _default(webhook: dict[str, Any], mutating: bool) -> None:
    webhook.setdefault("failurePolicy", "Fail")
    webhook.setdefault("matchPolicy", "Equivalent")
    webhook.setdefault("namespaceSelector", {})
    webhook.setdefault("objectSelector", {})
    webhook.setdefault("timeoutSeconds", 10)
    if mutating:
        webhook.setdefault("reinvocationPolicy", "Never")
    for rule in webhook.get("rules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")
    service = (webhook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        service.setdefault("port", 443)


def _problems(index: int, webhook: dict[str, Any], seen: set[str]) -> list[dict[str, str]]:
    at = f"webhooks[{index}]"
    causes: list[dict[str, str]] = []

    def add(field: str, message: str, reason: str = "FieldValueInvalid") -> None:
        causes.append({"reason": reason, "message": message, "field": f"{at}.{field}"})

    name = str(webhook.get("name") or "")
    if not name:
        add("name", "Required value", "FieldValueRequired")
    elif name.count(".") < 2:
        add("name", f'Invalid value: "{name}": should be a domain with at least three segments separated by dots')
    elif name in seen:
        add("name", f'Duplicate value: "{name}"', "FieldValueDuplicate")
    seen.add(name)
    if webhook.get("sideEffects") not in SIDE_EFFECTS:
        value = webhook.get("sideEffects")
        if value is None:
            add("sideEffects", "Required value: must specify one of None, NoneOnDryRun", "FieldValueRequired")
        else:
            add(
                "sideEffects",
                f'Unsupported value: "{value}": supported values: "None", "NoneOnDryRun"',
                "FieldValueNotSupported",
            )
    versions = [str(v) for v in webhook.get("admissionReviewVersions") or []]
    if not versions:
        add("admissionReviewVersions", "Required value: must specify one of v1, v1beta1", "FieldValueRequired")
    elif not any(v in REVIEW_VERSIONS for v in versions):
        add("admissionReviewVersions", f"Invalid value: {versions}: must include at least one of v1, v1beta1")
    policy = webhook.get("failurePolicy")
    if policy not in ("Ignore", "Fail"):
        add(
            "failurePolicy",
            f'Unsupported value: "{policy}": supported values: "Fail", "Ignore"',
            "FieldValueNotSupported",
        )
    timeout = webhook.get("timeoutSeconds")
    if not isinstance(timeout, int) or not 1 <= timeout <= 30:
        add("timeoutSeconds", f"Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds")
    config = webhook.get("clientConfig") or {}
    if bool(config.get("url")) == bool(config.get("service")):
        add("clientConfig", "Required value: exactly one of url or service is required", "FieldValueRequired")
    elif config.get("url") and not str(config["url"]).startswith("https://"):
        add("clientConfig.url", f"Invalid value: \"{config['url']}\": 'https' is the only allowed URL scheme")
    return causes


class WebhookConfigurationAdmission:
    """The admission plugin for the two kinds (built-in validation and defaulting, not webhooks)."""

    def handles(self, resource: Resource) -> bool:
        return resource.group == GROUP and resource.kind in KINDS

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        for webhook in obj.get("webhooks") or []:
            if isinstance(webhook, dict):
                _default(webhook, resource.kind == "MutatingWebhookConfiguration")
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        seen: set[str] = set()
        causes = [
            cause
            for index, webhook in enumerate(obj.get("webhooks") or [])
            if isinstance(webhook, dict)
            for cause in _problems(index, webhook, seen)
        ]
        if causes:
            raise errors.invalid(resource.kind, GROUP, str(obj["metadata"].get("name") or ""), causes)
        return []
