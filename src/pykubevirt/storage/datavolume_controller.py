"""A CDI-compatible DataVolume controller for the embedded cluster (blank, http, registry, upload, pvc).

As CDI's legacy (non-populator) path without the HonorWaitForFirstConsumer gate: the DataVolume's claim is created
with the import annotations, an importer pod that mounts it (and, for a clone, the source claim) is its first
consumer, so the scheduler picks the node a WaitForFirstConsumer volume is provisioned on. The pod runs
`pykubevirt cdi-importer` through the node agent, and is deleted once it succeeded. While it runs, progress and the
last attempt's failure come from the tail of its log (see import_progress), polled every second as CDI scrapes
its importer's metrics every 2 s.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from pykubevirt.api import objects
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import now_rfc3339
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Result
from pykubevirt.client.errors import AlreadyExists, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.pod_logs import pod_log_tail
from pykubevirt.client.resources import DATA_VOLUMES, PERSISTENT_VOLUME_CLAIMS, PODS, STORAGE_CLASSES
from pykubevirt.storage import data_source, import_progress
from pykubevirt.storage import datavolume_claim as dvc

log = logging.getLogger("pykubevirt.storage.datavolume")

SUPPORTED_SOURCES = ("blank", "http", "registry", "upload", "pvc")
PROGRESS_POLL_SECONDS = 1.0
# A DataVolume whose claim comes already filled (a VM restore's): CDI adopts the claim and imports nothing.
PRE_POPULATED = "cdi.kubevirt.io/storage.prePopulated"
POPULATED_FOR = "cdi.kubevirt.io/storage.populatedFor"
LOG_TAIL_LINES = 40


class DataVolumeController:
    """Reconciles DataVolumes (keys `namespace/name`): claim, importer pod, phase, progress and conditions."""

    def __init__(
        self,
        client: KubeClient,
        *,
        data_volumes: Informer,
        claims: Informer,
        pods: Informer,
        recorder: EventRecorder,
        data_sources: Informer | None = None,
    ) -> None:
        self.client = client
        self.data_volumes = data_volumes
        self.claims = claims
        self.pods = pods
        self.recorder = recorder
        self.data_sources = data_sources

    def _with_source_ref_resolved(self, dv: Object) -> Object | None:
        """A DataVolume with a `sourceRef`, its source filled in from the DataSource (populateSourceIfSourceRef); None
        while the DataSource is missing or has no source, when CDI leaves the DataVolume alone."""
        ref = (dv.get("spec") or {}).get("sourceRef")
        sources = self.data_sources
        if not ref or sources is None or ref.get("kind") != "DataSource":
            return dv
        namespace = str(ref.get("namespace") or dv["metadata"]["namespace"])
        found = sources.get(f"{namespace}/{ref.get('name', '')}")
        if found is None:
            return None
        source = data_source.clone_source(found, lambda ns, name: sources.get(f"{ns}/{name}"))
        if source is None:
            return None
        resolved = copy_json(dv)
        resolved["spec"]["source"] = source
        return resolved

    def referencing(self, data_source_obj: Object) -> list[str]:
        """The DataVolumes whose sourceRef names this DataSource: they wait for it."""
        meta = data_source_obj.get("metadata") or {}
        keys = []
        for dv in self.data_volumes.items():
            ref = (dv.get("spec") or {}).get("sourceRef") or {}
            namespace = ref.get("namespace") or dv["metadata"].get("namespace")
            if ref.get("name") == meta.get("name") and namespace == meta.get("namespace"):
                keys.append(object_key(dv))
        return keys

    async def reconcile(self, key: str) -> Result | None:
        dv = self.data_volumes.get(key)
        namespace, name = key.split("/", 1)
        pvc = self.claims.get(key)
        if pvc is not None and objects.is_marked_for_deletion(pvc):
            # A claim being deleted keeps its protection while the importer uses it: stop the import (as CDI does).
            await self._delete_importer(namespace, name)
            return None
        if dv is None or objects.is_marked_for_deletion(dv):
            await self._delete_clone_sources(key)
            return None
        resolved = self._with_source_ref_resolved(dv)
        if resolved is None:
            return None
        dv = resolved
        kind = dvc.source_kind(dv)
        if kind not in SUPPORTED_SOURCES:
            message = f"the embedded CDI does not import {kind or 'DataVolumes without a source'} yet"
            await self._status(dv, "Failed", None, None, message)
            return None
        annotations = dv["metadata"].get("annotations") or {}
        # Present with any value (CDI's AnnPrePopulated): a restore may name the DataVolume there.
        if pvc is None and PRE_POPULATED in annotations:
            return None  # its claim is being made by someone else (a restore), with its data: wait for it
        if pvc is not None and ((pvc["metadata"].get("annotations") or {}).get(POPULATED_FOR) == name):
            await self._adopt_populated(dv, pvc)
            return None
        if pvc is None:
            if kind == "pvc" and not dvc.requested_size(dv) and self._clone_source(dv) is None:
                # A clone without a size takes its source's, which is not there yet: wait for it.
                return Result(requeue_after=5.0)
            pvc = await self._create_claim(dv)
            if pvc is None:
                return None
        elif not _owned_by(pvc, dv):
            await self._status(dv, "Failed", pvc, None, f"PVC {name} already exists and is not owned by the DataVolume")
            return None
        pod = self.pods.get(f"{namespace}/{dvc.pod_name(dv, name)}")
        current = (dv.get("status") or {}).get("phase")
        if current in ("Succeeded", "Failed"):
            # Final: a status recomputed now would lose why it failed (the fatal ChecksumError condition, say).
            return None
        result = await self._drive_pod(dv, pvc, pod)
        if result is not None:
            return result
        phase = dvc.dv_phase(dv, pvc, pod)
        importing = pod is not None and phase not in ("Succeeded", "Failed")
        progress, failure = None, ""
        if pod is not None:
            # Also once the importer has ended: its last lines say why (a checksum mismatch is fatal), and the pod
            # may have gone from Running to Failed between two polls.
            progress, failure, pvc = await self._importer_report(dv, pvc, pod)
            phase = dvc.dv_phase(dv, pvc, pod)
            if dvc.is_cross_namespace_clone(dv) and phase not in ("Succeeded", "Failed"):
                await self._ensure_clone_source(dv, pvc)
        if import_progress.CHECKSUM_MISMATCH in failure:
            # CDI's one fatal import error: no more attempts, the DataVolume fails.
            await self._annotate(pvc, {dvc.FATAL_ERROR: "true"})
            await self._delete_importer(namespace, name)
            await self._status(dv, "Failed", pvc, None, failure, reason="ChecksumError")
            return None
        await self._status(dv, phase, pvc, pod, progress=progress, failure=failure)
        return Result(requeue_after=PROGRESS_POLL_SECONDS) if importing else None

    async def _adopt_populated(self, dv: Object, pvc: Object) -> None:
        """Own a claim populated for this DataVolume and call it Succeeded, as CDI does for `populatedFor`."""
        if not _owned_by(pvc, dv):
            meta = dv["metadata"]
            reference = {
                "apiVersion": dv.get("apiVersion", "cdi.kubevirt.io/v1beta1"),
                "kind": "DataVolume",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
            # A claim has one controller: a restore's claim of a VM that existed came owned by the VM.
            others = [r for r in pvc["metadata"].get("ownerReferences") or [] if not r.get("controller")]
            pvc = await self.client.patch(
                PERSISTENT_VOLUME_CLAIMS,
                pvc["metadata"]["name"],
                {"metadata": {"ownerReferences": [*others, reference]}},
                pvc["metadata"]["namespace"],
            )
            log.info("adopted a populated claim", extra={"namespace": meta.get("namespace"), "name": meta["name"]})
        if (pvc.get("status") or {}).get("phase") == "Bound":
            await self._status(dv, "Succeeded", pvc, None)
            return
        # Filled already, so only its binding is awaited: a WaitForFirstConsumer claim waits for the VM's pod.
        class_name = (pvc.get("spec") or {}).get("storageClassName")
        try:
            storage_class = await self.client.get(STORAGE_CLASSES, str(class_name)) if class_name else {}
        except NotFound:
            storage_class = {}
        waits = storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"
        await self._status(dv, "WaitForFirstConsumer" if waits else "Pending", pvc, None)

    async def _importer_report(self, dv: Object, pvc: Object, pod: Object | None) -> tuple[str | None, str, Object]:
        """Progress and the last failed attempt's message, from the tail of the importer's log; an upload server's
        address, recorded on the claim with CDI's pod.ready (the upload proxy waits for it)."""
        if pod is None:
            return None, "", pvc
        text = await pod_log_tail(self.client, pod["metadata"]["namespace"], pod["metadata"]["name"], LOG_TAIL_LINES)
        if text is None:
            return None, "", pvc
        uid = str(dv["metadata"].get("uid", ""))
        if dvc.takes_upload(dv):
            pvc = await self._record_upload_server(dv, pvc, pod, text)
        failure = import_progress.failure_from_log(text) or ""
        if not failure and dvc.is_cross_namespace_clone(dv):
            # The upload server waits; why nothing arrives is in the source pod's log (a claim never populated).
            failure = await self._clone_source_failure(dv, pvc)
        return import_progress.progress_from_log(text, uid), failure, pvc

    async def _clone_source_failure(self, dv: Object, pvc: Object) -> str:
        namespace = dvc.clone_namespace(dv)
        name = dvc.clone_source_pod_name(pvc)
        source_pod = self.pods.get(f"{namespace}/{name}")
        if source_pod is None or not _has_failed(source_pod):
            return ""  # read on every progress poll: its log only once it has something to say
        text = await pod_log_tail(self.client, namespace, name, LOG_TAIL_LINES)
        return import_progress.failure_from_log(text or "") or ""

    async def _record_upload_server(self, dv: Object, pvc: Object, pod: Object, log_text: str) -> Object:
        """The claim with pod.ready and the server's address as the upload server's log tells them."""
        annotations = pvc["metadata"].get("annotations") or {}
        wanted = dvc.upload_server_annotations(annotations, pod, log_text)
        if all(annotations.get(k) == v for k, v in wanted.items()):
            return pvc
        await self._annotate(pvc, wanted)
        if wanted[dvc.UPLOAD_URL] and dvc.source_kind(dv) == "upload":
            self.recorder.event(dv, NORMAL, "UploadReady", f"Upload into {pvc['metadata']['name']} ready")
        updated = copy_json(pvc)
        updated["metadata"]["annotations"] = {**annotations, **wanted}
        return updated

    async def _create_claim(self, dv: Object) -> Object | None:
        source_request = ""
        if dvc.source_kind(dv) == "pvc":
            source = self.claims.get(f"{dvc.clone_namespace(dv)}/{dv['spec']['source']['pvc'].get('name', '')}") or {}
            source_request = str(
                (((source.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage") or ""
            )
        try:
            claim = dvc.new_claim(dv, source_request)
        except dvc.ClaimSpecError as exc:
            self.recorder.event(dv, WARNING, "ErrClaimNotValid", str(exc))
            await self._status(dv, "Pending", None, None, str(exc))
            return None
        try:
            created = await self.client.create(PERSISTENT_VOLUME_CLAIMS, claim)
        except AlreadyExists:
            return None  # the claim's informer event brings us back
        await self._status(dv, "Pending", created, None)
        return created

    async def _drive_pod(self, dv: Object, pvc: Object, pod: Object | None) -> Result | None:
        """Create the importer pod while there is work; record and clean up once it succeeded."""
        meta = pvc["metadata"]
        name = str(meta["name"])
        annotations = meta.get("annotations") or {}
        if pod is None:
            if annotations.get(dvc.POD_PHASE) == "Succeeded":
                return None
            source_claim = self._clone_source(dv)
            if source_claim is None:
                return Result(requeue_after=5.0)
            upload = dvc.source_kind(dv) == "upload"
            if dvc.takes_upload(dv):
                body = dvc.upload_pod(pvc, dv)
            else:
                body = dvc.importer_pod(pvc, dv, source_claim)
            try:
                await self.client.create(PODS, body)
            except AlreadyExists:
                return None
            event = "CloneScheduled" if source_claim else "UploadScheduled" if upload else "ImportScheduled"
            what = "Cloning" if source_claim else "Upload" if upload else "Import"
            if dvc.is_cross_namespace_clone(dv):
                what = f"Cloning from {dvc.clone_namespace(dv)}/{source_claim}"
            self.recorder.event(dv, NORMAL, event, f"{what} into {name} scheduled")
            await self._annotate(pvc, {dvc.IMPORT_POD_NAME: body["metadata"]["name"], dvc.POD_PHASE: "Pending"})
            return None
        phase = str((pod.get("status") or {}).get("phase") or "")
        restarts = max(
            [int(s.get("restartCount") or 0) for s in (pod.get("status") or {}).get("containerStatuses") or []] or [0]
        )
        wanted = {
            dvc.POD_PHASE: phase,
            dvc.POD_RESTARTS: str(max(restarts, int(annotations.get(dvc.POD_RESTARTS) or 0))),
        }
        if any(annotations.get(k) != v for k, v in wanted.items()):
            await self._annotate(pvc, wanted)
        if phase == "Succeeded":
            if dvc.source_kind(dv) == "upload":
                self.recorder.event(dv, NORMAL, "UploadSucceeded", f"Successfully uploaded into {name}")
            elif dvc.is_cross_namespace_clone(dv):
                source = f"{dvc.clone_namespace(dv)}/{dv['spec']['source']['pvc'].get('name', '')}"
                target = f"{meta['namespace']}/{name}"
                self.recorder.event(dv, NORMAL, "CloneSucceeded", f"Successfully cloned from {source} into {target}")
                await self._delete_clone_sources(target)
            else:
                self.recorder.event(pvc, NORMAL, "ImportSucceeded", "Import Successful")
                self.recorder.event(dv, NORMAL, "ImportSucceeded", f"Successfully imported into PVC {name}")
            await self._delete_importer(str(meta["namespace"]), name)
        return None

    async def _delete_importer(self, namespace: str, claim: str) -> None:
        for pod in (f"importer-{claim}", f"cdi-upload-{claim}"):
            if self.pods.get(f"{namespace}/{pod}") is None:
                continue
            try:
                await self.client.delete(PODS, pod, namespace)
            except NotFound:
                pass

    async def _ensure_clone_source(self, dv: Object, pvc: Object) -> None:
        """Once the target's upload server has said where it listens, the source pod that sends it the source."""
        url = ((pvc.get("metadata") or {}).get("annotations") or {}).get(dvc.UPLOAD_URL)
        source_key = f"{dvc.clone_namespace(dv)}/{dv['spec']['source']['pvc'].get('name', '')}"
        source = self.claims.get(source_key)
        if not url or source is None:
            return
        name = dvc.clone_source_pod_name(pvc)
        existing = self.pods.get(f"{source['metadata']['namespace']}/{name}")
        if existing is not None:
            if dvc.upload_url_of(existing) not in ("", dvc.upload_endpoint(url)):
                # The upload server restarted on another port: a source pod sending to the old one never gets
                # through. Deleted; its deletion event brings the DataVolume back to make a new one.
                with contextlib.suppress(NotFound):
                    await self.client.delete(PODS, name, str(source["metadata"]["namespace"]))
            return
        try:
            await self.client.create(PODS, dvc.clone_source_pod(pvc, dv, source, url))
        except AlreadyExists:
            return
        log.info("DataVolume %s: clone source pod created in %s", object_key(dv), source["metadata"]["namespace"])

    async def _delete_clone_sources(self, target: str) -> None:
        """The source pods working for the claim `target` (namespace/name), wherever they run."""
        for pod in self.pods.items():
            meta = pod.get("metadata") or {}
            if (meta.get("annotations") or {}).get(dvc.CLONE_OWNER_REF) != target:
                continue
            if (meta.get("labels") or {}).get(dvc.CDI_LABEL) != "cdi-clone-source":
                continue
            try:
                await self.client.delete(PODS, str(meta["name"]), str(meta["namespace"]))
            except NotFound:
                pass

    def _clone_source(self, dv: Object) -> str | None:
        """The source claim of a clone ("" for other sources); None while it does not exist (the clone waits)."""
        if dvc.source_kind(dv) != "pvc":
            return ""
        source = dv["spec"]["source"]["pvc"]
        namespace = dvc.clone_namespace(dv)
        if self.claims.get(f"{namespace}/{source.get('name')}") is None:
            target = dv["metadata"]["name"]
            message = (
                f"Source PVC {source.get('name')} not available: Target PVC {target} will remain unpopulated until "
                "source is created"
            )
            self.recorder.event(dv, WARNING, "SourcePVCNotAvailabe", message)
            return None
        return str(source.get("name"))

    async def _annotate(self, pvc: Object, annotations: dict[str, str]) -> None:
        meta = pvc["metadata"]
        patch = {"metadata": {"annotations": annotations}}
        try:
            await self.client.patch(PERSISTENT_VOLUME_CLAIMS, str(meta["name"]), patch, str(meta["namespace"]))
        except NotFound:
            return

    async def _status(
        self,
        dv: Object,
        phase: str,
        pvc: Object | None,
        pod: Object | None,
        message: str = "",
        *,
        progress: str | None = None,
        failure: str = "",
        reason: str = "Error",
    ) -> None:
        old = dv.get("status") or {}
        name = str(dv["metadata"]["name"])
        annotations = ((pvc or {}).get("metadata") or {}).get("annotations") or {}
        sender_failed = dvc.is_cross_namespace_clone(dv) and bool(failure)
        conditions = dvc.dv_conditions(name, phase, pvc, pod, failure, sender_failed=sender_failed)
        status: dict[str, Any] = {
            "phase": phase,
            "progress": "100.0%" if phase == "Succeeded" else progress or old.get("progress") or "N/A",
            "restartCount": int(annotations.get(dvc.POD_RESTARTS) or old.get("restartCount") or 0),
            "conditions": _merge_conditions(old.get("conditions") or [], conditions),
        }
        if pvc is not None:
            status["claimName"] = pvc["metadata"]["name"]
        if message and phase == "Failed":
            status["conditions"] = _merge_conditions(
                status["conditions"], [{"type": "Running", "status": "False", "reason": reason, "message": message}]
            )
        if all(old.get(k) == v for k, v in status.items()):
            return
        if phase != old.get("phase"):
            log.info("DataVolume %s: %s", object_key(dv), phase)
            if phase == "Failed" and message:
                self.recorder.event(dv, WARNING, "Failed", message)
        body = copy_json(dv)
        if body["spec"].get("sourceRef"):
            # The source resolved from the DataSource is the controller's own; the DataVolume keeps only its sourceRef.
            body["spec"].pop("source", None)
        body["status"] = dict(old, **status)
        try:
            await self.client.update_status(DATA_VOLUMES, body)
        except (NotFound, Conflict):
            # A newer DataVolume is on its way through the informer; its event (or the progress poll) comes back.
            return


def _has_failed(pod: Object) -> bool:
    """Whether a container of the pod has ended in failure at least once (its log then says why)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = [(status.get(key) or {}).get("terminated") or {} for key in ("state", "lastState")]
        if int(status.get("restartCount") or 0) > 0 or any(int(t.get("exitCode") or 0) != 0 for t in ended):
            return True
    return False


def _owned_by(pvc: Object, dv: Object) -> bool:
    uid = dv["metadata"].get("uid")
    refs = pvc["metadata"].get("ownerReferences") or []
    annotations = pvc["metadata"].get("annotations") or {}
    return any(r.get("uid") == uid for r in refs) or annotations.get(dvc.CREATED_FOR) == uid


def _merge_conditions(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep lastTransitionTime while a condition's status stays; heartbeats are not written (no churn)."""
    by_type = {c.get("type"): c for c in old}
    now = now_rfc3339()
    merged = []
    for condition in new:
        before = by_type.get(condition["type"]) or {}
        same = {k: before.get(k) for k in condition} == condition
        if same:
            merged.append(before)
            continue
        transition = before.get("lastTransitionTime") if before.get("status") == condition["status"] else now
        merged.append({**condition, "lastTransitionTime": transition, "lastHeartbeatTime": now})
    return merged
