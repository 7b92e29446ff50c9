"""A private CA, the leaf certificates it issues and their files: the API server's PKI and virt-handler's differ
only in names, validity, extended key usage and SANs (`apiserver/security.py`, `handler/certificates.py`)."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# A CA someone else made may hold an RSA key; the ones we make hold P-256 keys.
CAKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

CA_VALIDITY = datetime.timedelta(days=3650)
# Renew a certificate (or the CA) this long before it expires, at the next start, so none lapses in use.
RENEW_BEFORE = datetime.timedelta(days=30)
# Backdated so that a peer whose clock is a little behind ours accepts a certificate made just now.
BACKDATE = datetime.timedelta(minutes=5)
KEY_MODE = 0o600
CERT_MODE = 0o644


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: CAKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` atomically with `data`, through a temporary file that has the final mode before any byte."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    # os.open's mode applies only to a new file, and through the umask: a stale temporary file keeps its own.
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def write_pair(cert_path: Path, key_path: Path, cert: x509.Certificate, key: CAKey) -> None:
    """Write the key (0600) and then its certificate (0644)."""
    write_file(key_path, key_pem(key), KEY_MODE)
    write_file(cert_path, cert_pem(cert), CERT_MODE)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def create_ca(
    common_name: str, validity: datetime.timedelta | None = None
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed CA for `common_name`, valid `validity` (CA_VALIDITY), that signs leaves only (path length 0)."""
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - BACKDATE)
        .not_valid_after(start + (validity or CA_VALIDITY))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_leaf(
    ca_cert: x509.Certificate,
    ca_key: CAKey,
    common_name: str,
    usage: x509.ObjectIdentifier,
    *,
    validity: datetime.timedelta,
    dns_names: Iterable[str] = (),
    addresses: Iterable[IPAddress] = (),
    subject_key_id: bool = True,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate of the CA for `common_name` with extended key usage `usage` and the SANs given (if any),
    ending after `validity` or with the CA, whichever is first."""
    key = new_key()
    start = now()
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in sorted(set(dns_names))]
    names += [x509.IPAddress(a) for a in sorted(set(addresses), key=lambda a: (a.version, int(a)))]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start - BACKDATE)
        .not_valid_after(min(start + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if subject_key_id:
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    builder = builder.add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
    )
    return builder.sign(ca_key, hashes.SHA256()), key


def certificate_sans(cert: x509.Certificate) -> tuple[set[str], set[IPAddress]]:
    """The DNS names and IP addresses a certificate is valid for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    addresses = {a for a in san.get_values_for_type(x509.IPAddress) if isinstance(a, IPAddress)}
    return set(san.get_values_for_type(x509.DNSName)), addresses


def issued_by(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Whether `ca_cert` signed `cert` (not a CA regenerated since, nor a foreign certificate)."""
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def is_current(cert: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Whether `cert` was signed by `ca_cert` and is not within RENEW_BEFORE of its end."""
    return cert.not_valid_after_utc - RENEW_BEFORE >= now() and issued_by(cert, ca_cert)


def load_certificate(path: Path) -> x509.Certificate | None:
    """The certificate in `path`, None when there is no such file."""
    if not path.exists():
        return None
    return x509.load_pem_x509_certificate(path.read_bytes())


def usable_ca(cert: bytes, key: bytes) -> tuple[x509.Certificate, CAKey] | None:
    """The CA of these PEM bytes, None when its key is of another kind or it is within RENEW_BEFORE of its end."""
    ca_cert = x509.load_pem_x509_certificate(cert)
    loaded = serialization.load_pem_private_key(key, password=None)
    if isinstance(loaded, CAKey) and ca_cert.not_valid_after_utc > now() + RENEW_BEFORE:
        return ca_cert, loaded
    return None


def ensure_ca(cert_path: Path, key_path: Path, common_name: str) -> tuple[x509.Certificate, CAKey]:
    """The CA in these files, or a new one written there when they are missing, its key unusable or it expiring."""
    if cert_path.exists() and key_path.exists():
        found = usable_ca(cert_path.read_bytes(), key_path.read_bytes())
        if found is not None:
            return found
    ca_cert, ca_key = create_ca(common_name)
    write_pair(cert_path, key_path, ca_cert, ca_key)
    return ca_cert, ca_key
