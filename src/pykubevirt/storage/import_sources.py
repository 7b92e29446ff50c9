"""What an import source adds to the claim and to the importer pod (CDI's `Update*Annotations` and the source part
of `makeImporterPodSpec`/`makeImportEnv`): endpoint, credentials, CA and headers of `http`; image, credentials, CA
and pull method of `registry`, whose `node` method adds the image itself as the pod's `server` sidecar. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANN = "cdi.kubevirt.io/storage.import."
ENDPOINT = ANN + "endpoint"
SECRET_NAME = ANN + "secretName"
CERT_CONFIG_MAP = ANN + "certConfigMap"
CHECKSUM = ANN + "checksum"
INSECURE = ANN + "insecureSkipVerify"
EXTRA_HEADERS = ANN + "extraHeaders."
SECRET_EXTRA_HEADERS = ANN + "secretExtraHeaders."
REGISTRY_IMPORT_METHOD = ANN + "registryImportMethod"
CERTS_DIR = "/certs"
EXTRA_HEADERS_DIR = "/extraheaders"
SHARED_DIR = "/shared"
LOCAL_REGISTRY = "pykubevirt.local/"
CONTAINER_DISK_BINARY = "/usr/bin/container-disk"


@dataclass
class PodParts:
    """The importer pod's source-specific env, volumes, importer mounts and init containers."""

    env: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    init_containers: list[dict[str, Any]] = field(default_factory=list)


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


def registry_annotations(source: Mapping[str, Any]) -> dict[str, str]:
    """The claim annotations a registry source is recorded in."""
    annotations = {ENDPOINT: str(source.get("url") or ""), REGISTRY_IMPORT_METHOD: str(source.get("pullMethod") or "")}
    if source.get("secretRef"):
        annotations[SECRET_NAME] = str(source["secretRef"])
    if source.get("certConfigMap"):
        annotations[CERT_CONFIG_MAP] = str(source["certConfigMap"])
    return annotations


def node_pull(annotations: Mapping[str, str]) -> bool:
    """Whether the node provides the image: `pullMethod: node`, or an image of the nodes' local stores."""
    image = annotations.get(ENDPOINT, "").removeprefix("docker://")
    return annotations.get(REGISTRY_IMPORT_METHOD) == "node" or image.startswith(LOCAL_REGISTRY)


def _common(annotations: Mapping[str, str], parts: PodParts) -> None:
    parts.env.append({"name": "IMPORTER_ENDPOINT", "value": annotations.get(ENDPOINT, "")})
    secret = annotations.get(SECRET_NAME)
    if secret:
        for name, key in (("IMPORTER_ACCESS_KEY_ID", "accessKeyId"), ("IMPORTER_SECRET_KEY", "secretKey")):
            parts.env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    if annotations.get(CERT_CONFIG_MAP):
        parts.volumes.append({"name": "cdi-cert-vol", "configMap": {"name": annotations[CERT_CONFIG_MAP]}})
        parts.mounts.append({"name": "cdi-cert-vol", "mountPath": CERTS_DIR})


def pod_parts(kind: str, annotations: Mapping[str, str]) -> PodParts:
    """The source-specific part of an importer pod, from the claim's annotations as CDI reads them."""
    parts = PodParts()
    if kind == "http":
        _common(annotations, parts)
        if annotations.get(INSECURE) == "true":
            parts.env.append({"name": "INSECURE_TLS", "value": "true"})
        if annotations.get(CHECKSUM):
            parts.env.append({"name": "IMPORTER_CHECKSUM", "value": annotations[CHECKSUM]})
        headers = sorted(
            (int(k[len(EXTRA_HEADERS) :]), v) for k, v in annotations.items() if k.startswith(EXTRA_HEADERS)
        )
        parts.env.extend({"name": f"IMPORTER_EXTRA_HEADER_{i}", "value": v} for i, v in headers)
        secrets = sorted(
            (int(k[len(SECRET_EXTRA_HEADERS) :]), v)
            for k, v in annotations.items()
            if k.startswith(SECRET_EXTRA_HEADERS)
        )
        for i, name in secrets:
            parts.volumes.append({"name": f"cdi-extra-header-{i}", "secret": {"secretName": name}})
            parts.mounts.append({"name": f"cdi-extra-header-{i}", "mountPath": f"{EXTRA_HEADERS_DIR}/secret{i}"})
    elif kind == "registry":
        _common(annotations, parts)
        if node_pull(annotations):
            image = annotations.get(ENDPOINT, "").removeprefix("docker://")
            parts.volumes.append({"name": "cdi-shared", "emptyDir": {}})
            parts.mounts.append({"name": "cdi-shared", "mountPath": SHARED_DIR})
            # The image's disk, linked into /shared by the node (containerDisk rules), for the pod's lifetime.
            parts.init_containers.append(
                {
                    "name": "server",
                    "image": image,
                    "command": [CONTAINER_DISK_BINARY, "--copy-path", f"{SHARED_DIR}/disk"],
                    "restartPolicy": "Always",
                    "volumeMounts": [{"name": "cdi-shared", "mountPath": SHARED_DIR}],
                }
            )
    return parts
