"""virt-api's `virt-launcher-eviction-interceptor.kubevirt.io` webhook for a real cluster: an AdmissionReview v1
for a CREATE of pods/eviction, answered as upstream's PodEvictionAdmitter (the verdict is `eviction_decision`'s).

The review names the pod; virt-api reads it and its VMI through the API and marks the VMI for evacuation, unless
the request is a dry run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from pykubevirt.client.api import JSON_PATCH, KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import PODS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.virtapi.eviction_decision import DENIED_CODE, decide, evacuation_patch, launcher_vmi

EVICTION_PATH = "/launcher-eviction-validate"


def _answer(uid: str, denial: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": denial is None}
    if denial is not None:
        response["status"] = {"code": DENIED_CODE, "message": denial}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class EvictionWebhook:
    """The endpoint, with virt-api's client and its view of the cluster configuration."""

    def __init__(self, client: KubeClient, config: Callable[[], ClusterConfig]) -> None:
        self.client = client
        self.config = config

    async def review(self, request: dict[str, Any]) -> dict[str, Any]:
        uid = str(request.get("uid", ""))
        if request.get("subResource") != "eviction" or (request.get("resource") or {}).get("resource") != "pods":
            return _answer(uid)
        namespace, name = str(request.get("namespace", "")), str(request.get("name", ""))
        try:
            pod = await self.client.get(PODS, name, namespace)
        except NotFound:
            return _answer(uid)  # nothing to protect: the API server answers the eviction's 404 itself
        except ApiError as exc:
            return _answer(uid, f"kubevirt failed getting the pod: {exc.message}")
        vmi_name = launcher_vmi(pod)
        if vmi_name is None:
            return _answer(uid)
        vmi = await self.client.get_or_none(VIRTUAL_MACHINE_INSTANCES, vmi_name, namespace)
        verdict = decide(pod, vmi, self.config())
        if verdict.evacuate_to is not None and vmi is not None and not request.get("dryRun"):
            eviction = request.get("object") if isinstance(request.get("object"), dict) else None
            patch = evacuation_patch(vmi, verdict.evacuate_to, eviction)
            try:
                await self.client.patch(VIRTUAL_MACHINE_INSTANCES, vmi_name, patch, namespace, patch_type=JSON_PATCH)
            except ApiError as exc:
                return _answer(uid, f"kubevirt failed marking the vmi for eviction: {exc.message}")
        return _answer(uid, verdict.denial)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            body = None
        if (
            not isinstance(body, dict)
            or body.get("kind") != "AdmissionReview"
            or not isinstance(body.get("request"), dict)
        ):
            return web.json_response({"message": "the body is not an AdmissionReview"}, status=400)
        return web.json_response(await self.review(body["request"]))
