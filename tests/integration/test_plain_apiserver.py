"""`pykubevirt apiserver --plain` as a plain kube-apiserver: webhook admission over TLS, the aggregation layer and
RBAC, driven by kubectl against the real process; the webhooks and the APIService backend run in this process."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from pykubevirt.apiserver.security import Pki, ensure_pki
from tests.integration.conftest import custom_resource_definition
from tests.paths import REPO
from tests.support.apiserver_process import APIServerProcess, kubectl
from tests.support.ports import free_port
from tests.support.threaded_server import ThreadedServer
from tests.support.waiting import eventually_sync

HOOK_NAMESPACE = "plain-hooks"
HOOK_SERVICE = "hooks"
DEMO_GROUP = "demo.example.com"


class Backend:
    """Webhooks and an aggregated API group, recording what the API server sent them."""

    def __init__(self) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.observed: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/mutate", self.mutate)
        app.router.add_post("/deny", self.deny)
        app.router.add_post("/slow", self.slow)
        app.router.add_post("/observe", self.observe)
        app.router.add_get(f"/apis/{DEMO_GROUP}/v1", self.discovery)
        app.router.add_get(f"/apis/{DEMO_GROUP}/v1/namespaces/{{ns}}/widgets/{{name}}/echo", self.echo)
        app.router.add_get(f"/apis/{DEMO_GROUP}/v1/namespaces/{{ns}}/widgets/{{name}}/stream", self.stream)
        return app

    @staticmethod
    def _answer(request: dict[str, Any], **response: Any) -> web.Response:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        return web.json_response({**body, "response": {"uid": request["uid"], **response}})

    async def mutate(self, request: web.Request) -> web.Response:
        review = (await request.json())["request"]
        self.reviews.append(review)
        patch = [{"op": "add", "path": "/data", "value": {"mutated": "yes"}}]
        encoded = base64.b64encode(json.dumps(patch).encode()).decode()
        return self._answer(review, allowed=True, patchType="JSONPatch", patch=encoded)

    async def deny(self, request: web.Request) -> web.Response:
        review = (await request.json())["request"]
        self.reviews.append(review)
        status = {"code": 422, "reason": "Invalid", "message": f"{review['name']} is not welcome"}
        return self._answer(review, allowed=False, status=status)

    async def observe(self, request: web.Request) -> web.Response:
        review = (await request.json())["request"]
        self.observed.append(review)
        return self._answer(review, allowed=True)

    async def slow(self, request: web.Request) -> web.Response:
        review = (await request.json())["request"]
        await asyncio.sleep(3)  # longer than the webhook's timeoutSeconds: the API server gives up first
        return self._answer(review, allowed=True)

    async def discovery(self, request: web.Request) -> web.Response:
        resources = [
            {"name": "widgets", "singularName": "widget", "namespaced": True, "kind": "Widget", "verbs": ["get"]}
        ]
        return web.json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{DEMO_GROUP}/v1", "resources": resources}
        )

    async def echo(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        headers: dict[str, list[str]] = {}
        for name, value in request.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        return web.json_response({"headers": headers, "client_cn": subject.get("commonName", "")})

    async def stream(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=("plain.kubevirt.io",))
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(b"echo:" + message.data)
        return ws


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    server = APIServerProcess(tmp_path_factory.mktemp("plain") / "apiserver", "--plain").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kubectl-home")


@pytest.fixture(scope="module")
def backend_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return ensure_pki(tmp_path_factory.mktemp("backend"), [f"{HOOK_SERVICE}.{HOOK_NAMESPACE}.svc"])


@pytest.fixture(scope="module")
def backend(plain: APIServerProcess, home: Path, backend_pki: Pki) -> Iterator[tuple[Backend, int]]:
    """The backend, reachable as Service plain-hooks/hooks through an EndpointSlice, as a pod's would be."""
    context = backend_pki.server_ssl_context()
    # The aggregation layer's client certificate is optional here, so webhooks (which send none) work too.
    context.load_verify_locations(plain.data_dir / "pki" / "front-proxy-ca.crt")
    context.verify_mode = ssl.CERT_OPTIONAL
    recorder = Backend()
    server = ThreadedServer(recorder.app(), context).start()
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": HOOK_SERVICE, "namespace": HOOK_NAMESPACE},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{HOOK_SERVICE}-1",
            "namespace": HOOK_NAMESPACE,
            "labels": {"kubernetes.io/service-name": HOOK_SERVICE},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}],
    }
    kubectl(plain, home, "create", "namespace", HOOK_NAMESPACE)
    kubectl(plain, home, "apply", "-f", "-", stdin=yaml.safe_dump_all([service, endpoints]))
    yield recorder, server.port
    server.stop()


def _namespace(plain: APIServerProcess, home: Path, **labels: str) -> str:
    name = f"plain-{uuid.uuid4().hex[:8]}"
    kubectl(plain, home, "create", "namespace", name)
    if labels:
        kubectl(plain, home, "label", "namespace", name, *(f"{k}={v}" for k, v in labels.items()))
    return name


def _webhook_configuration(
    kind: str, name: str, client_config: dict[str, Any], test: str, **webhook: Any
) -> dict[str, Any]:
    hook = {
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "namespaceSelector": {"matchLabels": {"test": test}},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        **webhook,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [hook],
    }


def _service_config(backend_pki: Pki, path: str) -> dict[str, Any]:
    return {
        "service": {"namespace": HOOK_NAMESPACE, "name": HOOK_SERVICE, "path": path, "port": 443},
        "caBundle": base64.b64encode(backend_pki.ca_pem).decode(),
    }


def _apply(plain: APIServerProcess, home: Path, *objects: dict[str, Any]) -> None:
    kubectl(plain, home, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def test_serves_no_kubevirt_kind_until_its_crds_are_applied(plain: APIServerProcess, home: Path) -> None:
    resources = kubectl(plain, home, "api-resources", "-o", "name").stdout.split()
    assert not [r for r in resources if "kubevirt.io" in r]
    assert "validatingwebhookconfigurations.admissionregistration.k8s.io" in resources
    assert "apiservices.apiregistration.k8s.io" in resources
    kubectl(plain, home, "apply", "-f", str(REPO / "deploy" / "crds"))
    resources = kubectl(plain, home, "api-resources", "-o", "name").stdout.split()
    assert "virtualmachines.kubevirt.io" in resources


def test_a_webhook_that_is_down_fails_a_create_only_with_failure_policy_fail(
    plain: APIServerProcess, home: Path
) -> None:
    ns = _namespace(plain, home, test="down")
    port = free_port()  # nothing listens there
    config = _webhook_configuration(
        "ValidatingWebhookConfiguration",
        "down.example.com",
        {"url": f"https://127.0.0.1:{port}/validate"},
        "down",
        failurePolicy="Fail",
        timeoutSeconds=5,
    )
    _apply(plain, home, config)
    result = kubectl(plain, home, "-n", ns, "create", "configmap", "refused", check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'error: failed to create configmap: Internal error occurred: failed calling webhook "down.example.com": '
        f'failed to call webhook: Post "https://127.0.0.1:{port}/validate?timeout=5s": '
        f"dial tcp 127.0.0.1:{port}: connect: connection refused"
    )
    config["webhooks"][0]["failurePolicy"] = "Ignore"
    _apply(plain, home, config)
    stored = json.loads(
        kubectl(plain, home, "get", "validatingwebhookconfiguration", "down.example.com", "-o", "json").stdout
    )
    # kubectl's patch of the list merged by webhook name; kube-apiserver's defaults filled in at the create.
    defaults = {"matchPolicy": "Equivalent", "objectSelector": {}}
    rules = [{**config["webhooks"][0]["rules"][0], "scope": "*"}]
    assert stored["webhooks"][0] == {**config["webhooks"][0], **defaults, "rules": rules}
    kubectl(plain, home, "-n", ns, "create", "configmap", "ignored")
    # A namespace the namespaceSelector does not select never reaches the webhook, whatever its policy.
    config["webhooks"][0]["failurePolicy"] = "Fail"
    _apply(plain, home, config)
    other = _namespace(plain, home, test="elsewhere")
    kubectl(plain, home, "-n", other, "create", "configmap", "unselected")
    kubectl(plain, home, "delete", "validatingwebhookconfiguration", "down.example.com")


def test_a_webhook_past_its_timeout_fails_the_request(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    ns = _namespace(plain, home, test="slow")
    _apply(
        plain,
        home,
        _webhook_configuration(
            "ValidatingWebhookConfiguration",
            "slow.example.com",
            _service_config(backend_pki, "/slow"),
            "slow",
            timeoutSeconds=1,
        ),
    )
    result = kubectl(plain, home, "-n", ns, "create", "configmap", "late", check=False)
    assert result.returncode == 1
    assert (
        'failed calling webhook "slow.example.com": failed to call webhook: Post "https://127.0.0.1:' in result.stderr
    )
    assert '/slow?timeout=1s": context deadline exceeded' in result.stderr
    kubectl(plain, home, "delete", "validatingwebhookconfiguration", "slow.example.com")


def test_a_mutating_webhooks_patch_applies_to_selected_objects(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    ns = _namespace(plain, home, test="mutate")
    config = _webhook_configuration(
        "MutatingWebhookConfiguration",
        "mutate.example.com",
        _service_config(backend_pki, "/mutate"),
        "mutate",
        objectSelector={"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]},
    )
    _apply(plain, home, config)
    kubectl(plain, home, "-n", ns, "create", "configmap", "patched", "--from-literal=given=1")
    created = json.loads(kubectl(plain, home, "-n", ns, "get", "configmap", "patched", "-o", "json").stdout)
    assert created["data"] == {"mutated": "yes"}
    review = recorder.reviews[-1]
    assert review["operation"] == "CREATE" and review["namespace"] == ns and review["name"] == "patched"
    assert review["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert review["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert review["userInfo"]["username"] == "kubernetes-admin"
    assert review["object"]["data"] == {"given": "1"}
    skipped = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "skipped", "labels": {"skip": "y"}}}
    seen = len(recorder.reviews)
    kubectl(plain, home, "-n", ns, "create", "-f", "-", stdin=json.dumps({**skipped, "data": {"given": "2"}}))
    assert len(recorder.reviews) == seen
    kept = json.loads(kubectl(plain, home, "-n", ns, "get", "configmap", "skipped", "-o", "json").stdout)
    assert kept["data"] == {"given": "2"}
    kubectl(plain, home, "delete", "mutatingwebhookconfiguration", "mutate.example.com")


def test_a_validating_webhook_denies_with_its_status(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    ns = _namespace(plain, home, test="deny")
    _apply(
        plain,
        home,
        _webhook_configuration(
            "ValidatingWebhookConfiguration", "deny.example.com", _service_config(backend_pki, "/deny"), "deny"
        ),
    )
    result = kubectl(plain, home, "-n", ns, "create", "configmap", "intruder", check=False)
    assert result.stderr.strip() == (
        'error: failed to create configmap: admission webhook "deny.example.com" denied the request: '
        "intruder is not welcome"
    )
    kubectl(plain, home, "delete", "validatingwebhookconfiguration", "deny.example.com")


def _apiservice(backend_pki: Pki) -> dict[str, Any]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"v1.{DEMO_GROUP}"},
        "spec": {
            "group": DEMO_GROUP,
            "version": "v1",
            "groupPriorityMinimum": 1000,
            "versionPriority": 15,
            "service": {"namespace": HOOK_NAMESPACE, "name": HOOK_SERVICE, "port": 443},
            "caBundle": base64.b64encode(backend_pki.ca_pem).decode(),
        },
    }


def test_the_apiservice_proxy_reaches_the_backend_as_the_aggregation_layer(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    _apply(plain, home, _apiservice(backend_pki))
    kubectl(plain, home, "wait", "--for=condition=Available", f"apiservice/v1.{DEMO_GROUP}", "--timeout=20s")
    assert "widgets" in kubectl(plain, home, "api-resources", f"--api-group={DEMO_GROUP}").stdout
    path = f"/apis/{DEMO_GROUP}/v1/namespaces/default/widgets/w/echo?x=1"
    seen = json.loads(kubectl(plain, home, "get", "--raw", path).stdout)
    assert seen["client_cn"] == "front-proxy-client"
    headers = seen["headers"]
    assert headers["x-remote-user"] == ["kubernetes-admin"]
    assert headers["x-remote-group"] == ["system:masters", "system:authenticated"]
    assert "authorization" not in headers
    # Extension servers learn how to check those headers from the configmap kube-apiserver publishes.
    published = json.loads(
        kubectl(
            plain, home, "-n", "kube-system", "get", "configmap", "extension-apiserver-authentication", "-o", "json"
        ).stdout
    )["data"]
    assert json.loads(published["requestheader-allowed-names"]) == ["front-proxy-client"]
    assert published["requestheader-client-ca-file"] == (plain.data_dir / "pki" / "front-proxy-ca.crt").read_text()


def test_the_apiservice_proxy_upgrades_websockets(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    _apply(plain, home, _apiservice(backend_pki))

    async def exchange() -> tuple[str | None, bytes]:
        context = ssl.create_default_context(cafile=str(plain.ca_file()))
        headers = {"Authorization": f"Bearer {plain.token()}"}
        url = f"{plain.url}/apis/{DEMO_GROUP}/v1/namespaces/default/widgets/w/stream"
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, headers=headers, protocols=("plain.kubevirt.io",), ssl=context) as ws,
        ):
            await ws.send_bytes(b"hello")
            message = await ws.receive(timeout=10)
            return ws.protocol, message.data

    assert asyncio.run(exchange()) == ("plain.kubevirt.io", b"echo:hello")


def test_rbac_denies_a_service_account_without_permission(plain: APIServerProcess, home: Path) -> None:
    ns = _namespace(plain, home)
    kubectl(plain, home, "-n", ns, "create", "serviceaccount", "nobody")
    # The token a pod of that service account gets (TokenRequest, as the kubelet asks for it).
    token = kubectl(plain, home, "-n", ns, "create", "token", "nobody").stdout.strip()
    user = f"system:serviceaccount:{ns}:nobody"
    assert (
        kubectl(plain, home, "--token", token, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").stdout
        == user
    )
    result = kubectl(plain, home, "--token", token, "-n", ns, "get", "pods", check=False)
    assert result.stderr.strip() == (
        f'Error from server (Forbidden): pods is forbidden: User "{user}" cannot list resource "pods" '
        f'in API group "" in the namespace "{ns}"'
    )
    kubectl(plain, home, "-n", ns, "create", "role", "pod-reader", "--verb=list", "--resource=pods")
    kubectl(
        plain,
        home,
        "-n",
        ns,
        "create",
        "rolebinding",
        "nobody-reads",
        "--role=pod-reader",
        f"--serviceaccount={ns}:nobody",
    )
    allowed = kubectl(plain, home, "--token", token, "-n", ns, "get", "pods", check=False)
    assert allowed.returncode == 0, allowed.stderr
    missing = kubectl(plain, home, "-n", ns, "create", "token", "ghost", check=False)
    assert missing.stderr.strip() == 'error: failed to create token: serviceaccounts "ghost" not found'


def test_what_a_mutating_webhook_adds_to_a_custom_resource_is_pruned(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}}},
    }
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.plain.example.com"},
        "spec": {
            "group": "plain.example.com",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }
    _apply(plain, home, crd)
    kubectl(plain, home, "wait", "--for=condition=Established", "crd/gadgets.plain.example.com")
    ns = _namespace(plain, home, test="prune")
    config = _webhook_configuration(
        "MutatingWebhookConfiguration", "prune.example.com", _service_config(backend_pki, "/mutate"), "prune"
    )
    config["webhooks"][0]["rules"][0].update(apiGroups=["plain.example.com"], resources=["gadgets"])
    _apply(plain, home, config)
    seen = len(recorder.reviews)
    gadget = {"apiVersion": "plain.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {}}
    kubectl(plain, home, "-n", ns, "create", "-f", "-", stdin=json.dumps(gadget))
    assert len(recorder.reviews) == seen + 1
    stored = json.loads(kubectl(plain, home, "-n", ns, "get", "gadget", "g", "-o", "json").stdout)
    assert "data" not in stored and stored["spec"] == {"size": 1}
    kubectl(plain, home, "delete", "mutatingwebhookconfiguration", "prune.example.com")


def test_a_webhook_for_one_version_of_a_custom_resource_sees_writes_through_another(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    schema = {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
            "data": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    crd = custom_resource_definition("plain.example.com", "Knob", schema)
    stored = crd["spec"]["versions"][0]
    crd["spec"]["versions"] = [{**stored, "name": "v1beta1", "storage": False}, stored]
    _apply(plain, home, crd)
    kubectl(plain, home, "wait", "--for=condition=Established", "crd/knobs.plain.example.com")
    ns = _namespace(plain, home, test="equivalent")
    for kind, name, path, policy in (
        ("MutatingWebhookConfiguration", "equivalent.example.com", "/mutate", "Equivalent"),
        ("ValidatingWebhookConfiguration", "exact.example.com", "/deny", "Exact"),
    ):
        config = _webhook_configuration(kind, name, _service_config(backend_pki, path), "equivalent")
        config["webhooks"][0]["matchPolicy"] = policy
        config["webhooks"][0]["rules"][0].update(
            apiGroups=["plain.example.com"], apiVersions=["v1"], resources=["knobs"]
        )
        _apply(plain, home, config)
    try:
        seen = len(recorder.reviews)
        knob = {"apiVersion": "plain.example.com/v1beta1", "kind": "Knob", "metadata": {"name": "k"}, "spec": {}}
        kubectl(plain, home, "-n", ns, "create", "-f", "-", stdin=json.dumps(knob))
        # Only the Equivalent webhook was called, with the object as v1 and the request said to be v1beta1's.
        (review,) = recorder.reviews[seen:]
        assert review["object"]["apiVersion"] == "plain.example.com/v1"
        assert review["kind"] == {"group": "plain.example.com", "version": "v1", "kind": "Knob"}
        assert review["resource"]["version"] == "v1"
        assert review["requestKind"]["version"] == "v1beta1" and review["requestResource"]["version"] == "v1beta1"
        # Its patch applied to the object, which stays what the request asked for.
        stored = json.loads(
            kubectl(plain, home, "-n", ns, "get", "knobs.v1beta1.plain.example.com", "k", "-o", "json").stdout
        )
        assert stored["apiVersion"] == "plain.example.com/v1beta1" and stored["data"] == {"mutated": "yes"}
        # Through v1 itself, the Exact webhook is reached too.
        denied = kubectl(
            plain,
            home,
            "-n",
            ns,
            "create",
            "-f",
            "-",
            stdin=json.dumps({**knob, "apiVersion": "plain.example.com/v1", "metadata": {"name": "k2"}}),
            check=False,
        )
        assert 'admission webhook "exact.example.com" denied the request: k2 is not welcome' in denied.stderr
    finally:
        kubectl(plain, home, "delete", "mutatingwebhookconfiguration", "equivalent.example.com")
        kubectl(plain, home, "delete", "validatingwebhookconfiguration", "exact.example.com")


def test_an_eviction_reaches_the_webhooks_of_pods_eviction(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    ns = _namespace(plain, home, test="evict")
    config = _webhook_configuration(
        "ValidatingWebhookConfiguration", "evict.example.com", _service_config(backend_pki, "/deny"), "evict"
    )
    config["webhooks"][0]["rules"][0].update(resources=["pods/eviction"])
    _apply(plain, home, config)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kept"},
        "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]},
    }
    kubectl(plain, home, "-n", ns, "create", "-f", "-", stdin=json.dumps(pod))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "kept", "namespace": ns}}
    result = kubectl(
        plain,
        home,
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/kept/eviction",
        "-f",
        "-",
        stdin=json.dumps(eviction),
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        'The request is invalid: admission webhook "evict.example.com" denied the request: kept is not welcome'
    )
    review = recorder.reviews[-1]
    assert review["subResource"] == "eviction" and review["operation"] == "CREATE"
    assert review["kind"] == {"group": "policy", "version": "v1", "kind": "Eviction"}
    assert review["resource"] == {"group": "", "version": "v1", "resource": "pods"}
    kubectl(plain, home, "-n", ns, "get", "pod", "kept")
    kubectl(plain, home, "delete", "validatingwebhookconfiguration", "evict.example.com")


def test_a_delete_reaches_the_validating_webhooks_with_the_old_object(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    ns = _namespace(plain, home, test="delete")
    kubectl(plain, home, "-n", ns, "create", "configmap", "precious", "--from-literal=a=b")
    config = _webhook_configuration(
        "ValidatingWebhookConfiguration", "delete.example.com", _service_config(backend_pki, "/deny"), "delete"
    )
    config["webhooks"][0]["rules"][0].update(operations=["DELETE"])
    _apply(plain, home, config)
    result = kubectl(plain, home, "-n", ns, "delete", "configmap", "precious", check=False)
    assert result.stderr.strip() == (
        'The request is invalid: admission webhook "delete.example.com" denied the request: precious is not welcome'
    )
    review = recorder.reviews[-1]
    assert review["operation"] == "DELETE" and review["object"] is None
    assert review["oldObject"]["data"] == {"a": "b"}
    assert review["options"]["kind"] == "DeleteOptions"
    kubectl(plain, home, "delete", "validatingwebhookconfiguration", "delete.example.com")
    kubectl(plain, home, "-n", ns, "delete", "configmap", "precious")


def test_a_webhook_with_reinvocation_if_needed_sees_what_a_later_one_changed(
    plain: APIServerProcess, home: Path, backend: tuple[Backend, int], backend_pki: Pki
) -> None:
    recorder, _ = backend
    ns = _namespace(plain, home, test="reinvoke")
    # Configurations are called in name order: the observer first, then the mutator.
    observer = _webhook_configuration(
        "MutatingWebhookConfiguration",
        "a-observe.example.com",
        _service_config(backend_pki, "/observe"),
        "reinvoke",
        reinvocationPolicy="IfNeeded",
    )
    mutator = _webhook_configuration(
        "MutatingWebhookConfiguration", "b-mutate.example.com", _service_config(backend_pki, "/mutate"), "reinvoke"
    )
    _apply(plain, home, observer, mutator)
    seen = len(recorder.observed)
    kubectl(plain, home, "-n", ns, "create", "configmap", "twice", "--from-literal=given=1")
    calls = recorder.observed[seen:]
    assert [c["object"].get("data") for c in calls] == [{"given": "1"}, {"mutated": "yes"}]
    observer["webhooks"][0]["reinvocationPolicy"] = "Never"
    _apply(plain, home, observer)
    seen = len(recorder.observed)
    kubectl(plain, home, "-n", ns, "create", "configmap", "once")
    assert len(recorder.observed) == seen + 1
    kubectl(plain, home, "delete", "mutatingwebhookconfiguration", "a-observe.example.com", "b-mutate.example.com")


def test_webhook_configurations_are_validated_as_kube_validates_them(plain: APIServerProcess, home: Path) -> None:
    bad = _webhook_configuration(
        "ValidatingWebhookConfiguration", "bad", {"url": "https://127.0.0.1:1/x"}, "none", timeoutSeconds=31
    )
    del bad["webhooks"][0]["sideEffects"]
    result = kubectl(plain, home, "apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0] == 'The ValidatingWebhookConfiguration "bad" is invalid: '
    assert lines[1:] == [
        '* webhooks[0].name: Invalid value: "bad": should be a domain with at least three segments separated by dots',
        "* webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        "* webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
    ]


def test_kubectl_scale_works_on_deployments_and_on_a_custom_resource_with_a_scale_subresource(
    plain: APIServerProcess, home: Path
) -> None:
    namespace = _namespace(plain, home)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web", "tier": "front"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    _apply(plain, home, deployment)
    kubectl(plain, home, "scale", "deployment", "web", "-n", namespace, "--replicas=4")
    scale = json.loads(
        kubectl(plain, home, "get", "deployment", "web", "-n", namespace, "--subresource=scale", "-o", "json").stdout
    )
    # kube's apps kinds show spec.selector, a LabelSelector, as the Scale's selector string.
    assert scale["spec"] == {"replicas": 4} and scale["status"] == {"replicas": 0, "selector": "app=web,tier=front"}
    stale = kubectl(
        plain, home, "scale", "deployment", "web", "-n", namespace, "--replicas=2", "--current-replicas=3", check=False
    )
    assert (stale.returncode, stale.stderr) == (1, "error: Expected replicas to be 3, was 4\n")

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "flocks.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "flocks", "singular": "flock", "kind": "Flock"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                                "status": {
                                    "type": "object",
                                    "properties": {"count": {"type": "integer"}, "selector": {"type": "string"}},
                                },
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.size",
                            "statusReplicasPath": ".status.count",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                }
            ],
        },
    }
    misplaced = json.loads(json.dumps(crd))
    misplaced["metadata"]["name"] = "herds.example.com"
    misplaced["spec"]["names"] = {"plural": "herds", "singular": "herd", "kind": "Herd"}
    misplaced["spec"]["versions"][0]["subresources"]["scale"]["specReplicasPath"] = ".status.size"
    refused_crd = kubectl(plain, home, "create", "-f", "-", stdin=json.dumps(misplaced), check=False)
    assert refused_crd.stderr.strip() == (
        'The CustomResourceDefinition "herds.example.com" is invalid: spec.versions[0].subresources.scale.'
        'specReplicasPath: Invalid value: ".status.size": should be a json path under .spec'
    )
    _apply(plain, home, crd)

    def scaled() -> subprocess.CompletedProcess[str]:
        flock = {"apiVersion": "example.com/v1", "kind": "Flock", "metadata": {"name": "f", "namespace": namespace}}
        kubectl(plain, home, "apply", "-f", "-", stdin=json.dumps({**flock, "spec": {"size": 1}}))
        return kubectl(plain, home, "scale", "flock", "f", "-n", namespace, "--replicas=5", check=False)

    assert eventually_sync(lambda: scaled().returncode == 0)
    size = kubectl(plain, home, "get", "flock", "f", "-n", namespace, "-o", "jsonpath={.spec.size}").stdout
    assert size == "5"
    refused = kubectl(
        plain, home, "patch", "flock", "f", "-n", namespace, "--type=merge", "-p", '{"spec":{"size":-1}}', check=False
    )
    assert refused.stderr.strip() == (
        'The Flock "f" is invalid: .spec.size: Invalid value: -1: should be a non-negative integer'
    )
