"""What an import source adds to the claim and to the importer pod (CDI's `Update*Annotations` and the source part
of `makeImporterPodSpec`/`makeImportEnv`): the `http` source's endpoint, credentials, CA and headers. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANN = "cdi.kubevirt.io/storage.import."
ENDPOINT = ANN + "endpoint"
SECRET_NAME = ANN + "secretName"
CERT_CONFIG_MAP = ANN + "certConfigMap"
CHECKSUM = ANN + "checksum"
INSECURE = ANN + "insecureSkipVerify"
EXTRA_HEADERS = ANN + "extraHeaders."
SECRET_EXTRA_HEADERS = ANN + "secretExtraHeaders."
CERTS_DIR = "/certs"
EXTRA_HEADERS_DIR = "/extraheaders"


def http_annotations(source: Mapping[str, Any]) -> dict[str, str]:
    """The claim annotations an http source is recorded in."""
    annotations = {ENDPOINT: str(source.get("url") or "")}
    if source.get("secretRef"):
        annotations[SECRET_NAME] = str(source["secretRef"])
    if source.get("certConfigMap"):
        annotations[CERT_CONFIG_MAP] = str(source["certConfigMap"])
    if source.get("checksum"):
        annotations[CHECKSUM] = str(source["checksum"])
    if source.get("insecureSkipVerify"):
        annotations[INSECURE] = "true"
    for i, header in enumerate(source.get("extraHeaders") or []):
        annotations[f"{EXTRA_HEADERS}{i}"] = str(header)
    for i, secret in enumerate(source.get("secretExtraHeaders") or []):
        annotations[f"{SECRET_EXTRA_HEADERS}{i}"] = str(secret)
    return annotations


def http_pod_parts(annotations: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
    """(env, volumes, volumeMounts) of an http importer, from the claim's annotations as CDI reads them."""
    env: list[dict[str, Any]] = [{"name": "IMPORTER_ENDPOINT", "value": annotations.get(ENDPOINT, "")}]
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    secret = annotations.get(SECRET_NAME)
    if secret:
        for name, key in (("IMPORTER_ACCESS_KEY_ID", "accessKeyId"), ("IMPORTER_SECRET_KEY", "secretKey")):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    if annotations.get(INSECURE) == "true":
        env.append({"name": "INSECURE_TLS", "value": "true"})
    if annotations.get(CHECKSUM):
        env.append({"name": "IMPORTER_CHECKSUM", "value": annotations[CHECKSUM]})
    headers = sorted((int(k[len(EXTRA_HEADERS) :]), v) for k, v in annotations.items() if k.startswith(EXTRA_HEADERS))
    env.extend({"name": f"IMPORTER_EXTRA_HEADER_{i}", "value": v} for i, v in headers)
    if annotations.get(CERT_CONFIG_MAP):
        volumes.append({"name": "cdi-cert-vol", "configMap": {"name": annotations[CERT_CONFIG_MAP]}})
        mounts.append({"name": "cdi-cert-vol", "mountPath": CERTS_DIR})
    secrets = sorted(
        (int(k[len(SECRET_EXTRA_HEADERS) :]), v) for k, v in annotations.items() if k.startswith(SECRET_EXTRA_HEADERS)
    )
    for i, name in secrets:
        volumes.append({"name": f"cdi-extra-header-{i}", "secret": {"secretName": name}})
        mounts.append({"name": f"cdi-extra-header-{i}", "mountPath": f"{EXTRA_HEADERS_DIR}/secret{i}"})
    return env, volumes, mounts
