"""CDI's upload controller (pkg/controller/upload-controller.go) for claims no DataVolume owns: an upload server pod
`cdi-upload-<claim>` for a claim annotated `storage.upload.target`, the claim's annotations following the pod.

As the DataVolume path, without CDI's HonorWaitForFirstConsumer gate: the pod is a WaitForFirstConsumer claim's first
consumer and binds it, whether `storage.bind.immediate.requested` is set or not."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from pykubevirt.api import objects
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result, controller_owner_key
from pykubevirt.client.errors import AlreadyExists, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.pod_logs import pod_log_tail
from pykubevirt.client.resources import PERSISTENT_VOLUME_CLAIMS, PODS
from pykubevirt.storage import datavolume_claim as dvc
from pykubevirt.storage import import_progress
from pykubevirt.storage.datavolume_controller import LOG_TAIL_LINES
from pykubevirt.storage.pv_controller import CLAIM_INDEX

log = logging.getLogger("pykubevirt.storage.upload")

UPLOAD_POD = dvc.ANN + "storage.uploadPodName"
# CDI's running condition of a claim (setConditionFromPodWithPrefix); a DataVolume carries it in its status instead.
RUNNING = dvc.ANN + "storage.condition.running"
RUNNING_REASON = RUNNING + ".reason"
RUNNING_MESSAGE = RUNNING + ".message"
UPLOAD_SERVER_ROLE = "cdi-upload-server"
SUPPORTED_CONTENT = ("kubevirt", "archive")
BOTH_ANNOTATIONS = "PVC has both clone and upload annotations"
# As the DataVolume path polls its pod's log: the server's address (and a restart's new one) is only there.
POLL_SECONDS = 1.0
IN_USE_RETRY_SECONDS = 5.0


def _kept_by_data_volume(meta: Mapping[str, Any], annotations: Mapping[str, Any]) -> bool:
    if dvc.CREATED_FOR in annotations:
        return True
    return any(r.get("kind") == "DataVolume" and r.get("controller") for r in meta.get("ownerReferences") or [])


def is_upload_target(pvc: Mapping[str, Any]) -> bool:
    """A claim marked as an upload target that no DataVolume keeps (the DataVolume controller serves those)."""
    meta = pvc.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    # The annotation first: an ordinary claim costs this one lookup.
    return dvc.UPLOAD_TARGET in annotations and not _kept_by_data_volume(meta, annotations)


def upload_target_key(pvc: Object) -> list[str]:
    """The claim's key if this controller serves it."""
    return [object_key(pvc)] if is_upload_target(pvc) else []


def upload_server_claim(pod: Object) -> list[str]:
    """The claim an upload server pod works for (its controlling owner); none for other pods."""
    if ((pod.get("metadata") or {}).get("labels") or {}).get(dvc.CDI_LABEL) != UPLOAD_SERVER_ROLE:
        return []
    key = controller_owner_key(pod, "PersistentVolumeClaim")
    return [key] if key else []


def unsupported(annotations: Mapping[str, Any]) -> str:
    """Why the embedded CDI cannot serve this upload target, or "" when it can."""
    if dvc.CLONE_REQUEST in annotations:
        return BOTH_ANNOTATIONS
    content = str(annotations.get(dvc.CONTENT_TYPE) or "kubevirt")
    if content not in SUPPORTED_CONTENT:
        # CDI's upload proxy refuses these too (resolveUploadPath).
        return f"upload content-type {content} is invalid"
    return ""


def failure_annotations(message: str) -> dict[str, str]:
    """CDI's running condition of a claim that will not be served."""
    return {RUNNING: "false", RUNNING_REASON: "Error", RUNNING_MESSAGE: message}


def server_annotations(annotations: Mapping[str, Any], pod: Mapping[str, Any], log_text: str) -> dict[str, str]:
    """What the claim says of its upload server pod: phase, restarts, readiness and address, running condition."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "")
    restarts = max([int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or []] or [0])
    ready = dvc.upload_server_annotations(annotations, pod, log_text)
    # The Running condition CDI derives from the server's container, its failure from the log as the importer's.
    failure = import_progress.failure_from_log(log_text) or ""
    condition = dvc.dv_conditions("", "", None, pod, failure)[2]
    return {
        dvc.POD_PHASE: phase,
        dvc.POD_RESTARTS: str(max(restarts, int(annotations.get(dvc.POD_RESTARTS) or 0))),
        **ready,
        RUNNING: condition["status"].lower(),
        RUNNING_REASON: condition["reason"],
        RUNNING_MESSAGE: condition["message"],
    }


class UploadController:
    """Reconciles upload target claims (keys `namespace/name`): their upload server pod and its annotations."""

    def __init__(self, client: KubeClient, *, claims: Informer, pods: Informer, recorder: EventRecorder) -> None:
        self.client = client
        self.claims = claims
        self.pods = pods  # with the PV controller's CLAIM_INDEX
        self.recorder = recorder

    async def reconcile(self, key: str) -> Result | None:
        pvc = self.claims.get(key)
        if pvc is None:
            return None  # its pod is owned by it: the garbage collector takes it
        meta = pvc["metadata"]
        annotations = meta.get("annotations") or {}
        if _kept_by_data_volume(meta, annotations):
            return None  # the DataVolume controller drives its pod (a cross-namespace clone's is cdi-upload- too)
        pod_name = str(annotations.get(UPLOAD_POD) or dvc.upload_pod_name(str(meta["name"])))
        pod = self.pods.get(f"{meta['namespace']}/{pod_name}")
        if pod is not None and controller_owner_key(pod, "PersistentVolumeClaim") != key:
            log.warning("upload target %s: pod %s is not controlled by the claim", key, pod_name)
            return None
        done = annotations.get(dvc.POD_PHASE) == "Succeeded"
        if dvc.UPLOAD_TARGET not in annotations or done or objects.is_marked_for_deletion(pvc):
            # Also a claim being deleted: its protection holds while the server mounts it (as CDI's cleanup).
            await self._delete_pod(pod)
            return None
        reason = unsupported(annotations)
        if reason:
            await self._fail(pvc, reason)
            await self._delete_pod(pod)
            return None
        if pod is None:
            return await self._create_pod(pvc, pod_name)
        text = await self._log_tail(pod)
        wanted = server_annotations(annotations, pod, text)
        if any(annotations.get(k) != v for k, v in wanted.items()):
            await self._annotate(pvc, wanted)
            if wanted[dvc.POD_READY] == "true" and annotations.get(dvc.POD_READY) != "true":
                log.info("upload target %s: server ready at %s", key, wanted[dvc.UPLOAD_URL])
        if wanted[dvc.POD_PHASE] == "Succeeded":
            self.recorder.event(pvc, NORMAL, "UploadSucceeded", "Upload Successful")
            await self._delete_pod(pod)
            return None
        # Pending comes back with the pod's events; a Failed pod (restartPolicy OnFailure) stays as CDI leaves it.
        return Result(requeue_after=POLL_SECONDS) if wanted[dvc.POD_PHASE] == "Running" else None

    async def _create_pod(self, pvc: Object, pod_name: str) -> Result | None:
        key = object_key(pvc)
        users = [
            p
            for p in self.pods.by_index(CLAIM_INDEX, key)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        if users:
            # CDI waits for the claim to be free: the server would write under a running guest.
            log.info("upload target %s: in use by pod %s, waiting", key, users[0]["metadata"]["name"])
            return Result(requeue_after=IN_USE_RETRY_SECONDS)
        body = dvc.upload_pod(pvc)
        body["metadata"]["name"] = pod_name
        try:
            await self.client.create(PODS, body)
        except AlreadyExists:
            return None  # its informer event brings us back
        log.info("upload target %s: upload server pod %s created", key, pod_name)
        await self._annotate(pvc, {UPLOAD_POD: pod_name, dvc.POD_PHASE: "Pending", dvc.POD_READY: "false"})
        return None

    async def _fail(self, pvc: Object, message: str) -> None:
        """Record why the claim is not served as the DataVolume path reports the unsupported: Error, and a Warning."""
        annotations = pvc["metadata"].get("annotations") or {}
        wanted = failure_annotations(message)
        if all(annotations.get(k) == v for k, v in wanted.items()):
            return
        await self._annotate(pvc, wanted)
        log.info("upload target %s: %s", object_key(pvc), message)
        self.recorder.event(pvc, WARNING, "Failed", message)

    async def _log_tail(self, pod: Object) -> str:
        if (pod.get("status") or {}).get("phase") not in ("Running", "Failed"):
            return ""  # nothing to read before it runs, nothing needed once it succeeded
        meta = pod["metadata"]
        return await pod_log_tail(self.client, meta["namespace"], meta["name"], LOG_TAIL_LINES) or ""

    async def _delete_pod(self, pod: Object | None) -> None:
        if pod is None or objects.is_marked_for_deletion(pod):
            return
        with contextlib.suppress(NotFound):
            await self.client.delete(PODS, str(pod["metadata"]["name"]), str(pod["metadata"]["namespace"]))

    async def _annotate(self, pvc: Object, annotations: dict[str, str]) -> None:
        meta = pvc["metadata"]
        name, namespace = str(meta["name"]), str(meta["namespace"])
        try:
            written = await self.client.patch(
                PERSISTENT_VOLUME_CLAIMS, name, {"metadata": {"annotations": annotations}}, namespace
            )
        except NotFound:
            return
        # A pod event may come back before the watch brings this write: Succeeded must not look like "no pod yet".
        self.claims.wrote(written, str(meta.get("resourceVersion", "")))
