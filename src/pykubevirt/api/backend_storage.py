"""Backend storage: the claim that keeps a VM's persistent EFI variables and TPM state across launcher pods.

Upstream: pkg/storage/backend-storage/backend-storage.go (PVCForVMI, createPVC, getStorageClass, IsPVCReady,
UpdateVolumeStatus), the pod paths of pkg/util/util.go and withBackendStorage in
pkg/virt-controller/services/rendervolumes.go. Pure functions over plain objects; the VMI controller does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pykubevirt.api import pod_layout
from pykubevirt.api.generated_names import generated_name

# The claim is `persistent-state-for-<vmi>-<random>`, found again through its `persistent-state-for: <vmi>` label.
PVC_PREFIX = "persistent-state-for"
PVC_SIZE = "10Mi"
# The VMI's volumeStatus entry for the claim.
VOLUME_NAME = PVC_PREFIX + "-this-vm"
# The launcher pod's volume, mounted by subPath at each place libvirt keeps state.
POD_VOLUME = "vm-state"
META_MOUNT = "/run/kubevirt-private/backend-storage-meta"
SWTPM_DIR = "/var/lib/libvirt/swtpm"
SWTPM_LOCALCA_DIR = "/var/lib/swtpm-localca"
NVRAM_DIR = "/var/lib/libvirt/qemu/nvram"
# A non-root launcher's libvirt keeps the same state under the private dir.
NON_ROOT_SWTPM_DIR = f"{pod_layout.PRIVATE_DIR}/libvirt/qemu/swtpm"
NON_ROOT_SWTPM_LOCALCA_DIR = f"{pod_layout.PRIVATE_DIR}/var/lib/swtpm-localca"
NON_ROOT_NVRAM_DIR = f"{pod_layout.PRIVATE_DIR}/libvirt/qemu/nvram"
# Lets CDI's PVC-rendering webhook apply the class's StorageProfile (a minimum size, say) to the 10Mi claim.
APPLY_STORAGE_PROFILE_LABEL = "cdi.kubevirt.io/applyStorageProfile"
KUBEVIRT_DEFAULT_CLASS = "storageclass.kubevirt.io/is-default-virt-class"
KUBERNETES_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"

# virt-controller's sync error reasons (pkg/controller/controller.go).
FAILED_CREATE_REASON = "FailedBackendStorageCreate"
FAILED_PROBE_REASON = "FailedBackendStorageProbe"
NOT_READY_REASON = "BackendStorageNotReady"
NO_DEFAULT_CLASS = "no default storage class found"

Obj = Mapping[str, Any]
ObjT = TypeVar("ObjT", bound=Mapping[str, Any])


class BackendStorageError(Exception):
    """The claim cannot be created or used; the message is KubeVirt's."""


def _spec(vmi: Obj) -> Obj:
    return vmi.get("spec") or {}


def has_persistent_tpm(vmi_spec: Obj) -> bool:
    """An enabled TPM with `persistent: true` (tpm.HasPersistentDevice)."""
    tpm = ((vmi_spec.get("domain") or {}).get("devices") or {}).get("tpm")
    return isinstance(tpm, Mapping) and tpm.get("enabled", True) is not False and tpm.get("persistent") is True


def has_persistent_efi(vmi_spec: Obj) -> bool:
    efi = (((vmi_spec.get("domain") or {}).get("firmware") or {}).get("bootloader") or {}).get("efi")
    return isinstance(efi, Mapping) and efi.get("persistent") is True


def is_needed(vmi: Obj) -> bool:
    """IsBackendStorageNeeded for a VMI (changed block tracking, its third user, is not implemented here)."""
    return has_persistent_tpm(_spec(vmi)) or has_persistent_efi(_spec(vmi))


def claim_for(vmi: Obj, claims: Iterable[Obj]) -> Obj | None:
    """PVCForVMI: the live claim labelled for the VMI, else a legacy one named `persistent-state-for-<vmi>`."""
    meta = vmi.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    legacy = None
    for pvc in claims:
        pvc_meta = pvc.get("metadata") or {}
        if pvc_meta.get("namespace") != namespace or pvc_meta.get("deletionTimestamp"):
            continue
        if (pvc_meta.get("labels") or {}).get(PVC_PREFIX) == name:
            return pvc
        if pvc_meta.get("name") == f"{PVC_PREFIX}-{name}":
            legacy = pvc
    return legacy


def vm_needs(vm: Obj) -> bool:
    """IsBackendStorageNeeded for a VM: its template asks for persistent EFI or TPM state."""
    return is_needed({"spec": ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}})


def newest_live_claim(claims: Iterable[ObjT]) -> ObjT | None:
    """The newest claim not being deleted (getNewestNonTerminatingPVC), of those labelled for one VM."""
    live = [pvc for pvc in claims if not (pvc.get("metadata") or {}).get("deletionTimestamp")]
    if not live:
        return None
    # RFC 3339 stamps order as text; the name breaks a tie within a second, where upstream's order is arbitrary.
    return max(live, key=lambda p: (str(p["metadata"].get("creationTimestamp") or ""), str(p["metadata"]["name"])))


def vm_volume_name(vm_name: str) -> str:
    """The name the claim goes by among a VM's volumes in snapshots, restores and exports (BackendPVCVolumeName)."""
    return generated_name(PVC_PREFIX, vm_name)


def vm_volume(vm_name: str, claim_name: str) -> dict[str, Any]:
    """The claim as one of the VM's volumes, as storage utils' GetVolumes WithBackendVolume lists it."""
    return {"name": vm_volume_name(vm_name), "persistentVolumeClaim": {"claimName": claim_name}}


def storage_class(configured: str, classes: Iterable[Obj]) -> str:
    """The KubeVirt CR's vmStateStorageClass, else the KubeVirt default class, else the Kubernetes default one."""
    if configured:
        return configured
    kubevirt_default = kubernetes_default = ""
    # Upstream keeps the last match of its cache's order; names make the choice stable here.
    for sc in sorted(classes, key=lambda sc: str((sc.get("metadata") or {}).get("name") or "")):
        meta = sc.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(KUBEVIRT_DEFAULT_CLASS) == "true":
            kubevirt_default = str(meta.get("name") or "")
        if annotations.get(KUBERNETES_DEFAULT_CLASS) == "true":
            kubernetes_default = str(meta.get("name") or "")
    if not (kubevirt_default or kubernetes_default):
        raise BackendStorageError(NO_DEFAULT_CLASS)
    return kubevirt_default or kubernetes_default


def access_mode(configured: str) -> str:
    """RWX for a class the administrator named, RWO for the cluster's default (no CDI StorageProfiles here)."""
    return "ReadWriteMany" if configured else "ReadWriteOnce"


def render_claim(vmi: Obj, class_name: str, mode: str) -> dict[str, Any]:
    """The claim createPVC makes: owned by the VMI's owner (its VM), else by the VMI, which makes it short-lived."""
    meta = vmi.get("metadata") or {}
    owners = [dict(ref) for ref in meta.get("ownerReferences") or []]
    if not owners:
        owners = [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "generateName": f"{PVC_PREFIX}-{meta.get('name')}-",
            "namespace": meta.get("namespace"),
            "ownerReferences": owners,
            "labels": {PVC_PREFIX: str(meta.get("name")), APPLY_STORAGE_PROFILE_LABEL: "true"},
        },
        "spec": {
            "accessModes": [mode],
            "resources": {"requests": {"storage": PVC_SIZE}},
            "storageClassName": class_name,
            "volumeMode": "Filesystem",
        },
    }


def is_ready(pvc: Obj, classes: Mapping[str, Obj]) -> bool:
    """IsPVCReady: bound, or pending on a WaitForFirstConsumer class (the launcher pod is its consumer).

    Raises BackendStorageError for a lost claim or a class that does not exist (`classes` by name).
    """
    phase = (pvc.get("status") or {}).get("phase") or "Pending"
    if phase == "Bound":
        return True
    if phase == "Lost":
        raise BackendStorageError("backend storage PVC lost")
    class_name = (pvc.get("spec") or {}).get("storageClassName")
    if not class_name:
        raise BackendStorageError("no storage class name")
    sc = classes.get(str(class_name))
    if sc is None:
        raise BackendStorageError(f"storage class {class_name} not found")
    return sc.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER


def volume_status(pvc: Obj) -> dict[str, Any]:
    """The VMI's volumeStatus entry for the claim (UpdateVolumeStatus)."""
    # `target` is never omitted in KubeVirt's JSON; the claim is no disk, so it stays empty.
    return {
        "name": VOLUME_NAME,
        "target": "",
        "persistentVolumeClaimInfo": {
            "claimName": (pvc.get("metadata") or {}).get("name"),
            "accessModes": list((pvc.get("spec") or {}).get("accessModes") or []),
        },
    }


def with_volume_status(statuses: list[dict[str, Any]], pvc: Obj) -> list[dict[str, Any]]:
    """`statuses` with the claim's entry first (where upstream keeps it) and any older entry for it replaced."""
    rest = [s for s in statuses if not str(s.get("name") or "").startswith(PVC_PREFIX)]
    return [volume_status(pvc), *rest]


def current_claim(vmi: Obj) -> tuple[str, list[str]] | None:
    """The claim the VMI runs with and its access modes, from its volumeStatus (CurrentPVCName,
    IsBackendStorageVolume); None before virt-controller recorded it."""
    for entry in (vmi.get("status") or {}).get("volumeStatus") or []:
        info = entry.get("persistentVolumeClaimInfo")
        if str(entry.get("name") or "").startswith(PVC_PREFIX) and info:
            return str(info.get("claimName") or ""), list(info.get("accessModes") or [])
    return None


# KubeVirt's checkVolumesForMigration from April to August 2024 (84ddd7c435 to 4ef8c916ed): a VMI whose backend
# storage is not ReadWriteMany is not live-migratable (DisksNotLiveMigratable). KubeVirt since then creates a new claim
# for the migration target and lets the state travel with the guest; that is not built here (see live_migratable).
NOT_SHARED_MESSAGE = "cannot migrate VMI: Backend storage PVC is not RWX"
NO_CLAIM_MESSAGE = "no backend-storage PVC found in VMI volume status"
SHARED_ACCESS_MODE = "ReadWriteMany"


def claim_not_shared(vmi: Obj) -> bool:
    """The VMI's recorded backend-storage claim is not ReadWriteMany (one a migration target could not share)."""
    current = current_claim(vmi)
    return current is not None and SHARED_ACCESS_MODE not in current[1]


def migration_target_claim(vmi: Obj) -> str:
    """The claim a migration target mounts: the source's own, which is ReadWriteMany (CreatePVCForMigrationTarget's
    RWX case, where source and target PersistentStatePVCName are the same). Raises BackendStorageError otherwise."""
    current = current_claim(vmi)
    if current is None or not current[0]:
        raise BackendStorageError(NO_CLAIM_MESSAGE)
    if SHARED_ACCESS_MODE not in current[1]:
        raise BackendStorageError(NOT_SHARED_MESSAGE)
    return current[0]


def pod_mounts(vmi: Obj, non_root: bool) -> list[tuple[str, str]]:
    """(mountPath, subPath) of the claim in the compute container, as withBackendStorage mounts it."""
    mounts = [(META_MOUNT, "meta")]
    if has_persistent_tpm(_spec(vmi)):
        mounts.append((NON_ROOT_SWTPM_DIR if non_root else SWTPM_DIR, "swtpm"))
        mounts.append((NON_ROOT_SWTPM_LOCALCA_DIR if non_root else SWTPM_LOCALCA_DIR, "swtpm-localca"))
    if has_persistent_efi(_spec(vmi)):
        mounts.append((NON_ROOT_NVRAM_DIR if non_root else NVRAM_DIR, "nvram"))
    return mounts
