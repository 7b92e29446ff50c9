"""KubeVirt's admission webhooks as AdmissionReview v1 endpoints, at KubeVirt's paths, for cluster mode.

The embedded server runs the same chain in-process; these endpoints let a real kube-apiserver call it over TLS
through ValidatingWebhookConfiguration/MutatingWebhookConfiguration objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.review import review

MUTATING_PATHS = (
    "/virtualmachines-mutate",
    "/virtualmachineinstances-mutate",
    "/migration-mutate-create",
    "/vm-clone-mutate-create",
)
VALIDATING_PATHS = (
    "/virtualmachines-validate",
    "/virtualmachineinstances-validate-create",
    "/virtualmachineinstances-validate-update",
    "/migration-validate-create",
    "/virtualmachinereplicaset-validate",
    "/virtualmachinepool-validate",
    "/virtualmachinesnapshots-validate",
    "/virtualmachinerestores-validate",
    "/vm-clone-validate-create",
    "/virtualmachineexports-validate",
    "/virtualmachineinstancetypes-validate",
    "/virtualmachineclusterinstancetypes-validate",
    "/virtualmachinepreferences-validate",
    "/virtualmachineclusterpreferences-validate",
)


def add_webhook_routes(app: web.Application, context: Callable[[], AdmissionContext]) -> None:
    """Serve every webhook path; `context` gives the cluster configuration and lookups for each request."""

    def handler(mutating: bool) -> Callable[[web.Request], object]:
        async def handle(request: web.Request) -> web.Response:
            try:
                body = json.loads(await request.read())
            except ValueError:
                return web.json_response({"message": "the body is not an AdmissionReview"}, status=400)
            if not isinstance(body, dict) or body.get("kind") != "AdmissionReview":
                return web.json_response({"message": "the body is not an AdmissionReview"}, status=400)
            return web.json_response(review(body, context(), mutating=mutating))

        return handle

    for path in MUTATING_PATHS:
        app.router.add_post(path, handler(True))  # type: ignore[arg-type]
    for path in VALIDATING_PATHS:
        app.router.add_post(path, handler(False))  # type: ignore[arg-type]
