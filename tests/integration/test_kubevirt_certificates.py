"""virt-handler's certificates on a cluster, against a real API server: virt-controller's leader issues the CA and the
two halves into Secrets; virt-handler serves its API over mutual TLS from those files (as a Secret volume holds them)
and virt-api reaches it with the client half, while a peer without that certificate is refused."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubevirt.api import constants as c
from pykubevirt.api.errors import APIError
from pykubevirt.api.handler_address import handler_url
from pykubevirt.client.api import KubeClient
from pykubevirt.client.informer import Informer
from pykubevirt.client.resources import CONFIG_MAPS, NAMESPACES, NODES, SECRETS, VIRTUAL_MACHINE_INSTANCES
from pykubevirt.controller.kubevirt_certificates import (
    API_SECRET,
    CA_BUNDLE_CONFIG_MAP,
    CA_BUNDLE_KEY,
    CA_SECRET,
    CLIENT_SECRET,
    SERVER_SECRET,
    CertificateIssuer,
    issued_pairs,
    secret_files,
)
from pykubevirt.handler.api_server import HandlerAPI
from pykubevirt.handler.app import HandlerOptions, VirtHandler
from pykubevirt.handler.certificates import (
    CLIENT_COMMON_NAME,
    SERVER_COMMON_NAME,
    HandlerCertificates,
    api_server_context,
    client_watch,
)
from pykubevirt.pki.certificates import cert_pem, certificate_sans, create_ca, issue_leaf, key_pem
from pykubevirt.virtapi import cluster
from pykubevirt.virtapi.handler_client import HandlerClient
from pykubevirt.virtapi.serving_certificates import ServingFiles
from pykubevirt.webconsole.upstream import Upstream, handler_ca_watch
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

NAMESPACE = "kubevirt"
# What a first issue writes, in order; a new CA has everything issued again.
EVERYTHING = [
    f"secret/{CA_SECRET}",
    f"configmap/{CA_BUNDLE_CONFIG_MAP}",
    f"secret/{CLIENT_SECRET}",
    f"secret/{SERVER_SECRET}",
    f"secret/{API_SECRET}",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    process = APIServerProcess(tmp_path_factory.mktemp("handler-certs") / "data").start()
    yield process
    process.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def admin(server: APIServerProcess) -> AsyncIterator[KubeClient]:
    client = client_for(server)
    if await client.get_or_none(NAMESPACES, NAMESPACE) is None:
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    yield client
    await client.close()


async def files_of(admin: KubeClient, name: str) -> dict[str, bytes]:
    return secret_files(await admin.get(SECRETS, name, NAMESPACE))


def certificate(data: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data)


def usage(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


async def put_files(admin: KubeClient, name: str, files: dict[str, bytes]) -> None:
    secret = await admin.get(SECRETS, name, NAMESPACE)
    secret["data"] = {key: base64.b64encode(value).decode() for key, value in files.items()}
    await admin.update(SECRETS, secret)


async def mount(admin: KubeClient, directory: Path) -> HandlerCertificates:
    """What the DaemonSet's projected volume holds: both halves in one directory."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in (CLIENT_SECRET, SERVER_SECRET):
        for key, value in (await files_of(admin, name)).items():
            (directory / key).write_bytes(value)
    return HandlerCertificates(directory)


async def test_the_leader_issues_the_ca_and_both_halves_once(
    admin: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pykubevirt.controller.kubevirt_certificates")
    issuer = CertificateIssuer(admin, NAMESPACE)
    assert await issuer.ensure() == EVERYTHING
    assert await issuer.ensure() == []
    created = [r for r in caplog.records if r.getMessage().startswith("created ")]
    assert [(r.getMessage(), getattr(r, "namespace", "")) for r in created] == [
        (f"created Secret {CA_SECRET}", NAMESPACE),
        (f"created ConfigMap {CA_BUNDLE_CONFIG_MAP}", NAMESPACE),
        (f"created Secret {CLIENT_SECRET}", NAMESPACE),
        (f"created Secret {SERVER_SECRET}", NAMESPACE),
        (f"created Secret {API_SECRET}", NAMESPACE),
    ]
    ca_secret = await admin.get(SECRETS, CA_SECRET, NAMESPACE)
    assert ca_secret["type"] == "kubernetes.io/tls"
    ca = certificate(secret_files(ca_secret)["tls.crt"])
    # The ConfigMap publishes the CA's certificate alone, for those that only verify a handler.
    bundle = (await admin.get(CONFIG_MAPS, CA_BUNDLE_CONFIG_MAP, NAMESPACE))["data"][CA_BUNDLE_KEY]
    assert certificate(bundle.encode()) == ca
    client, server = await files_of(admin, CLIENT_SECRET), await files_of(admin, SERVER_SECRET)
    # The client half carries the CA; the server half holds no more than its own pair.
    assert sorted(client) == ["ca.crt", "client.crt", "client.key"] and certificate(client["ca.crt"]) == ca
    assert sorted(server) == ["server.crt", "server.key"]
    for data, name, purpose in (
        (client["client.crt"], CLIENT_COMMON_NAME, ExtendedKeyUsageOID.CLIENT_AUTH),
        (server["server.crt"], SERVER_COMMON_NAME, ExtendedKeyUsageOID.SERVER_AUTH),
    ):
        leaf = certificate(data)
        leaf.verify_directly_issued_by(ca)
        assert common_name(leaf) == name and usage(leaf) == [purpose]
    # virt-api's pair names its Service every way a client may: every replica serves it, kube-apiserver trusts its CA.
    api = await files_of(admin, API_SECRET)
    serving = certificate(api["tls.crt"])
    serving.verify_directly_issued_by(ca)
    assert certificate(api["ca.crt"]) == ca and usage(serving) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert certificate_sans(serving)[0] == {
        "virt-api",
        "virt-api.kubevirt",
        "virt-api.kubevirt.svc",
        "virt-api.kubevirt.svc.cluster.local",
    }


async def test_a_half_of_another_ca_is_issued_again(admin: KubeClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pykubevirt.controller.kubevirt_certificates")
    issuer = CertificateIssuer(admin, NAMESPACE)
    await issuer.ensure()
    ca = certificate((await files_of(admin, CA_SECRET))["tls.crt"])
    other_cert, other_key = create_ca("someone-else")
    (server_pair,) = [pair for pair in issued_pairs(NAMESPACE) if pair.secret == SERVER_SECRET]
    await put_files(admin, SERVER_SECRET, server_pair.issue(other_cert, other_key, b""))
    assert await issuer.ensure() == [f"secret/{SERVER_SECRET}"]
    assert caplog.records[-1].getMessage() == f"renewed Secret {SERVER_SECRET}"
    certificate((await files_of(admin, SERVER_SECRET))["server.crt"]).verify_directly_issued_by(ca)


async def test_a_new_ca_is_trusted_everywhere_before_any_pair_of_it_is_issued(admin: KubeClient) -> None:
    issuer = CertificateIssuer(admin, NAMESPACE)
    await issuer.ensure()
    ca = certificate((await files_of(admin, CA_SECRET))["tls.crt"])
    before = {name: await files_of(admin, name) for name in (CLIENT_SECRET, SERVER_SECRET, API_SECRET)}

    # A CA that ends tomorrow: within the 30 days before its end, when it is replaced.
    old_cert, old_key = create_ca("about-to-expire", validity=datetime.timedelta(days=1))
    await put_files(admin, CA_SECRET, {"tls.crt": old_cert.public_bytes(_PEM), "tls.key": key_pem(old_key)})
    # First only the trust moves: the bundle holds the new CA and the ones it replaced; the server half, which
    # carries no CA, is left alone, and every pair stays the old CA's while the bundle reaches the pods.
    assert await issuer.ensure() == [
        f"secret/{CA_SECRET}",
        f"configmap/{CA_BUNDLE_CONFIG_MAP}",
        f"secret/{CLIENT_SECRET}",
        f"secret/{API_SECRET}",
    ]
    renewed = certificate((await files_of(admin, CA_SECRET))["tls.crt"])
    assert renewed not in (ca, old_cert) and renewed.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + _YEAR
    bundle = (await admin.get(CONFIG_MAPS, CA_BUNDLE_CONFIG_MAP, NAMESPACE))["data"][CA_BUNDLE_KEY].encode()
    trusted = x509.load_pem_x509_certificates(bundle)
    # The new CA first; the two it replaced (born in the same second here, so in either order) after it.
    assert trusted[0] == renewed and sorted(trusted[1:], key=common_name) == [old_cert, ca]
    for name, key in ((CLIENT_SECRET, "client.crt"), (SERVER_SECRET, "server.crt"), (API_SECRET, "tls.crt")):
        files = await files_of(admin, name)
        assert files[key] == before[name][key] and files.get("ca.crt", bundle) == bundle
    assert 590 < issuer.settles_in() <= 600
    assert await issuer.ensure() == []
    # Settling keeps pairs of the old CAs only: one of the new CA that is due is renewed at once.
    ca_files = await files_of(admin, CA_SECRET)
    new_key = serialization.load_pem_private_key(ca_files["tls.key"], password=None)
    assert isinstance(new_key, ec.EllipticCurvePrivateKey)
    due, due_key = issue_leaf(
        renewed, new_key, CLIENT_COMMON_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, validity=datetime.timedelta(days=1)
    )
    await put_files(
        admin, CLIENT_SECRET, {"ca.crt": bundle, "client.crt": cert_pem(due), "client.key": key_pem(due_key)}
    )
    assert await issuer.ensure() == [f"secret/{CLIENT_SECRET}"]
    fresh = certificate((await files_of(admin, CLIENT_SECRET))["client.crt"])
    assert fresh != due and fresh.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + _YEAR / 2
    # Back to the old CA's pair for what follows.
    await put_files(admin, CLIENT_SECRET, {**before[CLIENT_SECRET], "ca.crt": bundle})

    # Once it has settled, every pair is the new CA's, and the old CAs stay trusted for the pods not updated yet.
    settled = CertificateIssuer(admin, NAMESPACE, settle=datetime.timedelta(0))
    assert await settled.ensure() == [f"secret/{CLIENT_SECRET}", f"secret/{SERVER_SECRET}", f"secret/{API_SECRET}"]
    for name, key in ((CLIENT_SECRET, "client.crt"), (SERVER_SECRET, "server.crt"), (API_SECRET, "tls.crt")):
        files = await files_of(admin, name)
        certificate(files[key]).verify_directly_issued_by(renewed)
        assert files.get("ca.crt", bundle) == bundle
    # While the kubelet delivers the new pairs, a peer with an old pair and one with a new pair trust each other,
    # since both had the bundle first. A peer trusting only the old CA would have refused the new pair.
    old_client, new_client = before[CLIENT_SECRET], await files_of(admin, CLIENT_SECRET)
    old_server, new_server = before[SERVER_SECRET], await files_of(admin, SERVER_SECRET)
    assert await handshake(old_client, bundle, new_server, bundle)
    assert await handshake(new_client, bundle, old_server, bundle)
    assert not await handshake(old_client, old_client["ca.crt"], new_server, bundle)
    assert await settled.ensure() == []


async def handshake(client: dict[str, bytes], client_ca: bytes, server: dict[str, bytes], server_ca: bytes) -> bool:
    """Whether a handler serving `server` and trusting `server_ca` and a peer presenting `client` and trusting
    `client_ca` complete a mutual-TLS handshake."""
    with tempfile.TemporaryDirectory() as scratch:
        files = Path(scratch)
        for name, data in {**client, **server}.items():
            (files / name).write_bytes(data)
        serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        serving.load_cert_chain(files / "server.crt", files / "server.key")
        serving.load_verify_locations(cadata=server_ca.decode())
        serving.verify_mode = ssl.CERT_REQUIRED
        peer = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        peer.check_hostname = False
        peer.load_cert_chain(files / "client.crt", files / "client.key")
        peer.load_verify_locations(cadata=client_ca.decode())

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"ok")
            await writer.drain()
            writer.close()

        listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
        port = listener.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=peer)
            answered = await reader.read()
            writer.close()
        except (ssl.SSLError, ConnectionError):
            return False
        finally:
            listener.close()
        return answered == b"ok"


_PEM = serialization.Encoding.PEM
_YEAR = datetime.timedelta(days=365)


def vmi_on(node: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": "absent"}, "status": {"nodeName": node}}


async def test_virt_api_reaches_the_handler_over_mutual_tls_and_others_are_refused(
    admin: KubeClient, tmp_path: Path
) -> None:
    await CertificateIssuer(admin, NAMESPACE).ensure()
    certs = await mount(admin, tmp_path / "handler")
    node = "tls-node"
    api = HandlerAPI(node=node, pods_dir=tmp_path / "pods", vmis=Informer(admin, VIRTUAL_MACHINE_INSTANCES))
    context = api_server_context(certs)
    await api.start(0, context)
    try:
        address = api.annotations()[c.HANDLER_ADDRESS_ANNOTATION]
        assert address == f"https://127.0.0.1:{api.port}"
        await admin.create(
            NODES,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "annotations": api.annotations()}},
        )
        # virt-api with the client half: past TLS and the certificate check, the handler answers for the VMI.
        (tmp_path / "api").mkdir()
        for key in ("ca.crt", "client.crt", "client.key"):
            (tmp_path / "api" / key).write_bytes((certs.directory / key).read_bytes())
        handler = HandlerClient(admin, client_watch(tmp_path / "api"))
        with pytest.raises(APIError) as found:
            await handler.get_json(vmi_on(node), "guestosinfo")
        assert found.value.code == 404 and f"not found on node {node}" in found.value.message
        await handler.close()

        # A virt-api whose Secret volume is still empty says so instead of trying without a certificate.
        waiting = HandlerClient(admin, client_watch(tmp_path / "empty"))
        with pytest.raises(APIError) as unavailable:
            await waiting.get_json(vmi_on(node), "guestosinfo")
        assert unavailable.value.code == 503 and "no client certificate" in unavailable.value.message
        await waiting.close()

        # A peer that trusts the CA but has no client certificate gets the probes, never a VMI.
        anonymous = verifier(certs.ca_file)
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{address}/healthz", ssl=anonymous) as reply:
                assert reply.status == 200
            vmi_path = c.HANDLER_VMI_PATH.format(namespace="default", name="absent")
            async with session.get(f"{address}{vmi_path}/guestosinfo", ssl=anonymous) as reply:
                assert reply.status == 401
                assert "client certificate" in (await reply.json())["message"]
            # The server half as a client certificate: it has serverAuth only, which the handler's TLS refuses.
            impostor = ssl.create_default_context(cafile=str(certs.ca_file))
            impostor.check_hostname = False
            impostor.load_cert_chain(certs.server_cert_file, certs.server_key_file)
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"{address}{vmi_path}/guestosinfo", ssl=impostor) as reply:
                    await reply.read()

        # The web console scrapes the handler's /metrics over https, verifying it against the published CA only.
        bundle = (await admin.get(CONFIG_MAPS, CA_BUNDLE_CONFIG_MAP, NAMESPACE))["data"][CA_BUNDLE_KEY]
        (tmp_path / "ca-bundle").write_text(bundle)
        console = Upstream("https://127.0.0.1:1", True, handler_ca=handler_ca_watch(str(tmp_path / "ca-bundle")))
        code, text = await console.scrape(f"{handler_url(address)}/metrics", "token")
        assert code == 200 and "# TYPE" in text
        unverified = Upstream("https://127.0.0.1:1", True)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await unverified.scrape(f"{handler_url(address)}/metrics", "token")
        for upstream in (console, unverified):
            if upstream.session is not None:
                await upstream.session.close()

        # Renewed files are loaded into the listening context: the next connection gets the new certificate.
        async def deliver() -> None:
            await mount(admin, certs.directory)
            api_server_context(certs, into=context)

        await renewal_is_served(admin, SERVER_SECRET, deliver, certs.server_cert_file, address, anonymous)
    finally:
        await api.stop()
        await admin.delete(NODES, node)


async def peer_certificate(address: str, context: ssl.SSLContext) -> x509.Certificate:
    """The certificate a new TLS connection to `address` is served."""
    host, port = address.removeprefix("https://").rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
        await writer.wait_closed()
    return x509.load_der_x509_certificate(der)


def verifier(ca_file: Path) -> ssl.SSLContext:
    """A client trusting the CA only, with no certificate of its own (the certificates name no host)."""
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False
    return context


async def renewal_is_served(
    admin: KubeClient,
    secret: str,
    deliver: Callable[[], Awaitable[object]],
    cert_file: Path,
    address: str,
    verify: ssl.SSLContext,
) -> None:
    """Renew `secret`'s pair, `deliver` it as the kubelet updates a volume, and wait until a new connection to
    `address` is served the renewed certificate."""
    first = await peer_certificate(address, verify)
    await put_files(admin, secret, {})
    await CertificateIssuer(admin, NAMESPACE).ensure()
    await deliver()
    renewed = certificate(cert_file.read_bytes())
    assert renewed != first

    async def serves_renewed() -> bool:
        return await peer_certificate(address, verify) == renewed

    await eventually(serves_renewed)


async def cancelled(task: asyncio.Task[object]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_virt_handler_listens_once_its_certificates_arrive_and_reloads_them(
    admin: KubeClient, tmp_path: Path
) -> None:
    directory = tmp_path / "certificates"
    directory.mkdir()
    options = HandlerOptions(
        node="late-node",
        pods_dir=tmp_path / "pods",
        state_dir=tmp_path / "state",
        certificates_dir=str(directory),
        mutual_tls=True,
        ksm_dir=None,
    )
    handler = VirtHandler(admin, options)
    serving = asyncio.create_task(handler._serve_api_over_tls(poll=0.05))
    try:
        # An empty Secret volume: nothing listens, and the Node is told no address.
        await asyncio.sleep(0.3)
        assert handler.api.port == 0 and handler.api.annotations() == {}
        await CertificateIssuer(admin, NAMESPACE).ensure()
        certs = await mount(admin, directory)
        address = await eventually(lambda: handler.api.annotations().get(c.HANDLER_ADDRESS_ANNOTATION))
        assert address.startswith("https://") and handler._address_changed.is_set()
        verify = verifier(certs.ca_file)
        assert await peer_certificate(address, verify) == certificate(certs.server_cert_file.read_bytes())
        # The kubelet updates the volume after a renewal: the listening socket serves the new certificate.
        await renewal_is_served(
            admin, SERVER_SECRET, lambda: mount(admin, directory), certs.server_cert_file, address, verify
        )
    finally:
        await cancelled(serving)
        await handler.api.stop()


async def test_virt_api_waits_for_its_pair_and_loads_a_renewal_in_place(
    admin: KubeClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster, "SERVING_POLL_SECONDS", 0.05)
    await CertificateIssuer(admin, NAMESPACE).ensure()
    files = ServingFiles(tmp_path / "serving")
    files.directory.mkdir()
    watch = files.watch()
    waiting = asyncio.create_task(watch.wait(0.05, "the serving certificate"))
    await asyncio.sleep(0.2)
    assert not waiting.done()

    async def deliver() -> None:
        for key, value in (await files_of(admin, API_SECRET)).items():
            (files.directory / key).write_bytes(value)

    await deliver()
    assert await asyncio.wait_for(waiting, 5) == (await files_of(admin, API_SECRET))["ca.crt"]

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert_file, files.key_file)
    server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0, ssl=context)
    address = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    options = cluster.ClusterOptions(
        host="127.0.0.1",
        port=0,
        cert_file=files.cert_file,
        key_file=files.key_file,
        feature_gates=frozenset(),
        handler_ca_file=None,
        serving=watch,
        publish_ca_bundle=False,
    )
    following = asyncio.create_task(cluster._follow_serving(admin, options, context))
    try:
        await renewal_is_served(admin, API_SECRET, deliver, files.cert_file, address, verifier(files.ca_file))
    finally:
        await cancelled(following)
        server.close()
        await server.wait_closed()
