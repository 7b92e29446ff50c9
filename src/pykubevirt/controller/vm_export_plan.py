"""What a VirtualMachineExport needs, as plain data (KubeVirt's pkg/storage/export/export): its source's readiness,
its exporter pod, Service and token Secret, and its status with the links a download uses."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from pykubevirt import __version__
from pykubevirt.api import export_names as names
from pykubevirt.api.constants import EXPORT_API_VERSION, EXPORT_GROUP, KUBEVIRT_GROUP, SNAPSHOT_GROUP, VM_EXPORT_KIND
from pykubevirt.api.go_duration import parse_go_duration
from pykubevirt.api.kubevirt.export import DEFAULT_TTL_SECONDS, EXPORT_PLURAL
from pykubevirt.api.timestamps import format_time, parse_time

SERVER_COMMAND: Final = ("pykubevirt", "virt-exportserver")
CONTENT_TYPE: Final = "cdi.kubevirt.io/storage.contentType"
FILESYSTEM_MOUNTS: Final = "/export-volumes"
BLOCK_MOUNTS: Final = "/dev/export-volumes"
MANIFESTS_PATH: Final = "/manifests/all"
SECRET_MANIFEST_PATH: Final = "/manifests/secret"
# KubeVirt's condition reasons.
INITIALIZING, IN_USE, PVC_PENDING, PVC_NOT_FOUND, PVC_BOUND = (
    "Initializing",
    "InUse",
    "PVCPending",
    "PVCNotFound",
    "PVCBound",
)
POD_PENDING, POD_READY, POD_COMPLETED, UNKNOWN = "PodPending", "PodReady", "PodCompleted", "Unknown"
VM_NOT_FOUND, VOLUMES_NOT_POPULATED, VM_NO_VOLUMES = "VMNotFound", "VolumesNotPopulated", "VMNoVolumes"
SNAPSHOT_NOT_FOUND, SNAPSHOT_NO_VOLUMES = "VMSnapshotNotFound", "VMSnapshotNoVolumes"
NOT_ALL_CREATED, ALL_READY, NOT_ALL_READY = "NotAllPVCsCreated", "AllPVCsReady", "NotAllPVCsReady"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str = ""


def ready_condition(status: str, reason: str, message: str = "") -> Condition:
    return Condition("Ready", status, reason, message)


@dataclass(slots=True)
class Source:
    """The claims an export serves and whether they may be served now (KubeVirt's sourceVolumes)."""

    claims: list[Mapping[str, Any]] = field(default_factory=list)
    in_use: bool = False
    populated: bool = False
    ready: Condition = field(default_factory=lambda: ready_condition("False", INITIALIZING))
    # The PVCReady condition (claim sources), None where KubeVirt writes none (VM sources).
    claim_condition: Condition | None = None
    vm_name: str | None = None
    # The VM the export serves (VM and snapshot sources), for the manifests, and the claims they name.
    vm: Mapping[str, Any] | None = None
    vm_claims: list[Mapping[str, Any]] = field(default_factory=list)
    # A snapshot's claims are `<export>-<claim>`: the links name each volume without that prefix.
    volume_prefix: str = ""
    # Without content, the export is Skipped (a VM without volumes, a snapshot without volume snapshots).
    skipped: bool = False

    @property
    def available(self) -> bool:
        return self.populated and not self.in_use

    @property
    def has_content(self) -> bool:
        return bool(self.claims)


def source_kind(export: Mapping[str, Any]) -> str:
    """ "PersistentVolumeClaim", "VirtualMachine", "VirtualMachineSnapshot" or "" for a source this cluster lacks."""
    source = (export.get("spec") or {}).get("source") or {}
    kind, group = source.get("kind"), source.get("apiGroup") or ""
    if kind == "PersistentVolumeClaim" and group == "":
        return str(kind)
    if kind == "VirtualMachine" and group == KUBEVIRT_GROUP:
        return str(kind)
    if kind == "VirtualMachineSnapshot" and group == SNAPSHOT_GROUP:
        return str(kind)
    return ""


def claim_condition(claims: Sequence[Mapping[str, Any]]) -> Condition:
    """pvcConditionFromPVC: Bound when every claim is, Pending when one is, Unknown when one is lost."""
    phases = {str((c.get("status") or {}).get("phase") or "") for c in claims}
    if "Lost" in phases:
        return Condition("PVCReady", "False", UNKNOWN)
    if "Pending" in phases:
        return Condition("PVCReady", "False", PVC_PENDING)
    return Condition("PVCReady", "True", PVC_BOUND)


def claim_source(namespace: str, name: str, claim: Mapping[str, Any] | None, populated: bool, in_use: bool) -> Source:
    """A PersistentVolumeClaim source (pvc-source.go)."""
    if claim is None:
        message = f"PersistentVolumeClaim {namespace}/{name} not found"
        return Source(claim_condition=Condition("PVCReady", "False", PVC_NOT_FOUND, message))
    source = Source(claims=[claim], populated=populated, claim_condition=claim_condition([claim]))
    if not populated:
        source.ready = ready_condition(
            "False", PVC_PENDING, f"PersistentVolumeClaim {namespace}/{name} is not populated"
        )
    elif in_use:
        source.in_use = True
        source.ready = ready_condition("False", IN_USE, f"PersistentVolumeClaim {namespace}/{name} is in use")
    return source


def vm_source(
    namespace: str,
    name: str,
    vm: Mapping[str, Any] | None,
    claims: Sequence[Mapping[str, Any]],
    all_populated: bool,
    running: bool,
    backend: Mapping[str, Any] | None = None,
) -> Source:
    """A VirtualMachine source (vm-source.go): its claims and its backend-storage claim, once all are populated and no
    VMI of it runs. The manifests name the VM's own claims only."""
    served = [*claims, *([backend] if backend is not None else [])]
    # Without volumes to serve (no VM, or none in it) KubeVirt skips the export.
    source = Source(vm_name=name, vm=vm, vm_claims=list(claims), skipped=not served)
    if vm is None:
        source.ready = ready_condition("False", VM_NOT_FOUND, f"Virtual Machine {namespace}/{name} not found")
        return source
    source.claims, source.populated = served, all_populated
    if not served:
        source.populated = True
        source.ready = ready_condition("False", VM_NO_VOLUMES, f"Virtual Machine {namespace}/{name} has no volumes")
    elif not all_populated:
        message = f"Not all volumes in the Virtual Machine {namespace}/{name} are populated"
        source.ready = ready_condition("False", VOLUMES_NOT_POPULATED, message)
    elif running:
        source.in_use = True
        source.ready = ready_condition("False", IN_USE, f"Virtual Machine {namespace}/{name} is running")
    return source


def snapshot_source(
    namespace: str, name: str, snapshot: Mapping[str, Any] | None, claims: Sequence[Mapping[str, Any]], total: int
) -> Source:
    """A VirtualMachineSnapshot source (vmsnapshot-source.go): a claim restored from each of its volume snapshots,
    `<export>-<claim>`, served once all are made; VolumesCreated says how far they are."""
    if snapshot is None:
        message = f"VirtualMachineSnapshot {namespace}/{name} does not contain any volume snapshots"
        return Source(
            ready=ready_condition("False", SNAPSHOT_NOT_FOUND, f"VirtualMachineSnapshot {namespace}/{name} not found"),
            claim_condition=Condition("VolumesCreated", "False", SNAPSHOT_NO_VOLUMES, message),
            vm_name="",
            skipped=True,
        )
    vm_name = str(((snapshot.get("spec") or {}).get("source") or {}).get("name", ""))
    if not (snapshot.get("status") or {}).get("readyToUse"):
        message = f"VirtualMachineSnapshot {namespace}/{name} is not ready to use"
        return Source(
            ready=ready_condition("False", NOT_ALL_CREATED, message),
            claim_condition=Condition("VolumesCreated", "False", NOT_ALL_CREATED, message),
            vm_name=vm_name,
        )
    if total == 0:
        message = f"VirtualMachineSnapshot {namespace}/{name} does not contain any volume snapshots"
        condition = Condition("VolumesCreated", "False", SNAPSHOT_NO_VOLUMES, message)
        return Source(claim_condition=condition, vm_name=vm_name, skipped=True)
    if len(claims) != total:
        message = "Not all PVCs have been successfully restored"
        return Source(claim_condition=Condition("VolumesCreated", "False", NOT_ALL_CREATED, message), vm_name=vm_name)
    bound = all((c.get("status") or {}).get("phase") == "Bound" for c in claims)
    condition = (
        Condition("VolumesCreated", "True", ALL_READY)
        if bound
        else Condition("VolumesCreated", "False", NOT_ALL_READY, "Not all PVCs are ready")
    )
    return Source(claims=list(claims), populated=True, claim_condition=condition, vm_name=vm_name)


def ttl_seconds(export: Mapping[str, Any]) -> float:
    ttl = (export.get("spec") or {}).get("ttlDuration")
    if not ttl:
        return float(DEFAULT_TTL_SECONDS)
    try:
        return parse_go_duration(str(ttl))
    except ValueError:
        return float(DEFAULT_TTL_SECONDS)


def expiration(export: Mapping[str, Any]) -> datetime | None:
    """CreationTimestamp + TTL: when the export is deleted."""
    created = parse_time((export.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else created + timedelta(seconds=ttl_seconds(export))


def owner_reference(export: Mapping[str, Any]) -> dict[str, Any]:
    meta = export.get("metadata") or {}
    return {
        "apiVersion": EXPORT_API_VERSION,
        "kind": VM_EXPORT_KIND,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_block(claim: Mapping[str, Any]) -> bool:
    return (claim.get("spec") or {}).get("volumeMode") == "Block"


def holds_disk_image(claim: Mapping[str, Any], data_volume: Mapping[str, Any] | None) -> bool:
    """isKubevirtContentType: a block claim, a claim CDI filled with kubevirt content, or one of such a DataVolume."""
    if is_block(claim):
        return True
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if CONTENT_TYPE in annotations and annotations[CONTENT_TYPE] in ("kubevirt", ""):
        return True
    if data_volume is not None:
        return (data_volume.get("spec") or {}).get("contentType", "") in ("kubevirt", "")
    return False


def volume_env(index: int, claim: Mapping[str, Any], disk_image: bool) -> tuple[str, list[dict[str, str]]]:
    """The mount point of a claim in the exporter pod and the VOLUME<i>_* variables that tell the server its URIs."""
    claim_name = str((claim.get("metadata") or {}).get("name", ""))
    volume = names.pod_volume_name(claim_name)
    mount = f"{BLOCK_MOUNTS if is_block(claim) else FILESYSTEM_MOUNTS}/{volume}"
    base = f"/volumes/{claim_name}"
    env = [{"name": f"VOLUME{index}_EXPORT_PATH", "value": mount}]
    if disk_image:
        env += [
            {"name": f"VOLUME{index}_EXPORT_RAW_URI", "value": f"{base}/disk.img"},
            {"name": f"VOLUME{index}_EXPORT_RAW_GZIP_URI", "value": f"{base}/disk.img.gz"},
        ]
    else:
        env += [
            {"name": f"VOLUME{index}_EXPORT_ARCHIVE_URI", "value": f"{base}/disk.tar.gz"},
            {"name": f"VOLUME{index}_EXPORT_DIR_URI", "value": f"{base}/dir/"},
        ]
    return mount, env


def exporter_pod(
    export: Mapping[str, Any],
    source: Source,
    disk_images: Sequence[bool],
    token_secret: str,
    deadline: datetime,
    manifest_config_map: str = "",
) -> dict[str, Any]:
    """The exporter pod: the server with each claim read-only, the token Secret and, for a VM, its manifests."""
    meta = export.get("metadata") or {}
    name = str(meta.get("name", ""))
    env = [
        {"name": "TOKEN_FILE", "value": "/token/token"},
        {"name": "DEADLINE", "value": format_time(deadline)},
        {"name": "EXPORT_SECRET_DEF_URI", "value": SECRET_MANIFEST_PATH},
    ]
    if source.vm is not None:
        env.append({"name": "EXPORT_VM_DEF_URI", "value": MANIFESTS_PATH})
    volumes: list[dict[str, Any]] = [{"name": "token", "secret": {"secretName": token_secret}}]
    mounts: list[dict[str, Any]] = [{"name": "token", "mountPath": "/token"}]
    devices: list[dict[str, Any]] = []
    for index, (claim, disk_image) in enumerate(zip(source.claims, disk_images, strict=True)):
        claim_name = str((claim.get("metadata") or {}).get("name", ""))
        volume = names.pod_volume_name(claim_name)
        mount, volume_vars = volume_env(index, claim, disk_image)
        env += volume_vars
        volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim_name, "readOnly": True}})
        if is_block(claim):
            devices.append({"name": volume, "devicePath": mount})
        else:
            mounts.append({"name": volume, "mountPath": mount, "readOnly": True})
    if manifest_config_map:
        volumes.append({"name": "manifest-data", "configMap": {"name": manifest_config_map}})
        mounts.append({"name": "manifest-data", "mountPath": "/manifest_data"})
    container: dict[str, Any] = {
        "name": "exporter",
        "image": f"pykubevirt/virt-exportserver:{__version__}",
        "command": list(SERVER_COMMAND),
        "env": env,
        "volumeMounts": mounts,
    }
    if devices:
        container["volumeDevices"] = devices
    labels = {names.SERVICE_LABEL: names.service_label_value(name), **(meta.get("labels") or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": names.exporter_pod_name(name),
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(export)],
        },
        "spec": {
            "restartPolicy": "Never",
            # No Service network for the server: it listens on the node's loopback, behind the export proxy.
            "hostNetwork": True,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "fsGroup": 107},
            "containers": [container],
            "volumes": volumes,
        },
    }


def service(export: Mapping[str, Any]) -> dict[str, Any]:
    """createServiceManifest: port 443 to the server's 8443, selecting the exporter pod."""
    meta = export.get("metadata") or {}
    name = str(meta.get("name", ""))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.service_name(name),
            "namespace": meta.get("namespace"),
            "labels": {"kubevirt.io": "virt-exporter", **(meta.get("labels") or {})},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(export)],
        },
        "spec": {
            "ports": [{"name": "export", "protocol": "TCP", "port": 443, "targetPort": 8443}],
            "selector": {names.SERVICE_LABEL: names.service_label_value(name)},
        },
    }


def token_secret(export: Mapping[str, Any], token: str) -> dict[str, Any]:
    meta = export.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.token_secret_name(str(meta.get("name", ""))),
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner_reference(export)],
        },
        "type": "Opaque",
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }


def external_base(host: str, export: Mapping[str, Any]) -> str:
    """`<host>/api/export.kubevirt.io/v1/namespaces/<ns>/virtualmachineexports/<name>` (externalUrlLinkFormat)."""
    meta = export.get("metadata") or {}
    return f"{host}/api/{EXPORT_GROUP}/v1/namespaces/{meta.get('namespace')}/{EXPORT_PLURAL}/{meta.get('name')}"


def manifest_config_map(
    export: Mapping[str, Any],
    vm_manifest: Mapping[str, Any],
    data_volumes: Sequence[Mapping[str, Any]],
    host: str,
    ca: str,
) -> dict[str, Any]:
    """createManifestConfigMap: what the server renders /manifests/all from."""
    meta = export.get("metadata") or {}
    name = str(meta.get("name", ""))
    data = {
        "virtualmachine-manifest": json.dumps(vm_manifest, separators=(",", ":")),
        "export-name": name,
        "internal_host": f"{names.service_name(name)}.{meta.get('namespace')}.svc",
    }
    if host:
        data["external_host"] = external_base(host, export)
        data["external_ca_cm"] = json.dumps(
            {"metadata": {"name": f"export-ca-cm-{name}"}, "data": {"ca.pem": ca}}, separators=(",", ":")
        )
    for dv in data_volumes:
        data[f"dv-{(dv.get('metadata') or {}).get('name')}"] = json.dumps(dv, separators=(",", ":"))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.manifest_config_map_name(name),
            "namespace": meta.get("namespace"),
            "ownerReferences": [owner_reference(export)],
        },
        "data": data,
    }


_FORMATS: Final = (
    ("raw", "_EXPORT_RAW_URI"),
    ("gzip", "_EXPORT_RAW_GZIP_URI"),
    ("dir", "_EXPORT_DIR_URI"),
    ("tar.gz", "_EXPORT_ARCHIVE_URI"),
)


def links(pod: Mapping[str, Any], base: str, ca: str, volume_prefix: str = "") -> dict[str, Any]:
    """getLinks: a volume entry per claim the pod serves with its formats, and the manifests the pod serves."""
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}
    link: dict[str, Any] = {"cert": ca}
    manifests = []
    # The manifests name their link's side: the server renders them with that side's host and CA.
    if env.get("EXPORT_VM_DEF_URI"):
        manifests.append({"type": "all", "url": f"https://{base}/external{env['EXPORT_VM_DEF_URI']}"})
    if env.get("EXPORT_SECRET_DEF_URI"):
        secret_url = f"https://{base}/external{env['EXPORT_SECRET_DEF_URI']}"
        manifests.append({"type": "auth-header-secret", "url": secret_url})
    if manifests:
        link["manifests"] = manifests
    volumes = []
    for key in sorted(k for k in env if k.endswith("_EXPORT_PATH")):
        prefix = key.removesuffix("_EXPORT_PATH")
        uris = [(fmt, env.get(prefix + suffix, "")) for fmt, suffix in _FORMATS]
        formats = [{"format": fmt, "url": f"https://{base}{uri}"} for fmt, uri in uris if uri]
        if formats:
            # Each URI is /volumes/<claim>/<file>: the volume's name in the link is its claim's.
            claim = next(uri for _, uri in uris if uri).split("/")[2]
            volumes.append({"name": claim.removeprefix(volume_prefix), "formats": formats})
    if volumes:
        link["volumes"] = volumes
    return link


def pod_state(pod: Mapping[str, Any] | None, server_url: str) -> tuple[str, Condition]:
    """The export's phase and Ready condition from its exporter pod: Ready once the pod runs and its server listens."""
    if pod is None:
        return "Pending", ready_condition("False", INITIALIZING)
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Running" and server_url:
        return "Ready", ready_condition("True", POD_READY)
    if phase == "Succeeded":
        return "Terminated", ready_condition("False", POD_COMPLETED)
    if phase == "Pending" or (phase == "Running" and not server_url):
        return "Pending", ready_condition("False", POD_PENDING)
    return "Pending", ready_condition("False", UNKNOWN)


def set_condition(conditions: list[dict[str, Any]], condition: Condition, now: str) -> list[dict[str, Any]]:
    """updateCondition: replace the condition of its type only when it changed, keeping its transition time."""
    wanted: dict[str, Any] = {"type": condition.type, "status": condition.status, "lastProbeTime": None}
    wanted["lastTransitionTime"] = now
    # Go's omitempty: an empty reason or message is not written.
    wanted.update({k: v for k, v in (("reason", condition.reason), ("message", condition.message)) if v})
    for i, existing in enumerate(conditions):
        if existing.get("type") == condition.type:
            same = all(existing.get(k, "") == wanted.get(k, "") for k in ("status", "reason", "message"))
            if not same:
                conditions[i] = wanted
            return conditions
    conditions.append(wanted)
    return conditions
