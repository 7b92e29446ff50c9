"""A CA bundle that keeps the CAs it replaced for an overlap, as KubeVirt's operator merges `kubevirt-ca`'s
`ca-bundle`: peers still presenting a certificate of the old CA stay trusted while the new ones reach them."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from cryptography import x509

from pykubevirt.pki.certificates import cert_pem

# KubeVirt's cap: a bundle never grows past this, however often the CA is replaced.
MAX_CERTIFICATES = 50


def bundle_certificates(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle; none when it is empty or unreadable (it is then written anew)."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def merge_ca_bundle(
    current: x509.Certificate,
    previous: Iterable[x509.Certificate],
    overlap: datetime.timedelta,
    at: datetime.datetime,
) -> bytes:
    """`current` first, then the unexpired `previous` CAs, newest first, for as long as the CA that followed each
    has existed less than `overlap`."""
    valid = sorted(
        (cert for cert in previous if cert.not_valid_after_utc >= at),
        key=lambda cert: cert.not_valid_before_utc,
        reverse=True,
    )[:MAX_CERTIFICATES]
    kept: list[bytes] = []
    newer = current
    for cert in valid:
        # Each old CA goes once the one after it is older than the overlap: every peer has had time to get
        # certificates of the newer one by then.
        if newer.not_valid_before_utc + overlap < at:
            break
        pem = cert_pem(cert)
        if cert != current and pem not in kept:
            kept.append(pem)
        newer = cert
    return b"".join([cert_pem(current), *kept])
