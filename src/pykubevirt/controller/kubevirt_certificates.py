"""virt-operator's part in KubeVirt's certificates, played here by virt-controller's leader on a cluster.

It keeps a CA in the Secret `kubevirt-ca` (`tls.crt`, `tls.key`) and issues from it the handlers' client half
(`kubevirt-virt-handler-certs`: `ca.crt`, `client.crt`, `client.key`), which virt-handler and virt-api mount, and
their server half (`kubevirt-virt-handler-server-certs`: `server.crt`, `server.key`), which only virt-handler
mounts: the names KubeVirt's operator gives them. virt-api's serving certificate for its Service, which every replica
serves and publishes the CA of to the APIServices and webhooks, is `kubevirt-virt-api-certs` (`ca.crt`, `tls.crt`,
`tls.key`). A pair missing, of another CA, or within 30 days of its end is issued again; the kubelet then updates the
mounted files and the components load them again.

The trusted CAs are a bundle, in the ConfigMap `kubevirt-ca` (`ca-bundle`) as KubeVirt's and in every `ca.crt`: a
replaced CA stays in it for 30 days. The pairs of the old CA are issued again only once the bundle has had time to
reach every pod's volume, so no peer is ever shown a certificate it does not trust yet.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import logging
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import CONFIG_MAPS, SECRETS, ResourceRef
from pykubevirt.handler.certificates import (
    CA_COMMON_NAME,
    CERT_VALIDITY,
    CLIENT_COMMON_NAME,
    SERVER_COMMON_NAME,
)
from pykubevirt.log import object_fields
from pykubevirt.pki.ca_bundle import bundle_certificates, merge_ca_bundle
from pykubevirt.pki.certificates import (
    BACKDATE,
    RENEW_BEFORE,
    CAKey,
    cert_pem,
    certificate_sans,
    create_ca,
    is_current,
    issue_leaf,
    issued_by,
    key_pem,
    now,
    usable_ca,
)

log = logging.getLogger("pykubevirt.controller.kubevirt_certificates")

CA_SECRET = "kubevirt-ca"
CLIENT_SECRET = "kubevirt-virt-handler-certs"
SERVER_SECRET = "kubevirt-virt-handler-server-certs"
API_SECRET = "kubevirt-virt-api-certs"
API_SERVICE = "virt-api"
CA_BUNDLE_CONFIG_MAP = "kubevirt-ca"
CA_BUNDLE_KEY = "ca-bundle"
# Certificates last a year and are renewed 30 days early: looking every ten minutes is plenty. A failed pass (the
# API server away, a conflict with another writer) is retried sooner.
CHECK_INTERVAL_SECONDS = 600.0
RETRY_SECONDS = 10.0
# A replaced CA is trusted as long as it was renewed before its end, so it lapses from the bundle as it expires.
CA_OVERLAP = RENEW_BEFORE
# How long pairs of the previous CA are kept after a new CA: the kubelet refreshes a Secret volume within its sync
# period (a minute) and its cache's delay, so by then every peer's `ca.crt` trusts the new CA.
SETTLE = datetime.timedelta(minutes=10)


def secret_files(secret: dict[str, Any] | None) -> dict[str, bytes]:
    """A Secret's data, decoded (an undecodable entry is left out, and so is issued again)."""
    files = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            files[key] = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            continue
    return files


def loaded_ca(files: dict[str, bytes]) -> tuple[x509.Certificate, CAKey] | None:
    """The CA of `kubevirt-ca`'s files, None when it is unreadable or due for replacement."""
    try:
        return usable_ca(files.get("tls.crt", b""), files.get("tls.key", b""))
    except (ValueError, TypeError):
        return None


def api_service_names(namespace: str) -> tuple[str, ...]:
    """The names kube-apiserver and the webhooks reach virt-api's Service by."""
    service = f"{API_SERVICE}.{namespace}"
    return (API_SERVICE, service, f"{service}.svc", f"{service}.svc.cluster.local")


@dataclass(frozen=True, slots=True)
class IssuedPair:
    """One Secret of a key pair the CA issues: its file names, its certificate's names and use, and whether the CA's
    certificate goes with it (for those that verify the other side)."""

    secret: str
    cert_file: str
    key_file: str
    common_name: str
    usage: x509.ObjectIdentifier
    with_ca: bool
    dns_names: tuple[str, ...] = ()

    def issue(self, ca_cert: x509.Certificate, ca_key: CAKey, bundle: bytes) -> dict[str, bytes]:
        cert, key = issue_leaf(
            ca_cert,
            ca_key,
            self.common_name,
            self.usage,
            validity=CERT_VALIDITY,
            dns_names=self.dns_names,
            subject_key_id=False,
        )
        return self._with_bundle({self.cert_file: cert_pem(cert), self.key_file: key_pem(key)}, bundle)

    def refreshed(
        self, files: dict[str, bytes], ca: tuple[x509.Certificate, CAKey], bundle: bytes, settling: bool
    ) -> dict[str, bytes] | None:
        """The files this Secret should hold, None when it holds them already. A pair of a CA still in the bundle
        is kept (with the new bundle) while the new CA settles; after that only one of the current CA is."""
        pair = {name: files[name] for name in (self.cert_file, self.key_file) if files.get(name)}
        if len(pair) < 2 or not self._usable(pair[self.cert_file], ca[0], bundle if settling else b""):
            return self.issue(*ca, bundle)
        wanted = self._with_bundle(pair, bundle)
        return None if all(files.get(name) == value for name, value in wanted.items()) else wanted

    def _usable(self, data: bytes, ca_cert: x509.Certificate, also_trusted: bytes) -> bool:
        """Issued for all its names by this CA and not due for renewal, or unexpired and by another CA of
        `also_trusted` (one of this CA due for renewal is renewed even while the CA settles)."""
        try:
            cert = x509.load_pem_x509_certificate(data)
        except ValueError:
            return False
        if not set(self.dns_names) <= certificate_sans(cert)[0]:
            return False
        if is_current(cert, ca_cert):
            return True
        others = [ca for ca in bundle_certificates(also_trusted) if ca != ca_cert and ca.not_valid_after_utc > now()]
        return cert.not_valid_after_utc > now() and any(issued_by(cert, ca) for ca in others)

    def _with_bundle(self, pair: dict[str, bytes], bundle: bytes) -> dict[str, bytes]:
        return {"ca.crt": bundle, **pair} if self.with_ca else pair


def issued_pairs(namespace: str) -> tuple[IssuedPair, ...]:
    """The handlers' client half (virt-api's too) and server half, and virt-api's serving pair for its Service."""
    return (
        IssuedPair(
            CLIENT_SECRET, "client.crt", "client.key", CLIENT_COMMON_NAME, ExtendedKeyUsageOID.CLIENT_AUTH, True
        ),
        IssuedPair(
            SERVER_SECRET, "server.crt", "server.key", SERVER_COMMON_NAME, ExtendedKeyUsageOID.SERVER_AUTH, False
        ),
        IssuedPair(
            API_SECRET,
            "tls.crt",
            "tls.key",
            api_service_names(namespace)[2],
            ExtendedKeyUsageOID.SERVER_AUTH,
            with_ca=True,
            dns_names=api_service_names(namespace),
        ),
    )


class CertificateIssuer:
    """Keeps the CA, the handlers' two Secrets and virt-api's in `namespace` current."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        interval: float = CHECK_INTERVAL_SECONDS,
        settle: datetime.timedelta = SETTLE,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.interval = interval
        self.settle = settle
        self.ca_born: datetime.datetime | None = None

    async def run(self) -> None:
        while True:
            try:
                await self.ensure()
            except (ApiError, OSError) as exc:
                log.warning("cannot issue the certificates: %s", exc, extra={"namespace": self.namespace})
                await asyncio.sleep(RETRY_SECONDS)
                continue
            await asyncio.sleep(min(self.interval, self.settles_in()))

    async def ensure(self) -> list[str]:
        """Write what is missing or due; returns what was written (`secret/NAME`, `configmap/NAME`)."""
        written = []
        found = await self.client.get_or_none(SECRETS, CA_SECRET, self.namespace)
        files = secret_files(found)
        ca = loaded_ca(files)
        replaced: list[x509.Certificate] = []
        if ca is None:
            # The CA being replaced (if readable) stays trusted in the bundle with those it replaced.
            replaced = bundle_certificates(files.get("tls.crt", b""))
            ca = create_ca(CA_COMMON_NAME)
            await self._write(
                SECRETS, found, CA_SECRET, _secret({"tls.crt": cert_pem(ca[0]), "tls.key": key_pem(ca[1])})
            )
            written.append(f"secret/{CA_SECRET}")
        self.ca_born = ca[0].not_valid_before_utc + BACKDATE
        found = await self.client.get_or_none(CONFIG_MAPS, CA_BUNDLE_CONFIG_MAP, self.namespace)
        published = str(((found or {}).get("data") or {}).get(CA_BUNDLE_KEY) or "")
        bundle = merge_ca_bundle(ca[0], [*bundle_certificates(published.encode()), *replaced], CA_OVERLAP, now())
        if published != bundle.decode():
            data = {**((found or {}).get("data") or {}), CA_BUNDLE_KEY: bundle.decode()}
            await self._write(CONFIG_MAPS, found, CA_BUNDLE_CONFIG_MAP, {"data": data})
            written.append(f"configmap/{CA_BUNDLE_CONFIG_MAP}")
        settling = self.settles_in() > 0
        for pair in issued_pairs(self.namespace):
            found = await self.client.get_or_none(SECRETS, pair.secret, self.namespace)
            wanted = pair.refreshed(secret_files(found), ca, bundle, settling)
            if wanted is not None:
                await self._write(SECRETS, found, pair.secret, _secret(wanted))
                written.append(f"secret/{pair.secret}")
        return written

    def settles_in(self) -> float:
        """Seconds until pairs of a replaced CA are issued again (0 once they are due)."""
        if self.ca_born is None:
            return 0.0
        return max(0.0, (self.ca_born + self.settle - now()).total_seconds())

    async def _write(self, ref: ResourceRef, found: Object | None, name: str, content: dict[str, Any]) -> None:
        """Create the object with `content`, or replace its content; the resourceVersion read makes a concurrent
        writer's change a conflict, retried from a fresh read."""
        if found is None:
            meta = {"name": name, "namespace": self.namespace, "labels": {"kubevirt.io": ""}}
            body = {"apiVersion": "v1", "kind": ref.kind, "metadata": meta, **content}
            log.info("created %s %s", ref.kind, name, extra=object_fields(await self.client.create(ref, body)))
            return
        # A Secret's type cannot change: the one found stays.
        updated = await self.client.update(
            ref, {**found, **content, **({"type": found["type"]} if "type" in found else {})}
        )
        log.info("renewed %s %s", ref.kind, name, extra=object_fields(updated))


def _secret(files: dict[str, bytes]) -> dict[str, Any]:
    """A Secret's content: its type (kubernetes.io/tls for a tls.crt/tls.key pair alone) and its data."""
    kind = "kubernetes.io/tls" if set(files) == {"tls.crt", "tls.key"} else "Opaque"
    return {"type": kind, "data": {key: base64.b64encode(value).decode() for key, value in files.items()}}
