"""The volumes of a virt-launcher Pod and the compute container's mounts and devices, as upstream renders them."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pykubevirt.api.json_copy import copy_json

if TYPE_CHECKING:
    from pykubevirt.controller.launcher_pod import LauncherSettings

VIRT_PRIVATE_DIR = "/var/run/kubevirt-private"
VIRT_SHARE_DIR = "/var/run/kubevirt"
PVC_DISK_DIR = VIRT_PRIVATE_DIR + "/vmi-disks"
SECRET_SOURCE_DIR = VIRT_PRIVATE_DIR + "/secret"
CONFIG_MAP_SOURCE_DIR = VIRT_PRIVATE_DIR + "/config-map"
DOWNWARD_API_SOURCE_DIR = VIRT_PRIVATE_DIR + "/downwardapi"
SYSPREP_SOURCE_DIR = VIRT_PRIVATE_DIR + "/sysprep"
DOWNWARD_METRIC_DISKS_DIR = VIRT_PRIVATE_DIR + "/downwardmetric-disk"
_CONFIG_SOURCE_DIRS = {
    "secret": SECRET_SOURCE_DIR,
    "configMap": CONFIG_MAP_SOURCE_DIR,
    "downwardAPI": DOWNWARD_API_SOURCE_DIR,
}
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

    def claim(self, volume_name: str, claim: str, pvcs: Mapping[str, Mapping[str, Any]] | None) -> None:
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


def render_volumes(
    vmi: Mapping[str, Any], settings: LauncherSettings, pvcs: Mapping[str, Mapping[str, Any]] | None
) -> PodVolumes:
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") or {}
    devices = domain.get("devices") or {}
    volumes = spec.get("volumes") or []
    rendered = PodVolumes(settings)

    # Config volumes are always in the pod but only mounted into compute when a disk uses them.
    for volume in volumes:
        name = volume["name"]
        if (secret := volume.get("secret")) is not None:
            rendered.add(
                {
                    "name": name,
                    "secret": without_none(secretName=secret.get("secretName"), optional=secret.get("optional")),
                }
            )
        if (config_map := volume.get("configMap")) is not None:
            rendered.add(
                {
                    "name": name,
                    "configMap": without_none(name=config_map.get("name"), optional=config_map.get("optional")),
                }
            )
        if (downward := volume.get("downwardAPI")) is not None:
            rendered.add({"name": name, "downwardAPI": without_none(items=copy_json(downward.get("fields")))})
    by_name = {volume["name"]: volume for volume in volumes}
    for disk in devices.get("disks") or []:
        volume = by_name.get(disk["name"], {})
        for kind, base in _CONFIG_SOURCE_DIRS.items():
            if volume.get(kind) is not None:
                rendered.mounts.append(mount(disk["name"], f"{base}/{disk['name']}", readOnly=True))

    hotplugged = _hotplug_volume_names(spec, vmi.get("status") or {})
    for volume in volumes:
        name = volume["name"]
        if name in hotplugged:
            continue
        if (pvc := volume.get("persistentVolumeClaim")) is not None:
            rendered.claim(name, pvc["claimName"], pvcs)
            claim = without_none(claimName=pvc["claimName"], readOnly=pvc.get("readOnly") or None)
            rendered.volumes.append({"name": name, "persistentVolumeClaim": claim})
        elif (ephemeral := volume.get("ephemeral")) is not None:
            claim_source = ephemeral.get("persistentVolumeClaim") or {}
            rendered.claim(name, claim_source.get("claimName", ""), pvcs)
            rendered.volumes.append({"name": name, "persistentVolumeClaim": copy_json(claim_source)})
        elif (host_disk := volume.get("hostDisk")) is not None:
            path_type = {"Disk": "Directory", "DiskOrCreate": "DirectoryOrCreate"}.get(host_disk.get("type", ""), "")
            host_path = {"path": posixpath.dirname(host_disk.get("path", "")), "type": path_type}
            rendered.add({"name": name, "hostPath": host_path}, mount(name, f"{PVC_DISK_DIR}/{name}"))
        elif (data_volume := volume.get("dataVolume")) is not None:
            rendered.claim(name, data_volume["name"], pvcs)
            rendered.volumes.append({"name": name, "persistentVolumeClaim": {"claimName": data_volume["name"]}})
        elif volume.get("downwardMetrics") is not None:
            rendered.add(empty_dir(name, medium="Memory", sizeLimit="1Mi"), mount(name, DOWNWARD_METRIC_DISKS_DIR))
        elif (sysprep := volume.get("sysprep")) is not None:
            if sysprep.get("secret") is not None:
                sysprep_volume = {"name": name, "secret": {"secretName": sysprep["secret"].get("name")}}
            elif sysprep.get("configMap") is not None:
                sysprep_volume = {"name": name, "configMap": {"name": sysprep["configMap"].get("name")}}
            else:
                raise LaunchManifestError(f"Sysprep must have Secret or ConfigMap reference set {sysprep}")
            rendered.add(sysprep_volume, mount(name, f"{SYSPREP_SOURCE_DIR}/{name}", readOnly=True))
        for cloud_init in ("cloudInitNoCloud", "cloudInitConfigDrive"):
            cloud_init_source = volume.get(cloud_init) or {}
            if ref := cloud_init_source.get("userDataSecretRef"):
                rendered.secret_ref(name, ref["name"], "udata", ("userdata", "userData"))
            if ref := cloud_init_source.get("networkDataSecretRef"):
                rendered.secret_ref(name, ref["name"], "ndata", ("networkdata", "networkData"))

    for credential in spec.get("accessCredentials") or []:
        for kind in ("sshPublicKey", "userPassword"):
            secret = (((credential.get(kind) or {}).get("source") or {}).get("secret") or {}).get("secretName")
            if secret:
                volume_name = f"{secret}-access-cred"
                rendered.add(
                    {"name": volume_name, "secret": {"secretName": secret}},
                    mount(volume_name, f"{SECRET_SOURCE_DIR}/{volume_name}", readOnly=True),
                )
                break

    if (domain.get("memory") or {}).get("hugepages") is not None:
        rendered.add(empty_dir("hugepages", medium="HugePages"), mount("hugepages", "/dev/hugepages"))
        rendered.add(
            empty_dir("hugetblfs-dir", medium="HugePages"), mount("hugetblfs-dir", "/dev/hugepages/libvirt/qemu")
        )
    if not devices.get("disableHotplug"):
        rendered.add(
            empty_dir("hotplug-disks"),
            mount("hotplug-disks", settings.hotplug_disk_dir, mountPropagation="HostToContainer"),
        )
    return rendered
