"""virt-controller's VirtualMachineExport controller (KubeVirt's pkg/storage/export/export): an exporter pod serving
the source's claims while no one else uses them, its Service and token Secret, and the export's status and links.

The embedded cluster's exporter pods have no Service network: the server listens on the node's loopback and logs
its address, which this controller records on the pod for the API server's export proxy (the external link).
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pykubevirt.api import backend_storage as bs
from pykubevirt.api import export_names as names
from pykubevirt.api.constants import VM_EXPORT_KIND
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import format_time
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, Result, controller_owner_key, owner_keys
from pykubevirt.client.errors import AlreadyExists, ApiError, Conflict, NotFound
from pykubevirt.client.events import NORMAL, WARNING, EventRecorder
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.pod_logs import pod_log_tail
from pykubevirt.client.resources import (
    CONFIG_MAPS,
    PERSISTENT_VOLUME_CLAIMS,
    PODS,
    SECRETS,
    SERVICES,
    VM_EXPORTS,
    VM_SNAPSHOT_CONTENTS,
    VM_SNAPSHOTS,
    VOLUME_SNAPSHOTS,
)
from pykubevirt.controller import vm_export_plan as plan
from pykubevirt.controller.backend_storage import claim_owner_keys, index_claim_owners, vm_claim
from pykubevirt.controller.snapshot_controllers import served
from pykubevirt.controller.vm_restore_plan import snapshot_claim
from pykubevirt.controller.volume_status import CLAIMS_INDEX, claim_names

log = logging.getLogger("pykubevirt.controller.export")

# KubeVirt's requeueTime while a source is busy or not populated.
REQUEUE_SECONDS: Final = 3.0
# How soon to look for the server's address again once its pod runs.
ADDRESS_POLL_SECONDS: Final = 0.5
LISTENING = re.compile(r"Export server listening on (http://\S+)")
CLAIM_INDEX: Final = "export-claims"
EXPAND_PATH: Final = "/apis/subresources.kubevirt.io/v1"
VM_INDEX: Final = "export-vms"
FINAL_PHASES: Final = ("Succeeded", "Failed")


def source_claim_keys(export: Object) -> list[str]:
    """The claim an export of a PersistentVolumeClaim serves, as `namespace/name`."""
    if plan.source_kind(export) != "PersistentVolumeClaim":
        return []
    return [f"{export['metadata'].get('namespace')}/{export['spec']['source'].get('name')}"]


def source_vm_keys(export: Object) -> list[str]:
    """The VM an export of a VirtualMachine serves, as `namespace/name`."""
    if plan.source_kind(export) != "VirtualMachine":
        return []
    return [f"{export['metadata'].get('namespace')}/{export['spec']['source'].get('name')}"]


@dataclass(frozen=True, slots=True)
class ExternalLinks:
    """Where users reach exports (the API server's export proxy) and the CA of its certificate."""

    host: str
    ca: str


class VMExportController:
    """Reconciles VirtualMachineExports (keys `namespace/name`)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        exports: Informer,
        exporter_pods: Informer,
        pvcs: Informer,
        vms: Informer,
        vmis: Informer,
        data_volumes: Informer,
        recorder: EventRecorder,
        external: ExternalLinks | None,
    ) -> None:
        self.client = client
        self.exports = exports  # with CLAIM_INDEX and VM_INDEX
        self.exporter_pods = exporter_pods
        self.pvcs = pvcs
        self.vms = vms
        self.vmis = vmis  # with the VMI controller's claims index
        self.data_volumes = data_volumes
        self.recorder = recorder
        self.external = external

    # ------------------------------------------------------------------------------------------------ sources

    def _populated(self, claim: Object) -> bool:
        """cdiv1.IsPopulated: a claim a DataVolume fills is populated once the DataVolume succeeded."""
        meta = claim["metadata"]
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == "DataVolume"), None)
        if owner is None or not owner.get("controller"):
            return True
        dv = self.data_volumes.get(f"{meta.get('namespace')}/{owner.get('name')}")
        return dv is not None and (dv.get("status") or {}).get("phase") == "Succeeded"

    def _data_volume_of(self, claim: Mapping[str, Any]) -> Object | None:
        meta = claim["metadata"]
        return self.data_volumes.get(f"{meta.get('namespace')}/{meta.get('name')}")

    def _vmi_uses(self, claim: Object) -> bool:
        """A VMI that has not ended names the claim (its launcher mounts it, or will)."""
        vmis = self.vmis.by_index(CLAIMS_INDEX, object_key(claim))
        return any((v.get("status") or {}).get("phase") not in FINAL_PHASES for v in vmis)

    async def _pod_uses(self, claim: Object, export_uid: str) -> bool:
        """A pod other than the export's own mounts the claim (an importer, a user's pod)."""
        meta = claim["metadata"]
        pods = await self.client.list(PODS, str(meta.get("namespace")))
        for pod in pods.get("items") or []:
            if (pod.get("status") or {}).get("phase") in FINAL_PHASES:
                continue
            if any(r.get("uid") == export_uid for r in pod["metadata"].get("ownerReferences") or []):
                continue
            volumes = (pod.get("spec") or {}).get("volumes") or []
            if any((v.get("persistentVolumeClaim") or {}).get("claimName") == meta.get("name") for v in volumes):
                return True
        return False

    def _vm_claims(self, vm: Object) -> tuple[list[Object], bool]:
        """The VM's claims in the cache, and whether all are populated (a DataVolume's claim not yet made is not)."""
        namespace = vm["metadata"].get("namespace")
        template = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        claims: list[Object] = []
        all_populated = True
        for claim_name in claim_names({"spec": template}):
            claim = self.pvcs.get(f"{namespace}/{claim_name}")
            if claim is None:
                all_populated = all_populated and not _is_data_volume(template, claim_name)
                continue
            claims.append(claim)
            all_populated = all_populated and self._populated(claim)
        return claims, all_populated

    async def _source(self, export: Object, pod: Object | None) -> plan.Source:
        meta, source = export["metadata"], export["spec"]["source"]
        namespace, name = str(meta["namespace"]), str(source.get("name", ""))
        kind = plan.source_kind(export)
        if kind == "PersistentVolumeClaim":
            claim = self.pvcs.get(f"{namespace}/{name}")
            populated = claim is not None and self._populated(claim)
            in_use = claim is not None and populated and await self._in_use(claim, str(meta.get("uid")), pod)
            return plan.claim_source(namespace, name, claim, populated, in_use)
        if kind == "VirtualMachine":
            vm = self.vms.get(f"{namespace}/{name}")
            claims, all_populated = self._vm_claims(vm) if vm is not None else ([], True)
            backend = None
            if vm is not None and bs.vm_needs(vm):
                # Served with the disks (GetVolumes WithAllVolumes). A VM that never started has none yet, and
                # upstream then lists no volume at all (ErrNoBackendPVC): the export says "has no volumes".
                backend = vm_claim(self.pvcs, vm)
                claims = claims if backend is not None else []
            vmi = self.vmis.get(f"{namespace}/{name}")
            running = vmi is not None and (vmi.get("status") or {}).get("phase") not in FINAL_PHASES
            return plan.vm_source(namespace, name, vm, claims, all_populated, running, backend)
        if kind == "VirtualMachineSnapshot":
            return await self._snapshot_source(export, namespace, name)
        message = f"{source.get('kind')} exports are not served by this cluster"
        return plan.Source(ready=plan.ready_condition("False", plan.UNKNOWN, message))

    async def _snapshot_source(self, export: Object, namespace: str, name: str) -> plan.Source:
        snapshot = await self.client.get_or_none(VM_SNAPSHOTS, name, namespace)
        if snapshot is None or not (snapshot.get("status") or {}).get("readyToUse"):
            return plan.snapshot_source(namespace, name, snapshot, [], 0)
        content_name = (snapshot.get("status") or {}).get("virtualMachineSnapshotContentName")
        content = (
            await self.client.get_or_none(VM_SNAPSHOT_CONTENTS, str(content_name), namespace) if content_name else None
        )
        claims: list[Object] = []
        total = 0
        if content is not None:
            total = len((content.get("status") or {}).get("volumeSnapshotStatus") or [])
            source_vm = ((content.get("spec") or {}).get("source") or {}).get("virtualMachine") or {}
            for backup in (content.get("spec") or {}).get("volumeBackups") or []:
                claim = await self._restored_claim(export, backup, source_vm)
                if claim is not None:
                    claims.append(claim)
        source = plan.snapshot_source(namespace, name, snapshot, claims, total)
        source.volume_prefix = f"{_name(export)}-"
        # The manifests are the live VM's, as KubeVirt's (the snapshot's own VM is not served as a manifest).
        vm = self.vms.get(f"{namespace}/{source.vm_name}") if source.vm_name else None
        if vm is not None:
            source.vm, source.vm_claims = vm, list(self._vm_claims(vm)[0])
        return source

    async def _restored_claim(self, export: Object, backup: Object, source_vm: Object) -> Object | None:
        """getOrCreatePVCFromSnapshot: `<export>-<claim>`, restored from the backup's VolumeSnapshot, owned by the
        export; marked as a disk image when the VM used it as a disk's claim or DataVolume."""
        namespace = str(export["metadata"]["namespace"])
        claim_name = str(((backup.get("persistentVolumeClaim") or {}).get("metadata") or {}).get("name", ""))
        name = f"{_name(export)}-{claim_name}"
        cached = self.pvcs.get(f"{namespace}/{name}")
        if cached is not None or not backup.get("volumeSnapshotName"):
            return cached
        volume_snapshot = await self.client.get_or_none(VOLUME_SNAPSHOTS, str(backup["volumeSnapshotName"]), namespace)
        if volume_snapshot is None:
            return None
        body = snapshot_claim(name, namespace, backup, volume_snapshot)
        template = ((source_vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        for volume in template.get("volumes") or []:
            if volume.get("name") == backup.get("volumeName") and (
                volume.get("dataVolume") or volume.get("persistentVolumeClaim")
            ):
                body["metadata"]["annotations"][plan.CONTENT_TYPE] = "kubevirt"
        body["metadata"]["ownerReferences"] = [plan.owner_reference(export)]
        try:
            return await self.client.create(PERSISTENT_VOLUME_CLAIMS, body, namespace)
        except AlreadyExists:
            return await self.client.get_or_none(PERSISTENT_VOLUME_CLAIMS, name, namespace)

    async def _in_use(self, claim: Object, export_uid: str, pod: Object | None) -> bool:
        """Whether another takes the claim: a running exporter yields it only to a VMI; before one is made, any pod
        that mounts it (listed then, as the pods informer here holds launchers only) keeps it waiting too."""
        if self._vmi_uses(claim):
            return True
        return pod is None and await self._pod_uses(claim, export_uid)

    # ------------------------------------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result | None:
        export = self.exports.get(key)
        if export is None or export["metadata"].get("deletionTimestamp"):
            return None  # its pod, Service, Secret and ConfigMap are owned by it: the garbage collector takes them
        now = datetime.now(UTC)
        expires = plan.expiration(export)
        if expires is not None and now >= expires:
            log.info("export %s: TTL expired, deleting it", key)
            with contextlib.suppress(NotFound):
                await self.client.delete(VM_EXPORTS, export["metadata"]["name"], export["metadata"]["namespace"])
            return None
        status = copy_json(export.get("status") or {})
        stamp = format_time(now)
        if not status:
            status = {
                "phase": "Pending",
                "conditions": plan.set_condition([], plan.ready_condition("False", plan.INITIALIZING), stamp),
            }
            if expires is not None:
                status["ttlExpirationTime"] = format_time(expires)
        pod = self.exporter_pods.get(f"{export['metadata']['namespace']}/{names.exporter_pod_name(_name(export))}")
        if pod is not None and not _owned_by(pod, export):
            log.warning("export %s: pod %s is not controlled by it", key, pod["metadata"]["name"])
            return None
        source = await self._source(export, pod)
        if not status.get("serviceName"):
            await self._create_service(export)
        status["serviceName"] = names.service_name(_name(export))
        await self._token(export, status, source)
        pod = await self._manage_pod(export, status, source, pod, now)
        server_url = await self._server_url(pod)
        self._update_status(export, status, source, pod, server_url, stamp)
        if status != (export.get("status") or {}):
            await self._write_status(export, status)
        return self._requeue(source, pod, server_url, expires, now)

    def _requeue(
        self, source: plan.Source, pod: Object | None, server_url: str, expires: datetime | None, now: datetime
    ) -> Result | None:
        delays = []
        if source.has_content and not source.available:
            delays.append(REQUEUE_SECONDS)
        elif source.vm_name is not None and not source.populated and source.ready.reason != plan.VM_NOT_FOUND:
            delays.append(REQUEUE_SECONDS)
        if pod is not None and (pod.get("status") or {}).get("phase") == "Running" and not server_url:
            delays.append(ADDRESS_POLL_SECONDS)
        if expires is not None:
            delays.append(max((expires - now).total_seconds(), 0.0) + 0.5)
        return Result(requeue_after=min(delays)) if delays else None

    async def _create_service(self, export: Object) -> None:
        body = plan.service(export)
        try:
            await self.client.create(SERVICES, body)
        except AlreadyExists:
            return
        meta = body["metadata"]
        self.recorder.event(export, NORMAL, "ServiceCreated", f"Created service {meta['namespace']}/{meta['name']}")

    async def _token(self, export: Object, status: dict[str, Any], source: plan.Source) -> None:
        """handleVMExportToken: the user's Secret, or one made for the export once there is something to serve."""
        given = export["spec"].get("tokenSecretRef")
        if given:
            status["tokenSecretRef"] = given
            return
        if not source.available or not source.has_content or status.get("tokenSecretRef"):
            return
        body = plan.token_secret(export, secrets.token_urlsafe(32)[:32])
        status["tokenSecretRef"] = body["metadata"]["name"]
        try:
            await self.client.create(SECRETS, body)
        except AlreadyExists:
            return
        meta = body["metadata"]
        self.recorder.event(
            export, NORMAL, "SecretCreated", f"Created default secret {meta['namespace']}/{meta['name']}"
        )

    async def _manage_pod(
        self, export: Object, status: dict[str, Any], source: plan.Source, pod: Object | None, now: datetime
    ) -> Object | None:
        if pod is None:
            if source.available and source.has_content:
                pod = await self._create_pod(export, status, source, now)
            return pod
        if pod["metadata"].get("deletionTimestamp"):
            return pod
        if not source.available:
            # The source went back to a guest: stop serving it (the export resumes once it is free again).
            await self._delete_pod(export, pod, "ExportPaused", source.ready.message)
            return None
        phase = (pod.get("status") or {}).get("phase")
        if phase in FINAL_PHASES:
            meta = pod["metadata"]
            message = f"Exporter pod {meta['namespace']}/{meta['name']} is in phase {phase}"
            await self._delete_pod(export, pod, "ExporterPodFailedOrCompleted", message)
        return pod

    async def _create_pod(
        self, export: Object, status: dict[str, Any], source: plan.Source, now: datetime
    ) -> Object | None:
        expires = plan.expiration(export) or now + timedelta(seconds=plan.ttl_seconds(export))
        config_map = ""
        if source.vm is not None:
            config_map = await self._manifests(export, source)
        disk_images = [plan.holds_disk_image(c, self._data_volume_of(c)) for c in source.claims]
        body = plan.exporter_pod(
            export, source, disk_images, str(status.get("tokenSecretRef") or ""), expires, config_map
        )
        meta = body["metadata"]
        try:
            created = await self.client.create(PODS, body)
        except AlreadyExists:
            return None  # its informer event brings us back
        log.info("export %s/%s: exporter pod %s created", meta["namespace"], _name(export), meta["name"])
        self.recorder.event(
            export, NORMAL, "ExporterPodCreated", f"Created exporter pod {meta['namespace']}/{meta['name']}"
        )
        return created

    async def _expanded(self, vm: Mapping[str, Any]) -> Mapping[str, Any]:
        """The VM with its instancetype and preference applied, from virt-api's expand-spec (KubeVirt's Expand), so
        the manifest stands without them; the VM as it is when virt-api cannot expand it."""
        spec = vm.get("spec") or {}
        if not spec.get("instancetype") and not spec.get("preference"):
            return vm
        meta = vm.get("metadata") or {}
        path = f"{EXPAND_PATH}/namespaces/{meta.get('namespace')}/virtualmachines/{meta.get('name')}/expand-spec"
        try:
            expanded: Mapping[str, Any] = await self.client.request("GET", path)
        except (ApiError, OSError) as exc:
            log.warning(
                "export of VM %s/%s: its instancetype is not expanded: %s", meta.get("namespace"), meta.get("name"), exc
            )
            return vm
        return expanded

    async def _manifests(self, export: Object, source: plan.Source) -> str:
        assert source.vm is not None
        vm_manifest, data_volumes = vm_definition(await self._expanded(source.vm), source.vm_claims)
        host, ca = (self.external.host, self.external.ca) if self.external else ("", "")
        body = plan.manifest_config_map(export, vm_manifest, data_volumes, host, ca)
        meta = body["metadata"]
        try:
            await self.client.create(CONFIG_MAPS, body)
        except AlreadyExists:
            return str(meta["name"])
        self.recorder.event(
            export, NORMAL, "DataManifestCreated", f"Created exporter data manifest {meta['namespace']}/{meta['name']}"
        )
        return str(meta["name"])

    async def _delete_pod(self, export: Object, pod: Object, reason: str, message: str) -> None:
        self.recorder.event(export, WARNING, reason, message)
        with contextlib.suppress(NotFound):
            await self.client.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])

    async def _server_url(self, pod: Object | None) -> str:
        """The server's address: recorded on the pod, else read from its log once it runs (then recorded)."""
        if (
            pod is None
            or (pod.get("status") or {}).get("phase") != "Running"
            or pod["metadata"].get("deletionTimestamp")
        ):
            return ""
        meta = pod["metadata"]
        recorded = str((meta.get("annotations") or {}).get(names.SERVER_URL_ANNOTATION) or "")
        if recorded:
            return recorded
        found = LISTENING.findall(await pod_log_tail(self.client, meta["namespace"], meta["name"], 20) or "")
        if not found:
            return ""
        patch = {"metadata": {"annotations": {names.SERVER_URL_ANNOTATION: found[-1]}}}
        try:
            await self.client.patch(PODS, meta["name"], patch, meta["namespace"])
        except NotFound:
            return ""
        return str(found[-1])

    def _update_status(
        self,
        export: Object,
        status: dict[str, Any],
        source: plan.Source,
        pod: Object | None,
        server_url: str,
        stamp: str,
    ) -> None:
        conditions = list(status.get("conditions") or [])
        if pod is None:
            phase, ready = "Pending", source.ready
        else:
            phase, ready = plan.pod_state(pod, server_url)
        status["links"] = {}
        if phase == "Ready" and pod is not None and self.external is not None:
            base = plan.external_base(self.external.host, export)
            status["links"]["external"] = plan.links(pod, base, self.external.ca, source.volume_prefix)
        conditions = plan.set_condition(conditions, ready, stamp)
        if source.claim_condition is not None:
            conditions = plan.set_condition(conditions, source.claim_condition, stamp)
        status["conditions"] = conditions
        if source.vm_name is not None:
            status["virtualMachineName"] = source.vm_name
        if source.skipped and not source.has_content:
            phase = "Skipped"
        status["phase"] = phase

    async def _write_status(self, export: Object, status: dict[str, Any]) -> None:
        body = dict(export, status=status)
        try:
            written = await self.client.update_status(VM_EXPORTS, body)
        except (Conflict, NotFound):
            return  # a newer version is on its way and brings us back
        self.exports.wrote(written, str(export["metadata"].get("resourceVersion", "")))


def _name(export: Object) -> str:
    return str(export["metadata"]["name"])


def _owned_by(pod: Object, export: Object) -> bool:
    uid = export["metadata"].get("uid")
    return any(r.get("uid") == uid and r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])


def _is_data_volume(template: dict[str, Any], claim_name: str) -> bool:
    return any((v.get("dataVolume") or {}).get("name") == claim_name for v in template.get("volumes") or [])


def vm_definition(
    vm: Mapping[str, Any], claims: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """generateVMDefinitionFromVm and generateDataVolumesFromVm: the VM without status or server-set metadata, its
    DataVolume templates pointed at an http source the server fills in, and a DataVolume for each other claim."""
    meta = vm.get("metadata") or {}
    clean = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    manifest = {k: copy_json(v) for k, v in vm.items() if k not in ("status", "metadata")}
    manifest["metadata"] = clean
    spec = manifest.setdefault("spec", {})
    templates = spec.get("dataVolumeTemplates") or []
    exported = {str(c["metadata"]["name"]) for c in claims}
    for template in templates:
        if (template.get("metadata") or {}).get("name") in exported:
            template_spec = template.setdefault("spec", {})
            template_spec["source"] = {"http": {"url": ""}}
            template_spec.pop("sourceRef", None)
    in_templates = {(t.get("metadata") or {}).get("name") for t in templates}
    data_volumes = []
    for claim in claims:
        claim_meta, claim_spec = claim["metadata"], claim.get("spec") or {}
        if claim_meta["name"] in in_templates:
            continue
        storage = {k: claim_spec[k] for k in ("accessModes", "volumeMode", "resources") if claim_spec.get(k)}
        data_volumes.append(
            {
                "apiVersion": "cdi.kubevirt.io/v1beta1",
                "kind": "DataVolume",
                "metadata": {"name": claim_meta["name"], "namespace": claim_meta.get("namespace")},
                "spec": {"source": {"http": {"url": ""}}, "storage": storage},
            }
        )
    return manifest, data_volumes


async def export_controller(
    client: KubeClient,
    *,
    pvcs: Informer,
    vms: Informer,
    vmis: Informer,
    data_volumes: Informer,
    external: ExternalLinks | None,
) -> tuple[list[Informer], list[Controller]]:
    """The export controller and its own informers, where the cluster serves export.kubevirt.io."""
    if external is None:
        # Cluster mode: no virt-exportserver image and no export proxy are deployed there yet.
        log.info("no export proxy: no export controller")
        return [], []
    if not await served(client, VM_EXPORTS):
        log.info("export.kubevirt.io is not served: no export controller")
        return [], []
    exports = Informer(client, VM_EXPORTS)
    exports.add_indexer(CLAIM_INDEX, source_claim_keys)
    exports.add_indexer(VM_INDEX, source_vm_keys)
    exporter_pods = Informer(client, PODS, label_selector=names.SERVICE_LABEL)
    index_claim_owners(pvcs)
    reconciler = VMExportController(
        client,
        exports=exports,
        exporter_pods=exporter_pods,
        pvcs=pvcs,
        vms=vms,
        vmis=vmis,
        data_volumes=data_volumes,
        recorder=EventRecorder(client, "export-controller"),
        external=external,
    )

    # Every VM, VMI, claim and DataVolume event of virt-controller comes through these: with no export, none looks.
    def of_claim(obj: Object) -> list[str]:
        if not exports.size():
            return []
        key = object_key(obj)
        keys = [object_key(e) for e in exports.by_index(CLAIM_INDEX, key)]
        # The claims an export of a snapshot restored are its own.
        keys += [owner] if (owner := controller_owner_key(obj, VM_EXPORT_KIND)) else []
        for vm in vms.by_index(CLAIMS_INDEX, key):
            keys += [object_key(e) for e in exports.by_index(VM_INDEX, object_key(vm))]
        for vm_key in claim_owner_keys(obj):  # a VM's backend-storage claim
            keys += [object_key(e) for e in exports.by_index(VM_INDEX, vm_key)]
        return keys

    def of_vm(obj: Object) -> list[str]:
        return [object_key(e) for e in exports.by_index(VM_INDEX, object_key(obj))]

    def of_vmi(obj: Object) -> list[str]:
        if not exports.size():
            return []
        namespace = obj["metadata"].get("namespace")
        keys = of_vm(obj)
        for claim in claim_names(obj):
            keys += [object_key(e) for e in exports.by_index(CLAIM_INDEX, f"{namespace}/{claim}")]
        return keys

    controller = Controller("vmexport", reconciler, workers=3)
    controller.watch(exports).watch(exporter_pods, owner_keys(VM_EXPORT_KIND))
    controller.watch(pvcs, of_claim).watch(data_volumes, of_claim).watch(vms, of_vm).watch(vmis, of_vmi)
    return [exports, exporter_pods], [controller]
