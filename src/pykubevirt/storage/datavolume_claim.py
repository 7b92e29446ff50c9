"""What CDI makes of a DataVolume: its claim, its importer pod, and its status from theirs. Pure.

Upstream (containerized-data-importer): `pkg/controller/datavolume/util.go` (renderPvcSpec, pvcFromStorage),
`pkg/controller/datavolume/controller-base.go` (newPersistentVolumeClaim, updateStatus),
`pkg/controller/datavolume/conditions.go`, `pkg/controller/import-controller.go` (makeImporterPodSpec) and
`pkg/util/util.go` (GetRequiredSpace). Sources: `blank`, `http`, `registry` and `pvc` (host-assisted clone).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pykubevirt import __version__
from pykubevirt.api import constants as c
from pykubevirt.api.quantity import MI
from pykubevirt.api.volume_binding import to_bytes
from pykubevirt.storage import import_progress, import_sources

ANN = "cdi.kubevirt.io/"
CONTENT_TYPE = ANN + "storage.contentType"
POD_RESTARTS = ANN + "storage.pod.restarts"
POD_PHASE = ANN + "storage.pod.phase"
CREATED_FOR = ANN + "createdForDataVolume"
IMPORT_SOURCE = ANN + "storage.import.source"
IMPORT_POD_NAME = ANN + "storage.import.importPodName"
PREALLOCATION_REQUESTED = ANN + "storage.preallocation.requested"
POD_READY = ANN + "storage.pod.ready"
FATAL_ERROR = ANN + "storage.import.fatalError"
UPLOAD_TARGET = ANN + "storage.upload.target"
# Where the upload proxy finds the upload server: CDI's Service URL, for a pod that has no network of its own.
UPLOAD_URL = "upload.pykubevirt.io/server-url"
CLONE_REQUEST = "k8s.io/CloneRequest"
CDI_LABEL = "cdi.kubevirt.io"
APP_LABEL_VALUE = "containerized-data-importer"
DEFAULT_OVERHEAD = 0.06
IMPORTER_COMMAND = ("pykubevirt", "cdi-importer")
UPLOAD_SERVER_COMMAND = ("pykubevirt", "cdi-uploadserver")
CLONE_SOURCE_COMMAND = ("pykubevirt", "cdi-clone-source")
CLONE_SOURCE_CONTAINER = "cdi-clone-source"
CLONE_SOURCE_POD_SUFFIX = "-source-pod"
CLONER_MOUNT = "/var/run/cdi/clone/source"
# The target claim ("<namespace>/<name>") a clone's source pod works for: it cannot be owned across namespaces.
CLONE_OWNER_REF = ANN + "storage.ownerRef"
UPLOAD_TARGET_LABEL = ANN + "uploadTarget"
UPLOAD_PATH = "/v1beta1/upload"
DATA_DIR = "/data"
SOURCE_DIR = "/source"
NO_CLAIM_SPEC = "datavolume one of {pvc, storage} field is required"
MISSING_SIZE = "PVC Spec is not valid - missing storage size"
TOO_SMALL = "PVC Spec is not valid - storage size should be at least 1MiB"


class ClaimSpecError(ValueError):
    """The DataVolume cannot become a claim (CDI's ErrClaimNotValid)."""


def required_space(request: int, overhead: float) -> int:
    """GetRequiredSpace: the image (rounded up to 1 MiB) plus the filesystem's share, for a filesystem claim."""
    aligned = -(-request // MI) * MI
    return math.ceil(aligned * (1 + overhead))


def usable_space(available: int, overhead: float) -> int:
    """GetUsableSpace: what of a filesystem volume the image may take, rounded down to 1 MiB."""
    space = math.ceil(available / (1 + overhead))
    return space - space % MI


def source_kind(dv: Mapping[str, Any]) -> str:
    """`blank`, `pvc`, another source's name, or "" when none is given."""
    source = (dv.get("spec") or {}).get("source") or {}
    return next(iter(source), "")


def requested_size(dv: Mapping[str, Any]) -> int:
    """The bytes spec.storage (or spec.pvc) asks for; 0 when it names no size."""
    spec = dv.get("spec") or {}
    target = spec.get("pvc") or spec.get("storage") or {}
    return to_bytes(((target.get("resources") or {}).get("requests") or {}).get("storage"))


def claim_spec(dv: Mapping[str, Any], source_request: str = "") -> dict[str, Any]:
    """spec.pvc verbatim; spec.storage with CDI's defaults and the filesystem overhead added to the request.

    A clone that names no size takes its source claim's request (`source_request`), which already holds the overhead.
    """
    spec = dv.get("spec") or {}
    if spec.get("pvc") is not None:
        return dict(spec["pvc"])
    storage = spec.get("storage")
    if storage is None:
        raise ClaimSpecError(NO_CLAIM_SPEC)
    claim = {k: v for k, v in storage.items() if v is not None}
    request = requested_size(dv)
    if not request and (source_kind(dv) != "pvc" or not source_request):
        raise ClaimSpecError(MISSING_SIZE)
    if request and request < MI:
        raise ClaimSpecError(TOO_SMALL)
    # The embedded provisioner has no StorageProfile: ReadWriteOnce filesystem volumes unless the DV says otherwise.
    claim.setdefault("accessModes", ["ReadWriteOnce"])
    mode = claim.get("volumeMode") or "Filesystem"
    claim["volumeMode"] = "Filesystem" if mode == "FromStorageProfile" else mode
    resources = dict(claim.get("resources") or {})
    if not request:
        resources["requests"] = dict(resources.get("requests") or {}, storage=source_request)
    elif claim["volumeMode"] == "Filesystem":
        resources["requests"] = dict(
            resources.get("requests") or {}, storage=str(required_space(request, DEFAULT_OVERHEAD))
        )
    claim["resources"] = resources
    return claim


def new_claim(dv: Mapping[str, Any], source_request: str = "") -> dict[str, Any]:
    """newPersistentVolumeClaim: named after the DV, owned by it, with the annotations the import controller reads."""
    meta = dv.get("metadata") or {}
    kind = source_kind(dv)
    annotations = {
        CONTENT_TYPE: str((dv.get("spec") or {}).get("contentType") or "kubevirt"),
        POD_RESTARTS: "0",
        CREATED_FOR: str(meta.get("uid", "")),
        PREALLOCATION_REQUESTED: "true" if (dv.get("spec") or {}).get("preallocation") else "false",
    }
    if kind == "blank":
        annotations[IMPORT_SOURCE] = "none"
    elif kind == "http":
        annotations[IMPORT_SOURCE] = "http"
        annotations.update(import_sources.http_annotations((dv.get("spec") or {}).get("source", {}).get("http") or {}))
    elif kind == "upload":
        annotations[UPLOAD_TARGET] = ""
    elif kind == "registry":
        annotations[IMPORT_SOURCE] = "registry"
        source_spec = (dv.get("spec") or {}).get("source", {}).get("registry") or {}
        annotations.update(import_sources.registry_annotations(source_spec))
    elif kind == "pvc":
        source = (dv.get("spec") or {}).get("source", {}).get("pvc") or {}
        annotations[CLONE_REQUEST] = f"{source.get('namespace') or meta.get('namespace')}/{source.get('name', '')}"
    labels = dict(meta.get("labels") or {}, app=APP_LABEL_VALUE)
    owner = {
        "apiVersion": c.CDI_API_VERSION,
        "kind": c.DATA_VOLUME_KIND,
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": claim_spec(dv, source_request),
    }


def clone_namespace(dv: Mapping[str, Any]) -> str:
    """The namespace of a clone's source claim: its own, or the DataVolume's."""
    source = ((dv.get("spec") or {}).get("source") or {}).get("pvc") or {}
    return str(source.get("namespace") or (dv.get("metadata") or {}).get("namespace") or "")


def is_cross_namespace_clone(dv: Mapping[str, Any]) -> bool:
    """A clone from another namespace: an upload server on the target and a source pod there (host-assisted)."""
    return source_kind(dv) == "pvc" and clone_namespace(dv) != (dv.get("metadata") or {}).get("namespace")


def takes_upload(dv: Mapping[str, Any]) -> bool:
    """Whether the DataVolume's claim is filled through an upload server: an upload, or a cross-namespace clone."""
    return source_kind(dv) == "upload" or is_cross_namespace_clone(dv)


def upload_pod_name(claim: str) -> str:
    """CDI's `cdi-upload-<claim>`: the upload server of a claim."""
    return f"cdi-upload-{claim}"[:253]


def pod_name(dv: Mapping[str, Any], claim: str) -> str:
    """`cdi-upload-<claim>` for an upload server, `importer-<claim>` otherwise."""
    return upload_pod_name(claim) if takes_upload(dv) else f"importer-{claim}"[:253]


def upload_endpoint(server_url: str) -> str:
    """Where a clone's source pod POSTs: the upload server's sync upload path."""
    return server_url.rstrip("/") + UPLOAD_PATH


def upload_url_of(pod: Mapping[str, Any]) -> str:
    """The UPLOAD_URL a clone source pod was made with ("" if none)."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "UPLOAD_URL":
                return str(env.get("value") or "")
    return ""


def upload_server_annotations(annotations: Mapping[str, Any], pod: Mapping[str, Any], log_text: str) -> dict[str, str]:
    """pod.ready and the server's address as an upload server pod and the tail of its log tell them (kept as
    recorded while it runs with the address scrolled out of the tail)."""
    running = (pod.get("status") or {}).get("phase") == "Running"
    url = import_progress.upload_server_url(log_text) if running else None
    if running and url is None and annotations.get(POD_READY) == "true":
        return {POD_READY: "true", UPLOAD_URL: str(annotations.get(UPLOAD_URL) or "")}
    return {POD_READY: "true" if url else "false", UPLOAD_URL: url or ""}


def clone_source_pod_name(pvc: Mapping[str, Any]) -> str:
    """CDI's `<target claim uid>-source-pod`."""
    return f"{(pvc.get('metadata') or {}).get('uid', '')}{CLONE_SOURCE_POD_SUFFIX}"


def clone_source_pod(
    pvc: Mapping[str, Any], dv: Mapping[str, Any], source: Mapping[str, Any], upload_url: str
) -> dict[str, Any]:
    """MakeCloneSourcePodSpec: in the source's namespace, the source claim mounted, sending it to `upload_url`.

    It cannot be owned across namespaces; CDI's ownerRef annotation (`<namespace>/<claim>` of the target) names
    what it works for, and the DataVolume controller deletes it when the clone is done or the DataVolume goes."""
    meta = pvc.get("metadata") or {}
    source_meta = source.get("metadata") or {}
    name = clone_source_pod_name(pvc)
    block = (source.get("spec") or {}).get("volumeMode") == "Block"
    container: dict[str, Any] = {
        "name": CLONE_SOURCE_CONTAINER,
        "image": f"pykubevirt/cdi-cloner:{__version__}",
        "command": list(CLONE_SOURCE_COMMAND),
        "args": ["-v=1"],
        "env": [
            {"name": "UPLOAD_URL", "value": upload_endpoint(upload_url)},
            {"name": "OWNER_UID", "value": str((dv.get("metadata") or {}).get("uid", ""))},
            {"name": "PREALLOCATION", "value": "false"},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if block:
        container["volumeDevices"] = [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
    else:
        container["volumeMounts"] = [{"name": "cdi-data-vol", "mountPath": CLONER_MOUNT, "readOnly": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": source_meta.get("namespace"),
            "labels": {
                CDI_LABEL: "cdi-clone-source",
                "app": APP_LABEL_VALUE,
                ANN + "cloneUniqueID": name,
                "prometheus.cdi.kubevirt.io": "true",
                "cdi.kubevirt.io/hostAssistedSourcePodCloneSource": str(source_meta.get("uid", "")),
            },
            "annotations": {
                ANN + "storage.createdByController": "yes",
                CLONE_OWNER_REF: f"{meta.get('namespace')}/{meta.get('name')}",
            },
        },
        "spec": {
            "restartPolicy": "OnFailure",
            # As the upload server, in the node's network: it listens on the node's loopback.
            "hostNetwork": True,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": [
                {
                    "name": "cdi-data-vol",
                    "persistentVolumeClaim": {"claimName": str(source_meta.get("name", "")), "readOnly": not block},
                }
            ],
            "affinity": {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {
                                    "matchExpressions": [
                                        {"key": UPLOAD_TARGET_LABEL, "operator": "In", "values": [str(meta.get("uid"))]}
                                    ]
                                },
                                "namespaces": [str(meta.get("namespace"))],
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
        },
    }


def upload_pod(pvc: Mapping[str, Any], dv: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """upload-controller.go's pod: the upload server with the claim at /data, owned by the claim; its OWNER_UID is
    the DataVolume's, or for a bare claim the claim's own."""
    claim_meta = pvc.get("metadata") or {}
    pod = importer_pod(pvc, dv if dv is not None else {"metadata": {"uid": claim_meta.get("uid", "")}})
    meta = pod["metadata"]
    meta["name"] = upload_pod_name(str(claim_meta.get("name", "")))
    meta["labels"] = {
        "app": APP_LABEL_VALUE,
        CDI_LABEL: "cdi-upload-server",
        UPLOAD_TARGET_LABEL: str((pvc.get("metadata") or {}).get("uid", "")),
    }
    container = pod["spec"]["containers"][0]
    container.update(name="cdi-upload-server", command=list(UPLOAD_SERVER_COMMAND))
    container["env"] = [
        {"name": "UPLOAD_IMAGE_SIZE" if e["name"] == "IMPORTER_IMAGE_SIZE" else e["name"], "value": e["value"]}
        for e in container["env"]
        if e["name"] in ("IMPORTER_IMAGE_SIZE", "OWNER_UID", "FILESYSTEM_OVERHEAD", "PREALLOCATION")
    ]
    return pod


def importer_pod(pvc: Mapping[str, Any], dv: Mapping[str, Any], source_claim: str = "") -> dict[str, Any]:
    """makeImporterPodSpec: `importer-<claim>`, owned by the claim, the claim at /data (a clone's source at /source)."""
    meta = pvc.get("metadata") or {}
    name = str(meta.get("name", ""))
    claim_spec_ = pvc.get("spec") or {}
    kind = source_kind(dv)
    source = {"blank": "none", "http": "http", "registry": "registry"}.get(kind, "pvc")
    env = [
        {"name": "IMPORTER_SOURCE", "value": source},
        {"name": "IMPORTER_CONTENTTYPE", "value": str((dv.get("spec") or {}).get("contentType") or "kubevirt")},
        {
            "name": "IMPORTER_IMAGE_SIZE",
            "value": str(((claim_spec_.get("resources") or {}).get("requests") or {}).get("storage", "")),
        },
        {"name": "OWNER_UID", "value": str((dv.get("metadata") or {}).get("uid", ""))},
        {
            "name": "FILESYSTEM_OVERHEAD",
            "value": "0" if claim_spec_.get("volumeMode") == "Block" else str(DEFAULT_OVERHEAD),
        },
        {"name": "PREALLOCATION", "value": "false"},
    ]
    volumes = [{"name": "cdi-data-vol", "persistentVolumeClaim": {"claimName": name}}]
    mounts: list[dict[str, Any]] = [{"name": "cdi-data-vol", "mountPath": DATA_DIR}]
    parts = import_sources.pod_parts(kind, meta.get("annotations") or {})
    env.extend(parts.env)
    volumes.extend(parts.volumes)
    mounts.extend(parts.mounts)
    if source_claim:
        volumes.append(
            {"name": "cdi-source-vol", "persistentVolumeClaim": {"claimName": source_claim, "readOnly": True}}
        )
        mounts.append({"name": "cdi-source-vol", "mountPath": SOURCE_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": "importer",
        "image": f"pykubevirt/cdi-importer:{__version__}",
        "command": list(IMPORTER_COMMAND),
        "args": ["-v=1"],
        "env": env,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if claim_spec_.get("volumeMode") == "Block":
        container["volumeDevices"] = [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
        mounts = mounts[1:]
    container["volumeMounts"] = mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"importer-{name}"[:253],
            "namespace": meta.get("namespace"),
            "labels": {"app": APP_LABEL_VALUE, CDI_LABEL: "importer", "prometheus.cdi.kubevirt.io": "true"},
            "annotations": {ANN + "storage.createdByController": "yes"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "name": name,
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "OnFailure",
            # Unlike CDI's, in the node's network: an image served on the host's loopback is reachable, and so is the
            # upload server (on loopback) from the API server's upload proxy.
            "hostNetwork": True,
            "enableServiceLinks": False,
            "containers": [container],
            **({"initContainers": parts.init_containers} if parts.init_containers else {}),
            "volumes": volumes,
        },
    }


def _condition(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def dv_phase(dv: Mapping[str, Any], pvc: Mapping[str, Any] | None, pod: Mapping[str, Any] | None) -> str:
    """updateStatus: the DataVolume's phase from its claim and its importer pod."""
    current = str((dv.get("status") or {}).get("phase") or "")
    if current in ("Succeeded", "Failed"):
        return current
    if pvc is None:
        return "Pending"
    pvc_phase = (pvc.get("status") or {}).get("phase")
    if pvc_phase == "Lost":
        return "Failed"
    pod_phase = str(((pvc.get("metadata") or {}).get("annotations") or {}).get(POD_PHASE) or "")
    if pod is not None:
        pod_phase = str((pod.get("status") or {}).get("phase") or pod_phase)
    clone = source_kind(dv) == "pvc"
    upload = source_kind(dv) == "upload"
    ready = ((pvc.get("metadata") or {}).get("annotations") or {}).get(POD_READY) == "true"
    if pod_phase == "Succeeded":
        return "Succeeded"
    if pod_phase == "Running" and upload:
        return "UploadReady" if ready else "UploadScheduled"
    if pod_phase == "Running":
        return "CloneInProgress" if clone else "ImportInProgress"
    if pvc_phase != "Bound":
        return "Pending"
    if pod is not None or pod_phase == "Pending":
        return "CloneScheduled" if clone else "UploadScheduled" if upload else "ImportScheduled"
    return "PVCBound"


# CDI's simplifyKnownMessage: out-of-space failures, whatever wrote them, say what the user must change.
SPACE_ERRORS = ("no space left on device", "disk quota exceeded", "file too large")
TOO_SMALL_MESSAGE = "DataVolume too small to contain image"


def simplify_message(message: str) -> str:
    lowered = message.lower()
    return TOO_SMALL_MESSAGE if any(error in lowered for error in SPACE_ERRORS) else message


def _failed_pull(pod: Mapping[str, Any]) -> str:
    """The image a container of the pod cannot pull (a registry import's `server` sidecar), or ""."""
    status = pod.get("status") or {}
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        reason = ((container.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in ("ErrImagePull", "ImagePullBackOff"):
            return str(container.get("image") or "")
    return ""


def dv_conditions(
    name: str,
    phase: str,
    pvc: Mapping[str, Any] | None,
    pod: Mapping[str, Any] | None,
    failure: str = "",
    *,
    sender_failed: bool = False,
) -> list[dict[str, Any]]:
    """conditions.go: Bound from the claim, Ready from the phase, Running from the importer pod (`failure` is the
    message of its last failed attempt, CDI's termination message). `sender_failed`: the upload server runs, but the
    clone source pod sending to it failed with `failure`."""
    if pvc is None:
        bound = _condition("Bound", "False", "NotFound", "No PVC found")
    elif (pvc.get("status") or {}).get("phase") == "Bound":
        bound = _condition("Bound", "True", "Bound", f"PVC {name} Bound")
    elif (pvc.get("status") or {}).get("phase") == "Lost":
        bound = _condition("Bound", "False", "ClaimLost", "Claim Lost")
    else:
        bound = _condition("Bound", "False", "Pending", f"PVC {name} Pending")
    if phase == "Succeeded":
        ready = _condition("Ready", "True")
    elif phase in ("ImportInProgress", "CloneInProgress"):
        ready = _condition("Ready", "False", "TransferRunning")
    else:
        ready = _condition("Ready", "False")
    running = _condition("Running", "False")
    if phase == "Succeeded":
        running = _condition("Running", "False", "Completed", "Import Complete")
    elif pod is not None and (image := _failed_pull(pod)):
        running = _condition("Running", "False", "ImagePullFailed", f"failed to pull image: {image}")
    elif pod is not None:
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = (statuses[0].get("state") or {}) if statuses else {}
        if "waiting" in state and state["waiting"].get("reason") == "CrashLoopBackOff":
            # CDI keeps what the ended attempt reported while the kubelet backs off (setAnnotationsFromPodWithPrefix).
            state = (statuses[0].get("lastState") or {}) or state
        if "running" in state and sender_failed and failure:
            running = _condition("Running", "False", "Error", simplify_message(failure))
        elif "running" in state:
            running = _condition("Running", "True", "Pod is running")
        elif "waiting" in state:
            waiting = state["waiting"]
            running = _condition("Running", "False", str(waiting.get("reason", "")), str(waiting.get("message", "")))
        elif "terminated" in state:
            ended = state["terminated"]
            message = simplify_message(failure or str(ended.get("message", "")))
            running = _condition("Running", "False", str(ended.get("reason", "")), message)
    return [bound, ready, running]
