"""`pykubevirt virt-api` (cluster mode) in-process against the embedded API server standing in for kube-apiserver:
requestheader client certificates, SubjectAccessReviews, the subresource API and the webhooks on one TLS port."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import ssl
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubevirt.apiserver.security import ensure_pki
from pykubevirt.client.api import KubeClient
from pykubevirt.client.config import load_kubeconfig
from pykubevirt.client.errors import NotFound
from pykubevirt.client.resources import CONFIG_MAPS, NAMESPACES, VIRTUAL_MACHINES
from pykubevirt.virtapi.cluster import SUBJECT_ACCESS_REVIEWS, ClusterOptions, serve
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import vm_manifest
from tests.support.ports import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

PROXY_CN = "front-proxy-client"


class ReviewingClient(KubeClient):
    """The API client of virt-api, answering SubjectAccessReviews itself: the test decides who may start VMs."""

    reviews: list[dict[str, Any]]

    async def request(self, method: str, path: str, *, body: Any = None, **kwargs: Any) -> Any:
        if method == "POST" and path == SUBJECT_ACCESS_REVIEWS:
            self.reviews.append(body)
            allowed = body["spec"]["user"] == "alice"
            return {**body, "status": {"allowed": allowed, "reason": "" if allowed else "bob may not start VMs"}}
        return await super().request(method, path, body=body, **kwargs)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Cluster:
    def __init__(
        self, url: str, ca: bytes, client_cert: tuple[Path, Path], client: ReviewingClient, admin: KubeClient
    ) -> None:
        self.url = url
        self.ca = ca
        self.client_cert = client_cert
        self.client = client
        # Sets the scene (namespaces, VMs, the request-header configmap); virt-api's own client may not.
        self.admin = admin

    def session(self, *, with_cert: bool) -> aiohttp.ClientSession:
        context = ssl.create_default_context(cadata=self.ca.decode())
        if with_cert:
            context.load_cert_chain(*self.client_cert)
        return aiohttp.ClientSession(self.url, connector=aiohttp.TCPConnector(ssl=context))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cluster]:
    tmp = tmp_path_factory.mktemp("virt-api")
    proxy_ca_key = _key()
    proxy_ca = _cert("front-proxy-ca", proxy_ca_key, None)
    client_key = _key()
    client_cert = _cert(PROXY_CN, client_key, (proxy_ca, proxy_ca_key))
    cert_path, key_path = tmp / "proxy.crt", tmp / "proxy.key"
    cert_path.write_bytes(_pem(client_cert))
    key_path.write_bytes(
        client_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    client = ReviewingClient(load_kubeconfig(apiserver.data_dir / "virt-api.kubeconfig"), qps=0)
    client.reviews = []
    admin = KubeClient(load_kubeconfig(apiserver.kubeconfig), qps=0)
    data = {
        "requestheader-client-ca-file": _pem(proxy_ca).decode(),
        "requestheader-allowed-names": json.dumps([PROXY_CN]),
        "requestheader-username-headers": json.dumps(["X-Remote-User"]),
        "requestheader-group-headers": json.dumps(["X-Remote-Group"]),
        "requestheader-extra-headers-prefix": json.dumps(["X-Remote-Extra-"]),
    }
    configmap = {"metadata": {"name": "extension-apiserver-authentication", "namespace": "kube-system"}, "data": data}
    try:
        await admin.delete(CONFIG_MAPS, "extension-apiserver-authentication", "kube-system")
    except NotFound:
        pass
    await admin.create(CONFIG_MAPS, configmap, "kube-system")
    pki = ensure_pki(tmp / "serving")
    port = free_port()
    options = ClusterOptions("127.0.0.1", port, pki.cert_path, pki.key_path, frozenset(), None)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(client, options, stop))
    url = f"https://127.0.0.1:{port}"

    def listening() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return True
        except OSError:
            return False

    await eventually(listening, timeout=5)
    yield Cluster(url, pki.ca_pem, (cert_path, key_path), client, admin)
    stop.set()
    await task
    await client.close()
    await admin.close()


async def _namespace(client: KubeClient) -> str:
    name = f"va-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def start_path(ns: str, name: str) -> str:
    return f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/start"


async def test_discovery_is_open(cluster: Cluster) -> None:
    async with cluster.session(with_cert=False) as session:
        for path in ("/apis/subresources.kubevirt.io/v1", "/apis/subresources.kubevirt.io/v1alpha3/version"):
            async with session.get(path) as response:
                assert response.status == 200, await response.text()
        async with session.get("/") as response:
            assert "/apis/subresources.kubevirt.io/v1" in (await response.json())["paths"]
        async with session.get("/apis/subresources.kubevirt.io") as response:
            assert (await response.json())["preferredVersion"]["version"] == "v1"


async def _put(cluster: Cluster, path: str, headers: Mapping[str, str], *, with_cert: bool) -> tuple[int, str]:
    async with cluster.session(with_cert=with_cert) as session, session.put(path, json={}, headers=headers) as reply:
        return reply.status, await reply.text()


async def test_subresources_need_the_proxy_certificate_and_a_review(cluster: Cluster) -> None:
    ns = await _namespace(cluster.admin)
    await cluster.admin.create(VIRTUAL_MACHINES, vm_manifest("ca", "Halted"), ns)
    path = start_path(ns, "ca")
    assert await _put(cluster, path, {"X-Remote-User": "alice"}, with_cert=False) == (
        401,
        "request is not authenticated",
    )
    assert await _put(cluster, path, {}, with_cert=True) == (401, "a valid user header is required for authorization")
    bob = {"X-Remote-User": "bob", "X-Remote-Group": "system:authenticated"}
    assert await _put(cluster, path, bob, with_cert=True) == (401, "bob may not start VMs")
    alice = {"X-Remote-User": "alice", "X-Remote-Group": "devs", "X-Remote-Extra-Scopes": "a"}
    status, _ = await _put(cluster, path, alice, with_cert=True)
    assert status == 202
    assert (await cluster.admin.get(VIRTUAL_MACHINES, "ca", ns))["spec"]["runStrategy"] == "Always"
    review = cluster.client.reviews[-1]["spec"]
    assert review["user"] == "alice" and review["groups"] == ["devs"] and review["extra"] == {"scopes": ["a"]}
    assert review["resourceAttributes"] == {
        "namespace": ns,
        "verb": "update",
        "group": "subresources.kubevirt.io",
        "version": "v1",
        "resource": "virtualmachines",
        "subresource": "start",
        "name": "ca",
    }


async def test_webhooks_are_served_without_a_client_certificate(cluster: Cluster) -> None:
    vm = vm_manifest("hooked", "Always")
    vm["metadata"]["namespace"] = "default"
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "operation": "CREATE",
            "object": vm,
            "userInfo": {"username": "alice"},
        },
    }
    async with cluster.session(with_cert=False) as session:
        async with session.post("/virtualmachines-mutate", json=review) as reply:
            answer = await reply.json()
        assert answer["response"]["uid"] == "u-1" and answer["response"]["allowed"] is True
        assert answer["response"]["patchType"] == "JSONPatch"
        async with session.post("/virtualmachines-validate", json=review) as reply:
            assert (await reply.json())["response"]["allowed"] is True
