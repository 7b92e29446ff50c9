"""virt-handler's certificates and the TLS of its migration proxies (KubeVirt's pkg/util/tls/tls.go).

KubeVirt's virt-operator keeps a CA (`kubevirt-ca`) and gives every virt-handler one client certificate
(`kubevirt.io:system:client:virt-handler`, extended key usage clientAuth) and one server certificate
(`kubevirt.io:system:node:virt-handler`, serverAuth). Handler to handler, each end checks the other's chain against the
CA, the key usage and the common name, and neither checks a host name (the certificates name no node).

Here a handler reads them from `--certificates-dir` (`ca.crt`, `client.crt`/`client.key`, `server.crt`/`server.key`);
in the embedded cluster it creates what is missing there first (`--create-certificates`), as virt-operator would. On a
cluster virt-controller's leader issues them into two Secrets (controller/kubevirt_certificates.py), which the DaemonSet
projects into that directory and virt-api mounts the client half of.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from pykubevirt.pki.certificates import (
    CAKey,
    ensure_ca,
    is_current,
    issue_leaf,
    load_certificate,
    write_pair,
)
from pykubevirt.pki.file_watch import FileWatch

CLIENT_COMMON_NAME = "kubevirt.io:system:client:virt-handler"
SERVER_COMMON_NAME = "kubevirt.io:system:node:virt-handler"
CA_COMMON_NAME = "kubevirt.io:kubevirt-ca"
CERT_VALIDITY = datetime.timedelta(days=365)
# A peer that does not finish its handshake in this long is dropped.
HANDSHAKE_TIMEOUT_SECONDS = 10.0


class MigrationTLSUnavailable(Exception):
    """The migration asks for TLS and this handler has no certificates."""


def issue(
    ca_cert: x509.Certificate, ca_key: CAKey, common_name: str, *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A leaf certificate of the CA for `common_name`: serverAuth for the server one, clientAuth for the client one."""
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    # No subject key identifier, as KubeVirt's (Go's x509 makes one only for a CA).
    return issue_leaf(ca_cert, ca_key, common_name, usage, validity=CERT_VALIDITY, subject_key_id=False)


@dataclass(frozen=True, slots=True)
class HandlerCertificates:
    """The files of one `--certificates-dir`."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.directory / "ca.key"

    @property
    def client_cert_file(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key_file(self) -> Path:
        return self.directory / "client.key"

    @property
    def server_cert_file(self) -> Path:
        return self.directory / "server.crt"

    @property
    def server_key_file(self) -> Path:
        return self.directory / "server.key"

    def paths(self) -> tuple[Path, ...]:
        return (self.ca_file, self.client_cert_file, self.client_key_file, self.server_cert_file, self.server_key_file)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The handlers of one embedded cluster share the directory: one creates, the others wait and reuse."""
    with (directory / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_handler_certificates(directory: Path) -> HandlerCertificates:
    """Create the CA and the handlers' client and server certificates where missing (or expiring); reuse the rest."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = HandlerCertificates(directory)
    with _locked(directory):
        ca_cert, ca_key = ensure_ca(found.ca_file, found.ca_key_file, CA_COMMON_NAME)
        for cert_file, key_file, name, server in (
            (found.client_cert_file, found.client_key_file, CLIENT_COMMON_NAME, False),
            (found.server_cert_file, found.server_key_file, SERVER_COMMON_NAME, True),
        ):
            cert = load_certificate(cert_file) if key_file.exists() else None
            if cert is not None and is_current(cert, ca_cert):
                continue
            cert, key = issue(ca_cert, ca_key, name, server=server)
            write_pair(cert_file, key_file, cert, key)
    return found


def peer_common_name(peer: dict[str, Any] | None) -> str:
    """The subject's common name of a certificate as `getpeercert()` returns it."""
    for rdn in (peer or {}).get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class PeerRejected(ssl.SSLError):
    """The peer's certificate chains to the CA but is not the other handler's (KubeVirt's verifyPeerCert)."""


def check_peer(peer: dict[str, Any] | None, expected: str) -> None:
    name = peer_common_name(peer)
    if name != expected:
        raise PeerRejected(f"common name is invalid, expected {expected}, but got {name}")


@dataclass(frozen=True, slots=True)
class MigrationTLS:
    """The two contexts of the migration proxies: the target listens with `server`, the source dials with `client`.

    OpenSSL checks the chain against the CA and, by the purpose it verifies for, the extended key usage (clientAuth
    from a client, serverAuth from a server); `check_peer` then checks the common name, as KubeVirt's verifyPeerCert.
    """

    server: ssl.SSLContext
    client: ssl.SSLContext

    @classmethod
    def load(cls, certs: HandlerCertificates) -> MigrationTLS:
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.minimum_version = ssl.TLSVersion.TLSv1_2
        server.load_cert_chain(certs.server_cert_file, certs.server_key_file)
        server.load_verify_locations(cafile=str(certs.ca_file))
        server.verify_mode = ssl.CERT_REQUIRED
        # One connection per stream and no resumption: no session tickets to send after the handshake.
        server.num_tickets = 0
        # The certificates name no host; the migration proxies check the common name instead (check_peer).
        return cls(server=server, client=client_context(certs))


def client_context(certs: HandlerCertificates) -> ssl.SSLContext:
    """The handlers' client certificate, verifying a server against their CA: OpenSSL's purpose check leaves only the
    CA's serverAuth certificate, and no host name is checked, as the certificates name none."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.check_hostname = False
    client.verify_mode = ssl.CERT_REQUIRED
    client.load_cert_chain(certs.client_cert_file, certs.client_key_file)
    client.load_verify_locations(cafile=str(certs.ca_file))
    return client


def api_server_context(certs: HandlerCertificates, into: ssl.SSLContext | None = None) -> ssl.SSLContext:
    """The TLS of virt-handler's API: its server certificate, and a client certificate of the CA asked for but not
    required, as /healthz and /metrics (a bearer token) take none; the VMI paths insist on one (HandlerAPI).
    Given `into`, the certificates are loaded into that context again: the listening socket keeps it."""
    context = into
    if context is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_OPTIONAL
    context.load_cert_chain(certs.server_cert_file, certs.server_key_file)
    context.load_verify_locations(cafile=str(certs.ca_file))
    return context


def client_watch(directory: Path) -> FileWatch[ssl.SSLContext]:
    """virt-api's side of the handler's API: the client half of the handlers' certificates, reloaded as it changes."""
    certs = HandlerCertificates(directory)
    return FileWatch((certs.ca_file, certs.client_cert_file, certs.client_key_file), lambda: client_context(certs))


# The handler's certificates as its migrations take them: fixed, or a watch of their directory.
TLSSource = MigrationTLS | FileWatch[MigrationTLS] | None


def migration_context(source: TLSSource, state: dict[str, Any], *, server: bool) -> ssl.SSLContext | None:
    """The context of one migration's TCP leg: None when its configuration says `disableTLS: true`.

    Both handlers read the setting from the VMI's `migrationState.migrationConfiguration`, which virt-controller
    fixed at handoff from the KubeVirt CR's `spec.configuration.migrations`, so the two ends always agree."""
    config = state.get("migrationConfiguration") or {}
    if config.get("disableTLS") is True:
        return None
    tls = source.current() if isinstance(source, FileWatch) else source
    if tls is None:
        raise MigrationTLSUnavailable(
            "migration TLS is enabled but virt-handler has no certificates (--certificates-dir); "
            "set spec.configuration.migrations.disableTLS or give the handlers their certificates"
        )
    return tls.server if server else tls.client


def _no_directory() -> MigrationTLS:
    raise ValueError("no certificates directory")


def certificates_watch(directory: str, *, create: bool) -> FileWatch[MigrationTLS]:
    """The handler's TLS (migrations, and its API with --mutual-tls) from `--certificates-dir`, loaded again when the
    files change (none without a directory)."""
    if not directory:
        return FileWatch((), _no_directory)
    certs = ensure_handler_certificates(Path(directory)) if create else HandlerCertificates(Path(directory))
    return FileWatch(certs.paths(), lambda: MigrationTLS.load(certs))
