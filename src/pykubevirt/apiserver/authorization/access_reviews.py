"""The create-only review kinds: SubjectAccessReview and its self/local forms, SelfSubjectRulesReview,
SelfSubjectReview (`kubectl auth whoami`) and TokenReview. Nothing is stored; the answer is the request with status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from pykubevirt.api import errors
from pykubevirt.apiserver import protobuf
from pykubevirt.apiserver.authorization.attributes import Attributes
from pykubevirt.apiserver.authorization.rbac import Authorizer
from pykubevirt.apiserver.http_api import RestHandlers, Target, json_response
from pykubevirt.apiserver.patching import media_type
from pykubevirt.apiserver.request_context import UserInfo
from pykubevirt.apiserver.security import TokenTable

AUTHORIZATION_GROUP = "authorization.k8s.io"
AUTHENTICATION_GROUP = "authentication.k8s.io"

Review = Callable[[dict[str, Any], Target, UserInfo], dict[str, Any]]


def _spec(body: dict[str, Any]) -> dict[str, Any]:
    spec = body.get("spec")
    return spec if isinstance(spec, dict) else {}


def _invalid(kind: str, field: str, detail: str) -> errors.APIError:
    return errors.invalid_field(kind, AUTHORIZATION_GROUP, "", field, detail)


def review_attributes(kind: str, spec: dict[str, Any], user: UserInfo) -> Attributes:
    """The attributes a review asks about (exactly one of resourceAttributes and nonResourceAttributes)."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict) == isinstance(non_resource, dict):
        raise _invalid(
            kind,
            "spec.resourceAttributes",
            'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
        )
    if isinstance(non_resource, dict):
        return Attributes(user, str(non_resource.get("verb", "")), False, path=str(non_resource.get("path", "")))
    assert isinstance(resource, dict)
    return Attributes(
        user,
        str(resource.get("verb", "")),
        True,
        namespace=str(resource.get("namespace", "")),
        api_group=str(resource.get("group", "")),
        api_version=str(resource.get("version", "")),
        resource=str(resource.get("resource", "")),
        subresource=str(resource.get("subresource", "")),
        name=str(resource.get("name", "")),
    )


def _groups(value: Any) -> tuple[str, ...]:
    return tuple(str(g) for g in value) if isinstance(value, list) else ()


def _rules_status(rules: list[dict[str, Any]]) -> dict[str, Any]:
    resource_rules = []
    non_resource_rules = []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            non_resource_rules.append({"verbs": rule.get("verbs") or [], "nonResourceURLs": rule["nonResourceURLs"]})
        else:
            entry = {k: rule[k] for k in ("verbs", "apiGroups", "resources", "resourceNames") if rule.get(k)}
            entry.setdefault("verbs", [])
            resource_rules.append(entry)
    return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}


class AccessReviews:
    """Serves the review kinds through RestHandlers' per-resource hook."""

    def __init__(self, authorizer: Authorizer, tokens: TokenTable) -> None:
        self.authorizer = authorizer
        self.tokens = tokens

    def install(self, rest: RestHandlers) -> None:
        reviews: dict[str, Review] = {
            "subjectaccessreviews": self._subject,
            "selfsubjectaccessreviews": self._self_subject,
            "localsubjectaccessreviews": self._local_subject,
            "selfsubjectrulesreviews": self._self_rules,
            "selfsubjectreviews": self._whoami,
            "tokenreviews": self._token,
        }
        for plural, review in reviews.items():
            rest.subresource_handlers[(plural, "")] = self._handler(review)

    def _handler(self, review: Review) -> Callable[[web.Request, Target, UserInfo], Any]:
        async def handle(request: web.Request, target: Target, user: UserInfo) -> web.StreamResponse:
            if request.method != "POST" or target.name:
                raise errors.method_not_allowed(request.method)
            raw = await request.read()
            if media_type(request.headers.get("Content-Type")) == protobuf.CONTENT_TYPE:
                body: Any = protobuf.decode(raw)
            else:
                try:
                    body = json.loads(raw or b"{}")
                except ValueError as exc:
                    raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc
            if not isinstance(body, dict):
                raise errors.bad_request("the request body is not an object")
            answer = dict(body, apiVersion=target.resource.api_version, kind=target.resource.kind)
            answer["metadata"] = dict(body.get("metadata") or {}, creationTimestamp=None)
            answer["status"] = review(body, target, user)
            return json_response(answer, 201)

        return handle

    def _decide(self, attributes: Attributes) -> dict[str, Any]:
        decision = self.authorizer.authorize(attributes)
        status: dict[str, Any] = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return status

    def _subject(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        spec = _spec(body)
        subject = UserInfo(str(spec.get("user") or ""), _groups(spec.get("groups")))
        if not subject.username and not subject.groups:
            raise _invalid(
                target.resource.kind, "spec.user", 'Invalid value: "": at least one of user or group must be specified'
            )
        return self._decide(review_attributes(target.resource.kind, spec, subject))

    def _self_subject(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        return self._decide(review_attributes(target.resource.kind, _spec(body), user))

    def _local_subject(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        spec = _spec(body)
        resource = spec.get("resourceAttributes")
        if isinstance(resource, dict):
            if resource.get("namespace") not in (None, "", target.namespace):
                raise _invalid(
                    target.resource.kind,
                    "spec.resourceAttributes.namespace",
                    f'Invalid value: "{resource.get("namespace")}": must match metadata.namespace',
                )
            spec = dict(spec, resourceAttributes=dict(resource, namespace=target.namespace))
        return self._subject(dict(body, spec=spec), target, user)

    def _self_rules(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        namespace = str(_spec(body).get("namespace") or "")
        return _rules_status(self.authorizer.rules_for(user, namespace))

    def _whoami(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        info: dict[str, Any] = {"username": user.username, "groups": list(user.groups)}
        uid = self.tokens.uid_of(user.username)
        if uid:
            info["uid"] = uid
        return {"userInfo": info}

    def _token(self, body: dict[str, Any], target: Target, user: UserInfo) -> dict[str, Any]:
        token = str(_spec(body).get("token") or "")
        found = self.tokens.authenticate(f"Bearer {token}") if token else None
        if found is None:
            return {"authenticated": False, "user": {}}
        return {
            "authenticated": True,
            "user": {"username": found.username, "uid": found.uid, "groups": list(found.groups)},
        }
