"""The volumes of a virt-launcher Pod and the compute container's mounts and devices, as upstream renders them."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

from pykubevirt.api import backend_storage, pod_layout
from pykubevirt.api.json_copy import copy_json

if TYPE_CHECKING:
    from pykubevirt.controller.launcher_pod import LauncherSettings

VIRT_PRIVATE_DIR = "/var/run/kubevirt-private"
VIRT_SHARE_DIR = "/var/run/kubevirt"
PVC_DISK_DIR = VIRT_PRIVATE_DIR + "/vmi-disks"
SECRET_SOURCE_DIR = pod_layout.CONFIG_SOURCE_DIRS["secret"]
SYSPREP_SOURCE_DIR = pod_layout.CONFIG_SOURCE_DIRS["sysprep"]
DOWNWARD_METRIC_DISKS_DIR = VIRT_PRIVATE_DIR + "/downwardmetric-disk"
_CONFIG_SOURCE_DIRS = {kind: pod_layout.CONFIG_SOURCE_DIRS[kind] for kind in ("secret", "configMap", "downwardAPI")}
# The PersistentVolumeClaims the VMI's volumes name, by claim name (None: not looked up, all filesystem claims).
Claims: TypeAlias = Mapping[str, Mapping[str, Any]] | None
_BASE_EMPTY_DIRS = "private public sockets virt-bin-share-dir libvirt-runtime ephemeral-disks container-disks".split()


class LaunchManifestError(ValueError):
    """The VMI cannot be rendered into a launcher pod (the controller reports `failed to render launch manifest`)."""


class PVCNotFoundError(LaunchManifestError):
    """A volume names a PersistentVolumeClaim that does not exist."""


def mount(name: str, path: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "mountPath": path, **extra}


def empty_dir(name: str, **source: Any) -> dict[str, Any]:
    return {"name": name, "emptyDir": dict(source)}


def without_none(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class PodVolumes:
    """The pod volumes, compute mounts and block devices for a VMI, in upstream's order."""

    def __init__(self, settings: LauncherSettings) -> None:
        self.volumes = [empty_dir(name) for name in _BASE_EMPTY_DIRS]
        self.mounts = [
            mount("private", VIRT_PRIVATE_DIR),
            mount("public", VIRT_SHARE_DIR),
            mount("ephemeral-disks", settings.ephemeral_disk_dir),
            mount("libvirt-runtime", "/var/run/libvirt"),
            mount("sockets", posixpath.join(settings.kubevirt_share_dir, "sockets")),
            mount("container-disks", settings.container_disk_dir, mountPropagation="HostToContainer"),
        ]
        self.devices: list[dict[str, Any]] = []
        self.shared_paths: list[str] = []

    def add(self, volume: dict[str, Any], *mounts: dict[str, Any]) -> None:
        self.volumes.append(volume)
        self.mounts.extend(mounts)

    def secret_ref(self, volume_name: str, secret: str, suffix: str, keys: tuple[str, str]) -> None:
        name = f"{volume_name}-{suffix}"
        mounts = [mount(name, f"{SECRET_SOURCE_DIR}/{volume_name}/{key}", subPath=key, readOnly=True) for key in keys]
        self.add({"name": name, "secret": {"secretName": secret}}, *mounts)

    def claim(self, volume_name: str, claim: str, pvcs: Claims) -> None:
        """Mount a filesystem claim under vmi-disks, or pass a block claim as /dev/<volume>."""
        pvc: Mapping[str, Any] = {}
        if pvcs is not None:
            if claim not in pvcs:
                raise PVCNotFoundError(f"didn't find PVC {claim}")
            pvc = pvcs[claim]
        pvc_spec = pvc.get("spec") or {}
        if pvc_spec.get("volumeMode") == "Block":
            self.devices.append({"name": volume_name, "devicePath": f"/dev/{volume_name}"})
            return
        path = f"{PVC_DISK_DIR}/{volume_name}"
        self.mounts.append(mount(volume_name, path))
        if "ReadWriteMany" in (pvc_spec.get("accessModes") or []):
            self.shared_paths.append(path)


def _hotplug_volume_names(spec: Mapping[str, Any], status: Mapping[str, Any]) -> set[str]:
    names = {vs["name"] for vs in status.get("volumeStatus") or [] if vs.get("hotplugVolume") is not None}
    for volume in spec.get("volumes") or []:
        source = volume.get("dataVolume") or volume.get("persistentVolumeClaim") or {}
        if source.get("hotpluggable"):
            names.add(volume["name"])
    return names


def _add_config_volumes(rendered: PodVolumes, volumes: list[dict[str, Any]], disks: list[dict[str, Any]]) -> None:
    """Config volumes are always in the pod but only mounted into compute when a disk uses them."""
    for volume in volumes:
        name = volume["name"]
        if (secret := volume.get("secret")) is not None:
            source = without_none(secretName=secret.get("secretName"), optional=secret.get("optional"))
            rendered.add({"name": name, "secret": source})
        if (config_map := volume.get("configMap")) is not None:
            source = without_none(name=config_map.get("name"), optional=config_map.get("optional"))
            rendered.add({"name": name, "configMap": source})
        if (downward := volume.get("downwardAPI")) is not None:
            rendered.add({"name": name, "downwardAPI": without_none(items=copy_json(downward.get("fields")))})
    by_name = {volume["name"]: volume for volume in volumes}
    for disk in disks:
        volume = by_name.get(disk["name"], {})
        for kind, base in _CONFIG_SOURCE_DIRS.items():
            if volume.get(kind) is not None:
                rendered.mounts.append(mount(disk["name"], f"{base}/{disk['name']}", readOnly=True))


def _pvc_volume(rendered: PodVolumes, name: str, pvc: Mapping[str, Any], pvcs: Claims) -> None:
    rendered.claim(name, pvc["claimName"], pvcs)
    claim = without_none(claimName=pvc["claimName"], readOnly=pvc.get("readOnly") or None)
    rendered.volumes.append({"name": name, "persistentVolumeClaim": claim})


def _ephemeral_volume(rendered: PodVolumes, name: str, ephemeral: Mapping[str, Any], pvcs: Claims) -> None:
    claim_source = ephemeral.get("persistentVolumeClaim") or {}
    rendered.claim(name, claim_source.get("claimName", ""), pvcs)
    rendered.volumes.append({"name": name, "persistentVolumeClaim": copy_json(claim_source)})


def _host_disk_volume(rendered: PodVolumes, name: str, host_disk: Mapping[str, Any], pvcs: Claims) -> None:
    """The disk image's directory from the host, so the launcher can create the image in it (DiskOrCreate)."""
    path_type = {"Disk": "Directory", "DiskOrCreate": "DirectoryOrCreate"}.get(host_disk.get("type", ""), "")
    host_path = {"path": posixpath.dirname(host_disk.get("path", "")), "type": path_type}
    rendered.add({"name": name, "hostPath": host_path}, mount(name, f"{PVC_DISK_DIR}/{name}"))


def _data_volume(rendered: PodVolumes, name: str, data_volume: Mapping[str, Any], pvcs: Claims) -> None:
    rendered.claim(name, data_volume["name"], pvcs)
    rendered.volumes.append({"name": name, "persistentVolumeClaim": {"claimName": data_volume["name"]}})


def _downward_metrics_volume(rendered: PodVolumes, name: str, source: Mapping[str, Any], pvcs: Claims) -> None:
    rendered.add(empty_dir(name, medium="Memory", sizeLimit="1Mi"), mount(name, DOWNWARD_METRIC_DISKS_DIR))


def _sysprep_volume(rendered: PodVolumes, name: str, sysprep: Mapping[str, Any], pvcs: Claims) -> None:
    if sysprep.get("secret") is not None:
        sysprep_volume = {"name": name, "secret": {"secretName": sysprep["secret"].get("name")}}
    elif sysprep.get("configMap") is not None:
        sysprep_volume = {"name": name, "configMap": {"name": sysprep["configMap"].get("name")}}
    else:
        raise LaunchManifestError(f"Sysprep must have Secret or ConfigMap reference set {sysprep}")
    rendered.add(sysprep_volume, mount(name, f"{SYSPREP_SOURCE_DIR}/{name}", readOnly=True))


# The volume sources the pod carries, in upstream's order: a volume has one source, the first match renders it.
_STORAGE_SOURCES: tuple[tuple[str, Callable[[PodVolumes, str, Mapping[str, Any], Claims], None]], ...] = (
    ("persistentVolumeClaim", _pvc_volume),
    ("ephemeral", _ephemeral_volume),
    ("hostDisk", _host_disk_volume),
    ("dataVolume", _data_volume),
    ("downwardMetrics", _downward_metrics_volume),
    ("sysprep", _sysprep_volume),
)


def _add_storage_volume(rendered: PodVolumes, volume: Mapping[str, Any], pvcs: Claims) -> None:
    for key, render in _STORAGE_SOURCES:
        if (source := volume.get(key)) is not None:
            render(rendered, volume["name"], source, pvcs)
            return


def _add_cloud_init_secrets(rendered: PodVolumes, volume: Mapping[str, Any]) -> None:
    """cloud-init user and network data kept in Secrets, mounted for the launcher to put on the ISO."""
    for cloud_init in ("cloudInitNoCloud", "cloudInitConfigDrive"):
        source = volume.get(cloud_init) or {}
        if ref := source.get("userDataSecretRef"):
            rendered.secret_ref(volume["name"], ref["name"], "udata", ("userdata", "userData"))
        if ref := source.get("networkDataSecretRef"):
            rendered.secret_ref(volume["name"], ref["name"], "ndata", ("networkdata", "networkData"))


def _add_access_credentials(rendered: PodVolumes, credentials: list[dict[str, Any]]) -> None:
    """The Secret of each access credential (SSH keys or a password), one per credential."""
    for credential in credentials:
        for kind in ("sshPublicKey", "userPassword"):
            secret = (((credential.get(kind) or {}).get("source") or {}).get("secret") or {}).get("secretName")
            if secret:
                volume_name = f"{secret}-access-cred"
                rendered.add(
                    {"name": volume_name, "secret": {"secretName": secret}},
                    mount(volume_name, f"{SECRET_SOURCE_DIR}/{volume_name}", readOnly=True),
                )
                break


def _add_backend_storage(rendered: PodVolumes, vmi: Mapping[str, Any], claim: str, non_root: bool) -> None:
    """The backend-storage claim, mounted by subPath where libvirt keeps NVRAM and TPM state."""
    volume = backend_storage.POD_VOLUME
    rendered.volumes.append({"name": volume, "persistentVolumeClaim": {"claimName": claim, "readOnly": False}})
    mounts = backend_storage.pod_mounts(vmi, non_root)
    rendered.mounts.append(mount(volume, mounts[0][0], readOnly=False, subPath=mounts[0][1]))
    if non_root:
        # Upstream's emptyDirs for each directory between the private dir and the state, so that they are
        # created writable for the non-root user rather than by the runtime for the subPath mounts below.
        private_libvirt = posixpath.join(VIRT_PRIVATE_DIR, "libvirt")
        rendered.add(empty_dir("private-libvirt"), mount("private-libvirt", private_libvirt))
        rendered.add(
            empty_dir("private-libvirt-qemu"), mount("private-libvirt-qemu", posixpath.join(private_libvirt, "qemu"))
        )
    for path, sub_path in mounts[1:]:
        rendered.mounts.append(mount(volume, path, readOnly=False, subPath=sub_path))


def _add_runtime_dirs(rendered: PodVolumes, domain: Mapping[str, Any], settings: LauncherSettings) -> None:
    """Hugepage mounts when the guest uses hugepages, and the hotplug directory unless hotplug is off."""
    if (domain.get("memory") or {}).get("hugepages") is not None:
        rendered.add(empty_dir("hugepages", medium="HugePages"), mount("hugepages", "/dev/hugepages"))
        rendered.add(
            empty_dir("hugetblfs-dir", medium="HugePages"), mount("hugetblfs-dir", "/dev/hugepages/libvirt/qemu")
        )
    if not (domain.get("devices") or {}).get("disableHotplug"):
        rendered.add(
            empty_dir("hotplug-disks"),
            mount("hotplug-disks", settings.hotplug_disk_dir, mountPropagation="HostToContainer"),
        )


def render_volumes(
    vmi: Mapping[str, Any], settings: LauncherSettings, pvcs: Claims, backend_claim: str = "", non_root: bool = False
) -> PodVolumes:
    """The pod volumes, compute mounts and block devices for a VMI; hotplugged volumes belong to attachment pods.

    `backend_claim` names the VMI's backend-storage claim when it keeps persistent EFI or TPM state.
    """
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") or {}
    volumes = spec.get("volumes") or []
    rendered = PodVolumes(settings)
    _add_config_volumes(rendered, volumes, (domain.get("devices") or {}).get("disks") or [])
    hotplugged = _hotplug_volume_names(spec, vmi.get("status") or {})
    for volume in volumes:
        if volume["name"] not in hotplugged:
            _add_storage_volume(rendered, volume, pvcs)
            _add_cloud_init_secrets(rendered, volume)
    _add_access_credentials(rendered, spec.get("accessCredentials") or [])
    if backend_claim and backend_storage.is_needed(vmi):
        _add_backend_storage(rendered, vmi, backend_claim, non_root)
    _add_runtime_dirs(rendered, domain, settings)
    return rendered
