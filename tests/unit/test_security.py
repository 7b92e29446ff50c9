"""PKI, static tokens and kubeconfig files of the embedded API server."""

from __future__ import annotations

import asyncio
import base64
import csv
import datetime
import ipaddress
import multiprocessing
import os
import ssl
import stat
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from cryptography import x509

from pykubevirt.apiserver import discovery, security
from pykubevirt.apiserver.security import (
    ADMIN_USER,
    SCHEDULER_USER,
    ensure_pki,
    ensure_tokens,
    write_kubeconfig,
)
from pykubevirt.virtapi.identities import CONTROLLER_USER, HANDLER_USER, VIRT_API_USER


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _client_context(ca_pem: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=ca_pem.decode())


def test_max_body_bytes() -> None:
    assert security.MAX_BODY_BYTES == 3 * 1024 * 1024


def test_pki_created_once_and_reused(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path, ["node-1.example"], ["10.1.2.3"])
    for path in (pki.ca_cert_path, pki.ca_key_path, pki.cert_path, pki.key_path):
        assert path.exists() and path.parent == tmp_path / "pki"
    assert _mode(pki.ca_key_path) == 0o600
    assert _mode(pki.key_path) == 0o600
    files = {p: p.read_bytes() for p in (pki.ca_cert_path, pki.ca_key_path, pki.cert_path, pki.key_path)}
    again = ensure_pki(tmp_path, ["node-1.example"], ["10.1.2.3"])
    assert {p: p.read_bytes() for p in files} == files
    assert again.ca_pem == pki.ca_pem == files[pki.ca_cert_path]


def test_serving_certificate(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path, ["node-1.example"], ["10.1.2.3"])
    ca, cert = _cert(pki.ca_cert_path), _cert(pki.cert_path)
    dns, ips = security.certificate_sans(cert)
    assert {"localhost", "kubernetes.default.svc", "kubernetes", "node-1.example"} <= dns
    assert {ipaddress.ip_address(a) for a in ("127.0.0.1", "::1", "10.1.2.3")} <= ips
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ca_days = (ca.not_valid_after_utc - ca.not_valid_before_utc).days
    cert_days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert 3640 <= ca_days <= 3660
    assert 360 <= cert_days <= 370


def test_missing_san_regenerates_serving_cert_only(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path, ["a.example"], [])
    ca_before, cert_before = pki.ca_cert_path.read_bytes(), pki.cert_path.read_bytes()
    ensure_pki(tmp_path, ["b.example"], ["192.168.7.7"])
    assert pki.ca_cert_path.read_bytes() == ca_before
    assert pki.cert_path.read_bytes() != cert_before
    dns, ips = security.certificate_sans(_cert(pki.cert_path))
    assert {"a.example", "b.example"} <= dns  # names from earlier starts are kept
    assert ipaddress.ip_address("192.168.7.7") in ips
    _cert(pki.cert_path).verify_directly_issued_by(_cert(pki.ca_cert_path))
    assert _mode(pki.key_path) == 0o600


def test_expiring_serving_cert_is_renewed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(security, "SERVING_VALIDITY", datetime.timedelta(days=10))
    pki = ensure_pki(tmp_path)
    short = pki.cert_path.read_bytes()
    monkeypatch.setattr(security, "SERVING_VALIDITY", datetime.timedelta(days=365))
    ensure_pki(tmp_path)
    assert pki.cert_path.read_bytes() != short


def test_new_ca_reissues_serving_cert(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    pki.ca_key_path.unlink()
    ensure_pki(tmp_path)
    _cert(pki.cert_path).verify_directly_issued_by(_cert(pki.ca_cert_path))


async def _echo_over_tls(pki: security.Pki, client: ssl.SSLContext, server_hostname: str) -> bytes:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=pki.server_ssl_context())
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname=server_hostname)
        writer.write(b"ping\n")
        await writer.drain()
        answer = await reader.readline()
        writer.close()
        return answer
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1", "kubernetes.default.svc"])
async def test_tls_handshake_with_kubeconfig_ca(tmp_path: Path, hostname: str) -> None:
    pki = ensure_pki(tmp_path)
    config_path = tmp_path / "kubeconfig"
    write_kubeconfig(config_path, "https://127.0.0.1:6443", pki.ca_pem, "t0ken", user_name=ADMIN_USER)
    config = yaml.safe_load(config_path.read_text())
    ca_pem = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    assert await _echo_over_tls(pki, _client_context(ca_pem), hostname) == b"ping\n"


async def test_tls_rejects_unknown_name_and_foreign_ca(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path / "one")
    other = ensure_pki(tmp_path / "two")
    with pytest.raises(ssl.SSLCertVerificationError):
        await _echo_over_tls(pki, _client_context(pki.ca_pem), "not-in-the-cert.example")
    with pytest.raises(ssl.SSLCertVerificationError):
        await _echo_over_tls(pki, _client_context(other.ca_pem), "localhost")


def test_server_context_settings(tmp_path: Path) -> None:
    context = ensure_pki(tmp_path).server_ssl_context()
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_tokens_file_created_with_components(tmp_path: Path) -> None:
    table = ensure_tokens(tmp_path)
    # Extensions name their own components' service accounts; the server mints their tokens at start.
    for user in (CONTROLLER_USER, HANDLER_USER, VIRT_API_USER):
        table.ensure(user, security.service_account_groups(security.service_account_namespace(user)))
    path = tmp_path / "tokens.csv"
    assert _mode(path) == 0o600
    rows = list(csv.reader(path.read_text().splitlines()))
    users = {row[1]: row for row in rows}
    assert set(users) >= {ADMIN_USER, CONTROLLER_USER, HANDLER_USER, VIRT_API_USER, SCHEDULER_USER}
    assert users[ADMIN_USER][3] == "system:masters"
    assert users[CONTROLLER_USER][3].split(",") == ["system:serviceaccounts", "system:serviceaccounts:kubevirt"]
    assert '"system:serviceaccounts,system:serviceaccounts:kubevirt"' in path.read_text()  # kube's quoting
    assert all(len(row) == 4 and row[0] and row[2] for row in rows)
    assert table.admin_token == users[ADMIN_USER][0]
    assert len({row[0] for row in rows}) == len(rows)


def test_authenticate(tmp_path: Path) -> None:
    table = ensure_tokens(tmp_path)
    user = table.authenticate(f"Bearer {table.admin_token}")
    assert user is not None
    assert user.username == ADMIN_USER
    assert "system:masters" in user.groups and "system:authenticated" in user.groups
    assert user.uid
    assert table.authenticate(f"bearer  {table.admin_token} ") is not None
    controller = table.ensure(CONTROLLER_USER, security.service_account_groups("kubevirt"))
    assert table.token_for(CONTROLLER_USER) == controller
    info = table.authenticate(f"Bearer {controller}")
    assert info is not None and info.username == CONTROLLER_USER


@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Bearer ", "Bearer wrong-token", "Basic YWRtaW46YWRtaW4=", "Token abc"]
)
def test_authenticate_rejects(tmp_path: Path, header: str | None) -> None:
    table = ensure_tokens(tmp_path)
    assert table.authenticate(header) is None


def test_admin_token_prefix_is_not_enough(tmp_path: Path) -> None:
    table = ensure_tokens(tmp_path)
    assert table.authenticate(f"Bearer {table.admin_token[:-1]}") is None
    assert table.authenticate(f"Bearer {table.admin_token}x") is None


def test_tokens_persist_and_node_tokens_on_demand(tmp_path: Path) -> None:
    table = ensure_tokens(tmp_path)
    admin = table.admin_token
    node = table.ensure_node("node-1")
    assert table.ensure_node("node-1") == node
    reloaded = ensure_tokens(tmp_path)
    assert reloaded.admin_token == admin
    info = reloaded.authenticate(f"Bearer {node}")
    assert info is not None
    assert info.username == "system:node:node-1"
    assert "system:nodes" in info.groups
    assert reloaded.ensure("someone", ["g1", "g2"]) != node
    row = next(r for r in csv.reader((tmp_path / "tokens.csv").read_text().splitlines()) if r[1] == "someone")
    assert row[3] == "g1,g2"


def test_a_running_server_sees_tokens_another_process_added(tmp_path: Path) -> None:
    serving = ensure_tokens(tmp_path)
    # `pykubevirt kubeconfig` writes through a table of its own, as another process would.
    minted = security.TokenTable(tmp_path / "tokens.csv").ensure("alice", ["team"])
    info = serving.authenticate(f"Bearer {minted}")
    assert info is not None and info.username == "alice"
    assert info.groups == ("team", "system:authenticated")
    assert serving.uid_of("alice")
    # Tokens the server adds later keep the other process's.
    serving.ensure("bob")
    assert ensure_tokens(tmp_path).authenticate(f"Bearer {minted}") is not None


def test_a_token_added_within_the_same_mtime_tick_is_neither_lost_nor_unknown(tmp_path: Path) -> None:
    """The supervisor's node token and the API server's component tokens land within one mtime tick at start-up."""
    path = tmp_path / "tokens.csv"
    serving = ensure_tokens(tmp_path)
    seen = path.stat()
    node = security.TokenTable(path).ensure_node("node01")
    # Both saves in one tick: the file's mtime is what the server saw before the node's token was added.
    os.utime(path, ns=(seen.st_atime_ns, seen.st_mtime_ns))
    assert serving.authenticate(f"Bearer {node}") is not None
    serving.ensure("system:serviceaccount:kubevirt:kubevirt-handler")
    assert ensure_tokens(tmp_path).authenticate(f"Bearer {node}") is not None


def test_token_writers_in_many_processes_lose_no_token(tmp_path: Path) -> None:
    ensure_tokens(tmp_path)
    users = [f"user-{i}" for i in range(24)]
    with multiprocessing.get_context("fork").Pool(6) as pool:
        tokens = pool.starmap(_mint, [(tmp_path / "tokens.csv", user) for user in users])
    table = ensure_tokens(tmp_path)
    assert [table.token_for(user) for user in users] == tokens


def _mint(path: Path, user: str) -> str:
    return security.TokenTable(path).ensure(user)


def test_write_user_kubeconfig_uses_the_admin_kubeconfigs_server(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    table = ensure_tokens(tmp_path)
    write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:7443", pki.ca_pem, table.admin_token, user_name="a")
    path = security.write_user_kubeconfig(tmp_path, tmp_path / "u.kubeconfig", "system:node:n1", ["system:nodes"])
    config = yaml.safe_load(path.read_text())
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:7443"
    assert config["users"][0]["name"] == "system:node:n1"
    assert _mode(path) == 0o600
    info = table.authenticate(f"Bearer {config['users'][0]['user']['token']}")
    assert info is not None and info.groups == ("system:nodes", "system:authenticated")


def test_kubeconfig_fields(tmp_path: Path) -> None:
    ca_pem = ensure_pki(tmp_path).ca_pem
    path = tmp_path / "sub" / "admin.kubeconfig"
    write_kubeconfig(path, "https://127.0.0.1:6443", ca_pem, "secret-token", user_name=ADMIN_USER, namespace="vms")
    assert _mode(path) == 0o600
    config = yaml.safe_load(path.read_text())
    assert (config["apiVersion"], config["kind"], config["current-context"]) == ("v1", "Config", "pykubevirt")
    cluster = config["clusters"][0]
    assert cluster["name"] == "pykubevirt"
    assert cluster["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == ca_pem
    assert config["users"] == [{"name": ADMIN_USER, "user": {"token": "secret-token"}}]
    assert config["contexts"] == [
        {"name": "pykubevirt", "context": {"cluster": "pykubevirt", "user": ADMIN_USER, "namespace": "vms"}}
    ]


async def test_python_client_reads_kubeconfig_over_tls(tmp_path: Path) -> None:
    """The official client trusts our CA and sends the token from the kubeconfig."""
    import kubernetes

    pki = ensure_pki(tmp_path)
    tokens = ensure_tokens(tmp_path)
    users: list[str] = []

    async def version(request: web.Request) -> web.Response:
        user = tokens.authenticate(request.headers.get("Authorization"))
        if user is None:
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        users.append(user.username)
        return web.json_response(discovery.version_info())

    app = web.Application()
    app.router.add_get("/version/", version)
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=pki.server_ssl_context())
    await site.start()
    port = runner.addresses[0][1]
    config_path = tmp_path / "kubeconfig"
    write_kubeconfig(config_path, f"https://localhost:{port}", pki.ca_pem, tokens.admin_token, user_name=ADMIN_USER)
    try:

        def call() -> str:
            client = kubernetes.config.new_client_from_config(config_file=str(config_path))
            try:
                return str(kubernetes.client.VersionApi(client).get_code().minor)
            finally:
                client.close()

        assert await asyncio.to_thread(call) == "32"
        assert users == [ADMIN_USER]
    finally:
        await runner.cleanup()


def test_a_header_seen_before_is_known_and_only_valid_ones_are_remembered(tmp_path: Path) -> None:
    table = ensure_tokens(tmp_path)
    token = table.admin_token  # read once: the property reloads the token file, which forgets the headers
    header = f"Bearer {token}"
    first = table.authenticate(header)
    assert first is not None and table.authenticate(header) == first
    for _ in range(2):
        assert table.authenticate(header + "x") is None
        assert table.authenticate(header[:-1]) is None
    # Many distinct valid headers (spacing and case of the scheme) do not grow the memory past its bound.
    for spaces in range(security.MAX_KNOWN_HEADERS + 5):
        assert table.authenticate("bearer " + " " * spaces + token) == first
    assert 0 < len(table._known_headers) <= security.MAX_KNOWN_HEADERS
