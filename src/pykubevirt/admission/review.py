"""AdmissionReview v1 requests and responses, for serving the admission chain as webhooks in cluster mode."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.chain import mutate, validate
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.api.json_patch import make_patch


def _response(uid: str, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, **fields}}


def _unprefixed(rejected: AdmissionRejected) -> dict[str, Any]:
    """The rejection as a webhook answers it: kube-apiserver adds the 'admission webhook … denied' prefix itself."""
    status = rejected.status()
    status["message"] = str(status["message"]).removeprefix(rejected.denied_prefix())
    return status


def review(request_review: dict[str, Any], ctx: AdmissionContext, *, mutating: bool) -> dict[str, Any]:
    """Answer one AdmissionReview: a JSONPatch for the mutating hook, allowed/denied for the validating one."""
    request = request_review.get("request") or {}
    uid = str(request.get("uid", ""))
    obj = request.get("object")
    if not isinstance(obj, dict):
        return _response(uid, allowed=False, status={"code": 400, "message": "the request carries no object"})
    operation = str(request.get("operation", "CREATE"))
    old = request.get("oldObject") if isinstance(request.get("oldObject"), dict) else None
    user = (request.get("userInfo") or {}).get("username") or ctx.username
    scoped = dataclasses.replace(ctx, username=str(user))
    if mutating:
        try:
            patch = make_patch(obj, mutate(obj, scoped, operation=operation, old=old))
        except AdmissionRejected as rejected:
            return _response(uid, allowed=False, status=_unprefixed(rejected))
        if not patch:
            return _response(uid, allowed=True)
        encoded = base64.b64encode(json.dumps(patch).encode()).decode()
        return _response(uid, allowed=True, patchType="JSONPatch", patch=encoded)
    try:
        warnings = validate(obj, scoped, operation=operation, old=old)
    except AdmissionRejected as rejected:
        return _response(uid, allowed=False, status=_unprefixed(rejected))
    return _response(uid, allowed=True, warnings=warnings) if warnings else _response(uid, allowed=True)
