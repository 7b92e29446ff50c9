"""The aggregation layer's client identity: a front-proxy CA and the `front-proxy-client` certificate it presents
to APIService backends, published in kube-system/extension-apiserver-authentication as kube-apiserver does."""

from __future__ import annotations

import datetime
import json
import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubevirt.pki.certificates import cert_pem, key_pem

CLIENT_NAME = "front-proxy-client"
AUTH_CONFIGMAP_NAMESPACE = "kube-system"
AUTH_CONFIGMAP_NAME = "extension-apiserver-authentication"
USER_HEADER = "X-Remote-User"
GROUP_HEADER = "X-Remote-Group"
EXTRA_PREFIX = "X-Remote-Extra-"
VALIDITY = datetime.timedelta(days=3650)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Created with its final mode, so the key is never readable by others."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _issue(
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
        .not_valid_after(now + VALIDITY)
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass(frozen=True, slots=True)
class FrontProxy:
    """Paths of the front-proxy CA and client certificate under `<data-dir>/pki`."""

    directory: Path

    @property
    def ca_path(self) -> Path:
        return self.directory / "front-proxy-ca.crt"

    @property
    def cert_path(self) -> Path:
        return self.directory / "front-proxy-client.crt"

    @property
    def key_path(self) -> Path:
        return self.directory / "front-proxy-client.key"

    def client_context(self, trusted: ssl.SSLContext) -> ssl.SSLContext:
        """`trusted` (verifying the backend) presenting the front-proxy client certificate."""
        trusted.load_cert_chain(self.cert_path, self.key_path)
        return trusted

    def configmap_data(self) -> dict[str, str]:
        """kube-apiserver's requestheader settings, as extension API servers read them."""
        return {
            "requestheader-client-ca-file": self.ca_path.read_text(),
            "requestheader-allowed-names": json.dumps([CLIENT_NAME]),
            "requestheader-username-headers": json.dumps([USER_HEADER]),
            "requestheader-group-headers": json.dumps([GROUP_HEADER]),
            "requestheader-extra-headers-prefix": json.dumps([EXTRA_PREFIX]),
        }

    def configmap(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": AUTH_CONFIGMAP_NAME, "namespace": AUTH_CONFIGMAP_NAMESPACE},
            "data": self.configmap_data(),
        }


def ensure_front_proxy(pki_dir: Path) -> FrontProxy:
    """Create the front-proxy CA and client certificate at first start; reuse them later."""
    proxy = FrontProxy(Path(pki_dir))
    proxy.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    if proxy.ca_path.exists() and proxy.cert_path.exists() and proxy.key_path.exists():
        return proxy
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("front-proxy-ca", ca_key, None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(CLIENT_NAME, key, (ca, ca_key))
    _write(proxy.key_path, key_pem(key), 0o600)
    _write(proxy.cert_path, cert_pem(cert), 0o644)
    _write(proxy.ca_path, cert_pem(ca), 0o644)
    return proxy
