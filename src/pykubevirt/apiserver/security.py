"""TLS material, bearer tokens and kubeconfig files for the embedded API server.

A private CA signs the serving certificate; clients trust the CA through their kubeconfig. Tokens live in a static
file in kube-apiserver's --token-auth-file format, so the same file could feed a real API server.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime
import fcntl
import hashlib
import hmac
import io
import ipaddress
import secrets
import ssl
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from pykubevirt.client.config import LOCAL_SOCKET_EXTENSION, local_socket_of
from pykubevirt.pki.certificates import (
    IPAddress,
    certificate_sans,
    ensure_ca,
    is_current,
    issue_leaf,
    load_certificate,
    write_file,
    write_pair,
)

MAX_BODY_BYTES = 3 * 1024 * 1024

CA_COMMON_NAME = "pykubevirt-ca"
SERVING_COMMON_NAME = "kube-apiserver"
SERVING_VALIDITY = datetime.timedelta(days=365)

DEFAULT_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
DEFAULT_IPS = ("127.0.0.1", "::1")

ADMIN_USER = "kubernetes-admin"
ADMIN_GROUPS = ("system:masters",)
SCHEDULER_USER = "system:serviceaccount:kube-system:scheduler"
AUTHENTICATED_GROUP = "system:authenticated"
NODES_GROUP = "system:nodes"


def _sans(hostnames: Iterable[str], ips: Iterable[str]) -> tuple[set[str], set[IPAddress]]:
    dns = {h for h in (*DEFAULT_DNS_NAMES, *hostnames) if h}
    addresses = {ipaddress.ip_address(i) for i in (*DEFAULT_IPS, *ips) if i}
    return dns, addresses


def _serving_is_current(
    cert: x509.Certificate,
    ca_cert: x509.Certificate,
    dns: set[str],
    addresses: set[IPAddress],
) -> bool:
    have_dns, have_ips = certificate_sans(cert)
    return dns <= have_dns and addresses <= have_ips and is_current(cert, ca_cert)


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of the CA and serving certificate of one data directory."""

    directory: Path

    @property
    def ca_cert_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key_path(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert_path(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def key_path(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert_path.read_bytes()

    def server_ssl_context(self) -> ssl.SSLContext:
        """TLS 1.2+ server context presenting the serving certificate (HTTP/1.1 only: we do not speak h2)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_path, self.key_path)
        context.set_alpn_protocols(["http/1.1"])
        return context

    def client_ssl_context(self) -> ssl.SSLContext:
        """A client context trusting only our CA."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def ensure_pki(data_dir: Path, hostnames: Iterable[str] = (), ips: Iterable[str] = ()) -> Pki:
    """Create the CA and serving certificate at first start; reuse them later, renewing the serving one if needed."""
    pki = Pki(Path(data_dir) / "pki")
    pki.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    dns, addresses = _sans(hostnames, ips)
    ca_cert, ca_key = ensure_ca(pki.ca_cert_path, pki.ca_key_path, CA_COMMON_NAME)
    old = load_certificate(pki.cert_path)
    if old is None or not pki.key_path.exists() or not _serving_is_current(old, ca_cert, dns, addresses):
        # Keep names added by earlier starts, so alternating flags do not flip the certificate back and forth.
        if old is not None:
            old_dns, old_ips = certificate_sans(old)
            dns, addresses = dns | old_dns, addresses | old_ips
        cert, key = issue_leaf(
            ca_cert,
            ca_key,
            SERVING_COMMON_NAME,
            ExtendedKeyUsageOID.SERVER_AUTH,
            validity=SERVING_VALIDITY,
            dns_names=dns,
            addresses=addresses,
        )
        write_pair(pki.cert_path, pki.key_path, cert, key)
    return pki


@dataclass(frozen=True, slots=True)
class UserInfo:
    """An authenticated user, as kube-apiserver's user.Info."""

    username: str
    uid: str
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _TokenEntry:
    token: str
    user: UserInfo


def node_user(node_name: str) -> str:
    return f"system:node:{node_name}"


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_namespace(user: str) -> str:
    """The namespace of a `system:serviceaccount:NS:NAME` user name."""
    return user.split(":")[2]


def _default_users() -> list[tuple[str, tuple[str, ...]]]:
    return [(ADMIN_USER, ADMIN_GROUPS), (SCHEDULER_USER, service_account_groups("kube-system"))]


# Distinct headers remembered at most (each one a valid token's).
MAX_KNOWN_HEADERS = 1024


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _file_version(path: Path) -> tuple[int, int, int] | None:
    """What tells one save of a file from the next: every save replaces it (a new inode), even within one
    mtime tick, which two quick writes can share."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` between processes, held on a lock file beside it."""
    with open(path.with_name(f".{path.name}.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class TokenTable:
    """Static bearer tokens persisted in `tokens.csv` (token,user,uid,"group1,group2")."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        # Looked up by SHA-256 of the token: the dict lookup then reveals nothing about the token through timing.
        self._by_digest: dict[bytes, _TokenEntry] = {}
        self._by_user: dict[str, _TokenEntry] = {}
        # Authorization headers seen, and their users: a client sends the same header with every request. The str
        # hash is keyed per process, so a lookup's time tells nothing about the token either.
        self._known_headers: dict[str, UserInfo] = {}
        self._version = _file_version(path)
        if self._version is not None:
            self._load()

    def _load(self) -> None:
        self._known_headers = {}
        for row in csv.reader(io.StringIO(self.path.read_text())):
            if len(row) < 3 or not row[0].strip() or row[0].lstrip().startswith("#"):
                continue
            groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
            self._add(_TokenEntry(row[0].strip(), UserInfo(row[1].strip(), row[2].strip(), groups)))

    def _add(self, entry: _TokenEntry) -> None:
        self._by_digest[_digest(entry.token)] = entry
        self._by_user.setdefault(entry.user.username, entry)

    def _save(self) -> None:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for entry in self._by_digest.values():
            writer.writerow([entry.token, entry.user.username, entry.user.uid, ",".join(entry.user.groups)])
        write_file(self.path, out.getvalue().encode(), 0o600)
        self._version = _file_version(self.path)

    def ensure(self, user: str, groups: Iterable[str] = ()) -> str:
        """The token of `user`, created (and persisted) with `groups` when it has none yet."""
        # The API server and `pykubevirt kubeconfig` (the supervisor's node tokens) both add to the file: each adds
        # under an exclusive lock to what is on disk then, or one's save would drop the other's token.
        with self._lock, _exclusive(self.path):
            if _file_version(self.path) is not None:
                self._load()
            entry = self._by_user.get(user)
            if entry is None:
                entry = _TokenEntry(secrets.token_urlsafe(32), UserInfo(user, str(uuid.uuid4()), tuple(groups)))
                self._add(entry)
                self._save()
            return entry.token

    def ensure_node(self, node_name: str) -> str:
        return self.ensure(node_user(node_name), (NODES_GROUP,))

    def token_for(self, user: str) -> str | None:
        entry = self._by_user.get(user)
        return entry.token if entry else None

    def uid_of(self, user: str) -> str:
        entry = self._by_user.get(user)
        return entry.user.uid if entry else ""

    def _reload_if_changed(self) -> bool:
        """Pick up tokens another process (`pykubevirt kubeconfig`) added to the file; True when it changed."""
        version = _file_version(self.path)
        with self._lock:
            if version is None or version == self._version:
                return False
            self._version = version
            self._load()
        return True

    @property
    def admin_token(self) -> str:
        return self.ensure(ADMIN_USER, ADMIN_GROUPS)

    def authenticate(self, authorization_header: str | None) -> UserInfo | None:
        """The user of an `Authorization: Bearer <token>` header, or None."""
        if not authorization_header:
            return None
        known = self._known_headers.get(authorization_header)
        if known is not None:
            return known
        user = self._authenticate(authorization_header)
        if user is not None:
            if len(self._known_headers) >= MAX_KNOWN_HEADERS:
                self._known_headers = {}
            self._known_headers[authorization_header] = user
        return user

    def _authenticate(self, authorization_header: str) -> UserInfo | None:
        scheme, _, token = authorization_header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        entry = self._by_digest.get(_digest(token))
        if entry is None and self._reload_if_changed():
            entry = self._by_digest.get(_digest(token))
        if entry is None or not hmac.compare_digest(entry.token.encode(), token.encode()):
            return None
        groups = entry.user.groups
        if AUTHENTICATED_GROUP not in groups:
            groups = (*groups, AUTHENTICATED_GROUP)
        return UserInfo(entry.user.username, entry.user.uid, groups)


def ensure_tokens(data_dir: Path) -> TokenTable:
    """Load `tokens.csv`, creating it with the admin's and the scheduler's tokens at first start."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    table = TokenTable(Path(data_dir) / "tokens.csv")
    for user, groups in _default_users():
        table.ensure(user, groups)
    return table


def kubeconfig(
    server_url: str,
    ca_pem: bytes,
    token: str,
    *,
    user_name: str,
    context_name: str = "pykubevirt",
    cluster_name: str = "pykubevirt",
    namespace: str = "default",
    local_socket: str = "",
) -> dict[str, Any]:
    """A kubeconfig document with one cluster, user and context (and the server's unix socket, for this host)."""
    cluster: dict[str, Any] = {"server": server_url, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    if local_socket:
        cluster["extensions"] = [{"name": LOCAL_SOCKET_EXTENSION, "extension": {"path": local_socket}}]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": user_name, "user": {"token": token}}],
        "contexts": [
            {"name": context_name, "context": {"cluster": cluster_name, "user": user_name, "namespace": namespace}}
        ],
        "current-context": context_name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path,
    server_url: str,
    ca_pem: bytes,
    token: str,
    *,
    user_name: str,
    context_name: str = "pykubevirt",
    cluster_name: str = "pykubevirt",
    namespace: str = "default",
    local_socket: str = "",
) -> None:
    """Write a kubeconfig (mode 0600: it holds a bearer token) that kubectl and pykubevirt.client read."""
    document = kubeconfig(
        server_url,
        ca_pem,
        token,
        user_name=user_name,
        context_name=context_name,
        cluster_name=cluster_name,
        namespace=namespace,
        local_socket=local_socket,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, yaml.safe_dump(document, sort_keys=False).encode(), 0o600)


def write_user_kubeconfig(
    apiserver_dir: Path, path: Path, user: str, groups: Iterable[str] = (), *, namespace: str = "default"
) -> Path:
    """A kubeconfig for `user` (in `groups`) of the server whose data is in `apiserver_dir`, next to its admin one.

    The token is added to the server's tokens.csv, which the running server re-reads when it meets an unknown token.
    """
    admin = yaml.safe_load((Path(apiserver_dir) / "kubeconfig").read_text())
    cluster = admin["clusters"][0]["cluster"]
    token = TokenTable(Path(apiserver_dir) / "tokens.csv").ensure(user, groups)
    ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    socket = local_socket_of(cluster)
    write_kubeconfig(path, cluster["server"], ca_pem, token, user_name=user, namespace=namespace, local_socket=socket)
    return Path(path)
