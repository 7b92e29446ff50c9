"""The migration proxies: a unix socket on the source, TCP between the nodes, the target's unix socket, spliced."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from pykubevirt.handler.certificates import (
    CLIENT_COMMON_NAME,
    SERVER_COMMON_NAME,
    MigrationTLS,
    MigrationTLSUnavailable,
    PeerRejected,
    certificates_watch,
    ensure_handler_certificates,
    issue,
    migration_context,
)
from pykubevirt.handler.migration_proxy import MigrationProxy, ProxySet, TLSStream, dial_tcp, dial_unix
from pykubevirt.pki.certificates import create_ca

PAYLOAD = bytes(range(256)) * 40_000  # 10 MB, more than a pipe holds


async def echo_reversed_server(path: Path) -> tuple[asyncio.AbstractServer, list[int]]:
    """A unix server that reads to EOF and answers with the byte count, then closes."""
    sizes: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        sizes.append(len(data))
        writer.write(str(len(data)).encode() + data[:16])
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(serve, path=str(path)), sizes


def talk(path: str, payload: bytes) -> bytes:
    """Send `payload`, half-close, and read the answer to EOF (a blocking client, as QEMU is)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def read_to_end(path: str) -> bytes:
    """Connect and read to EOF without writing: a write could race the proxy's close and fail with EPIPE."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(path)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


async def test_bytes_cross_both_proxies_both_ways_and_end_of_stream_follows(tmp_path: Path) -> None:
    server, sizes = await echo_reversed_server(tmp_path / "target.sock")
    proxies = ProxySet()
    target = await proxies.add(MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1"))
    await proxies.add(MigrationProxy(dial_tcp("127.0.0.1", target.port), path=str(tmp_path / "source.sock")))
    answers = await asyncio.gather(
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), PAYLOAD),
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), b"second connection"),
    )
    assert answers == [str(len(PAYLOAD)).encode() + PAYLOAD[:16], b"17second connectio"]
    assert sorted(sizes) == [17, len(PAYLOAD)]
    await proxies.stop()
    server.close()


async def test_an_unreachable_upstream_closes_the_accepted_connection(tmp_path: Path) -> None:
    proxy = MigrationProxy(dial_unix(str(tmp_path / "nobody.sock")), path=str(tmp_path / "source.sock"))
    await proxy.start()
    assert await asyncio.to_thread(read_to_end, str(tmp_path / "source.sock")) == b""
    await proxy.stop()


async def test_a_stopped_proxy_accepts_nothing_more_and_removes_its_socket(tmp_path: Path) -> None:
    server, _ = await echo_reversed_server(tmp_path / "target.sock")
    proxy = MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1")
    port = await proxy.start()
    await proxy.stop()
    refused = False
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        refused = True
    assert refused
    unix = MigrationProxy(dial_unix(str(tmp_path / "target.sock")), path=str(tmp_path / "source.sock"))
    await unix.start()
    await unix.stop()
    assert not (tmp_path / "source.sock").exists()
    server.close()


@pytest.fixture
def tls(tmp_path: Path) -> MigrationTLS:
    found = certificates_watch(str(tmp_path / "pki"), create=True).current()
    assert found is not None
    return found


async def tls_pair(
    tmp_path: Path, tls: MigrationTLS
) -> tuple[ProxySet, MigrationProxy, asyncio.AbstractServer, list[int]]:
    """A target proxy speaking TLS to the echo server, and a source proxy dialling it with the client certificate."""
    server, sizes = await echo_reversed_server(tmp_path / "target.sock")
    proxies = ProxySet()
    target = await proxies.add(
        MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1", tls=tls.server)
    )
    await proxies.add(
        MigrationProxy(dial_tcp("127.0.0.1", target.port, tls.client), path=str(tmp_path / "source.sock"))
    )
    return proxies, target, server, sizes


async def test_with_tls_bytes_cross_both_proxies_both_ways_and_end_of_stream_follows(
    tmp_path: Path, tls: MigrationTLS
) -> None:
    proxies, _, server, sizes = await tls_pair(tmp_path, tls)
    answers = await asyncio.gather(
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), PAYLOAD),
        asyncio.to_thread(talk, str(tmp_path / "source.sock"), b"second connection"),
    )
    assert answers == [str(len(PAYLOAD)).encode() + PAYLOAD[:16], b"17second connectio"]
    assert sorted(sizes) == [17, len(PAYLOAD)]
    await proxies.stop()
    server.close()


def tls_client(port: int, context: ssl.SSLContext) -> bytes:
    """Handshake with the target proxy as `context`, send, half-close and read to EOF; b"" when refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            with context.wrap_socket(sock) as secure:
                secure.sendall(b"hello")
                # End of stream as the proxies send it: a TCP half-close under the TLS connection.
                socket.socket.shutdown(secure, socket.SHUT_WR)
                answer = b""
                while chunk := secure.recv(65536):
                    answer += chunk
                return answer
        except (ssl.SSLError, OSError):
            return b""


def context_without_certificate(tls_dir: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.load_verify_locations(cafile=str(tls_dir / "ca.crt"))
    return context


def peer_certificate(
    tmp_path: Path, tls_dir: Path, name: str, *, own_ca: bool, server: bool = False
) -> tuple[Path, Path]:
    """The files of a certificate for `name`, of the handlers' CA or of a CA of its own."""
    if own_ca:
        ca_cert, ca_key = create_ca("someone-else")
    else:
        ca_cert = x509.load_pem_x509_certificate((tls_dir / "ca.crt").read_bytes())
        loaded = serialization.load_pem_private_key((tls_dir / "ca.key").read_bytes(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca_key = loaded
    cert, key = issue(ca_cert, ca_key, name, server=server)
    (tmp_path / "peer.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "peer.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tmp_path / "peer.crt", tmp_path / "peer.key"


def context_with(tmp_path: Path, tls_dir: Path, name: str, *, own_ca: bool, server: bool = False) -> ssl.SSLContext:
    """A client presenting a certificate for `name`, of the handlers' CA or of a CA of its own."""
    context = context_without_certificate(tls_dir)
    context.load_cert_chain(*peer_certificate(tmp_path, tls_dir, name, own_ca=own_ca, server=server))
    return context


# Clients the target proxy refuses, as (tmp_path, the handlers' PKI directory) → the client's context.
REFUSED_CLIENTS = [
    pytest.param(lambda tmp_path, pki: context_without_certificate(pki), id="no-certificate"),
    pytest.param(
        lambda tmp_path, pki: context_with(tmp_path, pki, CLIENT_COMMON_NAME, own_ca=True),
        id="the-client-name-from-another-ca",
    ),
    # The handlers' CA, but a server certificate (serverAuth only) and the wrong common name.
    pytest.param(
        lambda tmp_path, pki: context_with(tmp_path, pki, SERVER_COMMON_NAME, own_ca=False, server=True),
        id="the-handlers-server-certificate",
    ),
    pytest.param(
        lambda tmp_path, pki: context_with(tmp_path, pki, "kubevirt.io:system:client:someone", own_ca=False),
        id="a-client-certificate-of-the-ca-with-another-name",
    ),
]


@pytest.mark.parametrize("refused_client", REFUSED_CLIENTS)
async def test_the_target_proxy_refuses_a_peer_without_the_handlers_client_certificate(
    tmp_path: Path, tls: MigrationTLS, refused_client: Callable[[Path, Path], ssl.SSLContext]
) -> None:
    proxies, target, server, sizes = await tls_pair(tmp_path, tls)
    pki = tmp_path / "pki"
    assert await asyncio.to_thread(tls_client, target.port, refused_client(tmp_path, pki)) == b""
    # Nothing reached the target's socket; the handlers' own client certificate does.
    assert sizes == []
    accepted = context_with(tmp_path, pki, CLIENT_COMMON_NAME, own_ca=False)
    assert await asyncio.to_thread(tls_client, target.port, accepted) == b"5hello"
    assert sizes == [5]
    await proxies.stop()
    server.close()


# Targets the source proxy's dial refuses: (tmp_path, the handlers' PKI directory) → the target's certificate and
# key files, and the error the dial raises.
REFUSED_TARGETS = [
    # The handlers' client certificate (clientAuth only): OpenSSL's check of the server's purpose fails.
    pytest.param(
        lambda tmp_path, pki: (pki / "client.crt", pki / "client.key"),
        ssl.SSLError,
        id="the-handlers-client-certificate",
    ),
    # A server certificate of the handlers' CA with another common name: the chain holds, check_peer rejects it.
    pytest.param(
        lambda tmp_path, pki: peer_certificate(
            tmp_path, pki, "kubevirt.io:system:node:someone", own_ca=False, server=True
        ),
        PeerRejected,
        id="a-server-certificate-of-the-ca-with-another-name",
    ),
]


@pytest.mark.parametrize(("target_certificate", "error"), REFUSED_TARGETS)
async def test_the_source_proxy_refuses_a_target_without_the_handlers_server_certificate(
    tmp_path: Path,
    tls: MigrationTLS,
    target_certificate: Callable[[Path, Path], tuple[Path, Path]],
    error: type[ssl.SSLError],
) -> None:
    """A listener presenting another certificate: the source proxy's dial fails its check."""
    impostor = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    impostor.load_cert_chain(*target_certificate(tmp_path, tmp_path / "pki"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def accept() -> None:
        conn, _ = listener.accept()
        with contextlib.suppress(ssl.SSLError, OSError), impostor.wrap_socket(conn, server_side=True) as secure:
            secure.recv(1)
        conn.close()

    accepting = asyncio.create_task(asyncio.to_thread(accept))
    with pytest.raises(error):
        await asyncio.to_thread(dial_tcp("127.0.0.1", port, tls.client))
    await accepting
    listener.close()


async def test_without_tls_the_tcp_leg_carries_the_plain_bytes(tmp_path: Path, tls: MigrationTLS) -> None:
    """disableTLS: neither proxy has a context; what crosses the TCP leg is the payload itself."""
    server, sizes = await echo_reversed_server(tmp_path / "target.sock")
    target = MigrationProxy(dial_unix(str(tmp_path / "target.sock")), address="127.0.0.1")
    await target.start()

    def plain_client() -> bytes:
        with socket.create_connection(("127.0.0.1", target.port), timeout=10) as sock:
            sock.sendall(b"plain bytes")
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
            return answer

    assert await asyncio.to_thread(plain_client) == b"11plain bytes"
    assert sizes == [11]
    await target.stop()
    server.close()


def test_the_embedded_certificates_are_made_once_and_reused(tmp_path: Path) -> None:
    first = ensure_handler_certificates(tmp_path / "pki")
    made = {f.name: f.read_bytes() for f in (tmp_path / "pki").iterdir() if not f.name.startswith(".")}
    again = ensure_handler_certificates(tmp_path / "pki")
    assert again == first and all(path.exists() for path in first.paths())
    assert {f.name: f.read_bytes() for f in (tmp_path / "pki").iterdir() if not f.name.startswith(".")} == made
    assert oct((tmp_path / "pki" / "server.key").stat().st_mode & 0o777) == "0o600"
    assert certificates_watch("", create=False).current() is None
    assert certificates_watch(str(tmp_path / "elsewhere"), create=False).current() is None


def test_a_tls_stream_names_the_other_handler(tmp_path: Path, tls: MigrationTLS) -> None:
    a, b = socket.socketpair()
    assert TLSStream(a, tls.server, server_side=True).peer_name == CLIENT_COMMON_NAME
    assert TLSStream(b, tls.client, server_side=False).peer_name == SERVER_COMMON_NAME
    a.close()
    b.close()


def test_disable_tls_in_the_migrations_configuration_gives_both_ends_plain_tcp(tls: MigrationTLS) -> None:
    plain = {"migrationConfiguration": {"disableTLS": True}}
    assert migration_context(tls, plain, server=True) is None
    assert migration_context(tls, plain, server=False) is None
    assert migration_context(None, plain, server=True) is None
    # KubeVirt's default (false, or a configuration without the field) is TLS with the handler's contexts.
    for state in ({"migrationConfiguration": {"disableTLS": False}}, {}):
        assert migration_context(tls, state, server=True) is tls.server
        assert migration_context(tls, state, server=False) is tls.client
        with pytest.raises(MigrationTLSUnavailable, match="no certificates"):
            migration_context(None, state, server=False)
