"""virt-operator's part in KubeVirt's certificates, played here by virt-controller's leader on a cluster.

It keeps a CA in the Secret `kubevirt-ca` (`tls.crt`, `tls.key`) and issues from it the handlers' client half
(`kubevirt-virt-handler-certs`: `ca.crt`, `client.crt`, `client.key`), which virt-handler and virt-api mount, and
their server half (`kubevirt-virt-handler-server-certs`: `server.crt`, `server.key`), which only virt-handler
mounts: the names KubeVirt's operator gives them. A half missing, of another CA, or within 30 days of its end is
issued again; the kubelet then updates the mounted files and both components load them again. The CA's certificate
alone is published in the ConfigMap `kubevirt-ca` (`ca-bundle`), as KubeVirt's, for whoever only verifies a handler
(the web console scraping its metrics). virt-api's serving certificate for its Service, which every replica serves
and publishes the CA of to the APIServices and webhooks, is `kubevirt-virt-api-certs` (`ca.crt`, `tls.crt`, `tls.key`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.client.resources import CONFIG_MAPS, SECRETS
from pykubevirt.handler.certificates import CA_COMMON_NAME, CERT_VALIDITY, files_are_current, issue_files, pem
from pykubevirt.log import object_fields
from pykubevirt.pki.certificates import (
    RENEW_BEFORE,
    CAKey,
    certificate_sans,
    create_ca,
    is_current,
    issue_leaf,
    key_pem,
    now,
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
    """The CA of `kubevirt-ca`'s files, None when it is unreadable or within RENEW_BEFORE of its end."""
    try:
        cert = x509.load_pem_x509_certificate(files.get("tls.crt", b""))
        key = serialization.load_pem_private_key(files.get("tls.key", b""), password=None)
    except (ValueError, TypeError):
        return None
    if not isinstance(key, CAKey) or cert.not_valid_after_utc - RENEW_BEFORE < now():
        return None
    return cert, key


def api_service_names(namespace: str) -> list[str]:
    """The names kube-apiserver and the webhooks reach virt-api's Service by."""
    service = f"{API_SERVICE}.{namespace}"
    return [API_SERVICE, service, f"{service}.svc", f"{service}.svc.cluster.local"]


def api_files(ca_cert: x509.Certificate, ca_key: CAKey, namespace: str) -> dict[str, bytes]:
    """virt-api's serving pair for its Service, with the CA the APIServices and webhooks are to trust."""
    names = api_service_names(namespace)
    cert, key = issue_leaf(
        ca_cert, ca_key, names[2], ExtendedKeyUsageOID.SERVER_AUTH, validity=CERT_VALIDITY, dns_names=names
    )
    return {"ca.crt": pem(ca_cert), "tls.crt": pem(cert), "tls.key": key_pem(key)}


def api_files_are_current(files: dict[str, bytes], ca_cert: x509.Certificate, namespace: str) -> bool:
    """Whether virt-api's Secret holds a pair of this CA for every name of its Service, not due for renewal."""
    if any(not files.get(name) for name in ("ca.crt", "tls.crt", "tls.key")) or files["ca.crt"] != pem(ca_cert):
        return False
    try:
        cert = x509.load_pem_x509_certificate(files["tls.crt"])
    except ValueError:
        return False
    return is_current(cert, ca_cert) and set(api_service_names(namespace)) <= certificate_sans(cert)[0]


class CertificateIssuer:
    """Keeps the CA, the handlers' two Secrets and virt-api's in `namespace` current."""

    def __init__(self, client: KubeClient, namespace: str, interval: float = CHECK_INTERVAL_SECONDS) -> None:
        self.client = client
        self.namespace = namespace
        self.interval = interval

    async def run(self) -> None:
        while True:
            try:
                await self.ensure()
            except (ApiError, OSError) as exc:
                log.warning("cannot issue the certificates: %s", exc, extra={"namespace": self.namespace})
                await asyncio.sleep(RETRY_SECONDS)
                continue
            await asyncio.sleep(self.interval)

    async def ensure(self) -> list[str]:
        """Write what is missing or due; returns what was written (`secret/NAME`, `configmap/NAME`)."""
        written = []
        found = await self.client.get_or_none(SECRETS, CA_SECRET, self.namespace)
        ca = loaded_ca(secret_files(found))
        if ca is None:
            cert, key = create_ca(CA_COMMON_NAME)
            ca = cert, key
            await self._write(found, CA_SECRET, {"tls.crt": pem(cert), "tls.key": key_pem(key)}, "kubernetes.io/tls")
            written.append(f"secret/{CA_SECRET}")
        ca_cert, ca_key = ca
        if await self._publish(pem(ca_cert).decode()):
            written.append(f"configmap/{CA_BUNDLE_CONFIG_MAP}")
        for name, server in ((CLIENT_SECRET, False), (SERVER_SECRET, True)):
            found = await self.client.get_or_none(SECRETS, name, self.namespace)
            if found is not None and files_are_current(secret_files(found), ca_cert, server=server):
                continue
            await self._write(found, name, issue_files(ca_cert, ca_key, server=server), "Opaque")
            written.append(f"secret/{name}")
        found = await self.client.get_or_none(SECRETS, API_SECRET, self.namespace)
        if found is None or not api_files_are_current(secret_files(found), ca_cert, self.namespace):
            await self._write(found, API_SECRET, api_files(ca_cert, ca_key, self.namespace), "Opaque")
            written.append(f"secret/{API_SECRET}")
        return written

    async def _publish(self, bundle: str) -> bool:
        """The CA's certificate in the ConfigMap; whether it had to be written."""
        found = await self.client.get_or_none(CONFIG_MAPS, CA_BUNDLE_CONFIG_MAP, self.namespace)
        if found is not None and (found.get("data") or {}).get(CA_BUNDLE_KEY) == bundle:
            return False
        if found is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CA_BUNDLE_CONFIG_MAP, "namespace": self.namespace, "labels": {"kubevirt.io": ""}},
                "data": {CA_BUNDLE_KEY: bundle},
            }
            log.info(
                "created ConfigMap %s",
                CA_BUNDLE_CONFIG_MAP,
                extra=object_fields(await self.client.create(CONFIG_MAPS, body)),
            )
        else:
            updated = await self.client.update(
                CONFIG_MAPS, {**found, "data": {**(found.get("data") or {}), CA_BUNDLE_KEY: bundle}}
            )
            log.info("renewed ConfigMap %s", CA_BUNDLE_CONFIG_MAP, extra=object_fields(updated))
        return True

    async def _write(self, found: dict[str, Any] | None, name: str, files: dict[str, bytes], kind: str) -> None:
        data = {key: base64.b64encode(value).decode() for key, value in files.items()}
        if found is None:
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": self.namespace, "labels": {"kubevirt.io": ""}},
                "type": kind,
                "data": data,
            }
            log.info("created Secret %s", name, extra=object_fields(await self.client.create(SECRETS, body)))
            return
        # The resourceVersion read makes a concurrent writer's change a conflict, retried from a fresh read.
        updated = await self.client.update(SECRETS, {**found, "type": found.get("type") or kind, "data": data})
        log.info("renewed Secret %s", name, extra=object_fields(updated))
