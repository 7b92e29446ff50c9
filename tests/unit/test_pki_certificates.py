"""The shared CA and leaf certificates of pykubevirt.pki.certificates, on plain data and temporary files."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pykubevirt.pki import certificates
from pykubevirt.pki.certificates import (
    RENEW_BEFORE,
    certificate_sans,
    create_ca,
    ensure_ca,
    is_current,
    issue_leaf,
    key_pem,
    load_certificate,
    write_file,
    write_pair,
)

YEAR = datetime.timedelta(days=365)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _common_name(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def _rsa_ca(directory: Path) -> x509.Certificate:
    """A CA someone else made, with an RSA key, written as ca.crt/ca.key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "their-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + 2 * YEAR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(key, hashes.SHA256())
    )
    (directory / "ca.key").write_bytes(key_pem(key))
    (directory / "ca.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert


def test_a_ca_signs_leaves_only() -> None:
    ca, _ = create_ca("test-ca")
    assert _common_name(ca) == "test-ca" and ca.issuer == ca.subject
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign and usage.digital_signature
    assert ca.not_valid_after_utc - ca.not_valid_before_utc > 9 * YEAR


def test_a_leaf_chains_to_its_ca_with_the_usage_and_names_asked() -> None:
    ca, ca_key = create_ca("test-ca")
    ips = {ipaddress.ip_address("::1"), ipaddress.ip_address("10.0.0.2"), ipaddress.ip_address("127.0.0.1")}
    leaf, key = issue_leaf(
        ca, ca_key, "a-server", ExtendedKeyUsageOID.SERVER_AUTH, validity=YEAR, dns_names=["b", "a"], addresses=ips
    )
    leaf.verify_directly_issued_by(ca)
    assert leaf.public_key() == key.public_key()
    assert _common_name(leaf) == "a-server"
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert certificate_sans(leaf) == ({"a", "b"}, ips)
    # SANs in a stable order (names sorted, IPv4 before IPv6), so the same request gives the same extension.
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(v) for v in san.get_values_for_type(x509.IPAddress)] == ["10.0.0.2", "127.0.0.1", "::1"]
    assert leaf.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert is_current(leaf, ca)


def test_a_leaf_without_names_or_key_id_has_neither_and_ends_with_its_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(certificates, "CA_VALIDITY", datetime.timedelta(days=100))
    ca, ca_key = create_ca("short-ca")
    leaf, _ = issue_leaf(ca, ca_key, "a-client", ExtendedKeyUsageOID.CLIENT_AUTH, validity=YEAR, subject_key_id=False)
    assert certificate_sans(leaf) == (set(), set())
    for absent in (x509.SubjectAlternativeName, x509.SubjectKeyIdentifier):
        with pytest.raises(x509.ExtensionNotFound):
            leaf.extensions.get_extension_for_class(absent)
    assert leaf.not_valid_after_utc == ca.not_valid_after_utc


def test_an_expiring_or_foreign_leaf_is_not_current() -> None:
    ca, ca_key = create_ca("test-ca")
    expiring, _ = issue_leaf(ca, ca_key, "x", ExtendedKeyUsageOID.CLIENT_AUTH, validity=RENEW_BEFORE / 2)
    assert not is_current(expiring, ca)
    other, other_key = create_ca("test-ca")  # the same name, another key: a CA made again
    foreign, _ = issue_leaf(other, other_key, "x", ExtendedKeyUsageOID.CLIENT_AUTH, validity=YEAR)
    assert is_current(foreign, other) and not is_current(foreign, ca)


def test_ensure_ca_creates_once_and_reuses(tmp_path: Path) -> None:
    cert_path, key_path = tmp_path / "ca.crt", tmp_path / "ca.key"
    ca, _ = ensure_ca(cert_path, key_path, "test-ca")
    assert _common_name(ca) == "test-ca"
    assert (_mode(key_path), _mode(cert_path)) == (0o600, 0o644)
    files = (cert_path.read_bytes(), key_path.read_bytes())
    again, _ = ensure_ca(cert_path, key_path, "test-ca")
    assert again == ca and (cert_path.read_bytes(), key_path.read_bytes()) == files


def test_ensure_ca_replaces_a_ca_without_its_key_or_near_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert_path, key_path = tmp_path / "ca.crt", tmp_path / "ca.key"
    first, _ = ensure_ca(cert_path, key_path, "test-ca")
    key_path.unlink()
    second, _ = ensure_ca(cert_path, key_path, "test-ca")
    assert second != first and load_certificate(cert_path) == second
    monkeypatch.setattr(certificates, "CA_VALIDITY", RENEW_BEFORE / 2)
    key_path.unlink()
    expiring, _ = ensure_ca(cert_path, key_path, "test-ca")
    monkeypatch.undo()
    renewed, _ = ensure_ca(cert_path, key_path, "test-ca")
    assert renewed != expiring and renewed.not_valid_after_utc - expiring.not_valid_after_utc > 9 * YEAR


def test_ensure_ca_reuses_an_rsa_ca_and_issues_with_it(tmp_path: Path) -> None:
    theirs = _rsa_ca(tmp_path)
    ca, ca_key = ensure_ca(tmp_path / "ca.crt", tmp_path / "ca.key", "ours")
    assert ca == theirs and isinstance(ca_key, rsa.RSAPrivateKey)
    leaf, _ = issue_leaf(ca, ca_key, "x", ExtendedKeyUsageOID.SERVER_AUTH, validity=YEAR)
    assert is_current(leaf, ca)


def test_load_certificate_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert load_certificate(tmp_path / "none.crt") is None


def test_keys_are_0600_and_certificates_0644_whatever_the_umask(tmp_path: Path) -> None:
    ca, ca_key = create_ca("test-ca")
    leaf, key = issue_leaf(ca, ca_key, "x", ExtendedKeyUsageOID.CLIENT_AUTH, validity=YEAR)
    # A temporary file an interrupted write left, readable by all: it is reused with the key's mode.
    stale = tmp_path / ".leaf.key.tmp"
    stale.write_bytes(b"old")
    stale.chmod(0o666)
    old_umask = os.umask(0o077)
    try:
        write_pair(tmp_path / "leaf.crt", tmp_path / "leaf.key", leaf, key)
    finally:
        os.umask(old_umask)
    assert (_mode(tmp_path / "leaf.key"), _mode(tmp_path / "leaf.crt")) == (0o600, 0o644)
    assert (tmp_path / "leaf.key").read_bytes() == key_pem(key)
    assert load_certificate(tmp_path / "leaf.crt") == leaf
    assert not stale.exists()


def test_write_file_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    write_file(path, b"one", 0o600)
    write_file(path, b"two", 0o600)
    assert path.read_bytes() == b"two" and _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.csv"]
