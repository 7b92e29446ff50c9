"""Render the virt-launcher Pod for a VMI the way virt-controller's `renderLaunchManifest` does.

Upstream: pkg/virt-controller/services/template.go: renderLaunchManifest.
"""

from __future__ import annotations

import posixpath
import random as _random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pykubevirt import __version__
from pykubevirt.api import constants as c
from pykubevirt.api import pod_layout
from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.json_lookup import get
from pykubevirt.api.kernel_boot import KERNEL_BOOT_NAME, KERNEL_BOOT_VOLUME_NAME, kernel_boot_volume
from pykubevirt.api.vmi_id import vmi_id
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.compute_resources import (
    console_log_resources,
    is_cpu_dedicated,
    launcher_resources,
    memory_overhead,
    support_container_resources,
    wants_guaranteed_qos,
)
from pykubevirt.controller.launcher_volumes import (
    VIRT_PRIVATE_DIR,
    VIRT_SHARE_DIR,
    LaunchManifestError,
    PodVolumes,
    mount,
    render_volumes,
    without_none,
)
from pykubevirt.controller.multus_annotations import multus_annotations
from pykubevirt.launcher.protocol import domain_name
from pykubevirt.log import DEFAULT_VERBOSITY

NON_ROOT_UID = 107
LIBVIRT_STARTUP_DELAY_SECONDS = 10
GRACE_PERIOD_PADDING_SECONDS = 15
QEMU_TIMEOUT_JITTER = 120
DEFAULT_DISK_MEMORY_LIMIT = 2000 * 1024 * 1024

CONTAINER_DISK_BINARY = "/usr/bin/container-disk"
GUEST_CONSOLE_LOG_CONTAINER = "guest-console-log"
VIRT_TAIL_BINARY = "/usr/bin/virt-tail"

NON_ROOT_ANNOTATION = "kubevirt.io/nonroot"
KEEP_LAUNCHER_AFTER_FAILURE_ANNOTATION = "kubevirt.io/keep-launcher-alive-after-failure"
LIBVIRT_LOG_FILTERS_ANNOTATION = "kubevirt.io/libvirt-log-filters"
FAIL_FAST_ANNOTATION = "kubevirt.io/func-test-virt-launcher-fail-fast"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
EVICT_ONLY_ANNOTATION = "descheduler.alpha.kubernetes.io/request-evict-only"
CPU_MANAGER_LABEL = "kubevirt.io/cpumanager"
REALTIME_LABEL = "kubevirt.io/realtime"
CPU_MODEL_LABEL = "cpu-model.node.kubevirt.io/"
CPU_FEATURE_LABEL = "cpu-feature.node.kubevirt.io/"
MACHINE_TYPE_LABEL = "machine-type.node.kubevirt.io/"
OBSOLETE_HOST_MODEL_LABEL = "node-labeller.kubevirt.io/obsolete-host-model"
ARCH_LABEL = "kubernetes.io/arch"
_FILTERED_ANNOTATION_PREFIXES = (
    "kubectl.kubernetes.io",
    c.STORAGE_OBSERVED_API_VERSION_ANNOTATION,
    c.LATEST_OBSERVED_API_VERSION_ANNOTATION,
)
# Scheduling and DNS fields the pod takes from the VMI spec as they are.
_COPIED_SPEC_FIELDS = (
    "subdomain dnsConfig dnsPolicy schedulerName priorityClassName tolerations topologySpreadConstraints"
)
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
_OVMF_PATHS = {"arm64": "/usr/share/AAVMF", "s390x": ""}
# virtconfig.DefaultARCHOVMFPath, which is also where Debian's ovmf package puts the images.
_DEFAULT_OVMF_PATH = "/usr/share/OVMF"


@dataclass(frozen=True)
class LauncherSettings:
    """virt-controller's launcher options; `command_prefix` replaces upstream's /usr/bin/virt-launcher-monitor."""

    image: str = f"pykubevirt/virt-launcher:{__version__}"
    image_pull_policy: str = "IfNotPresent"
    image_pull_secret: str = ""
    command_prefix: tuple[str, ...] = ("pykubevirt", "virt-launcher")
    use_emulation: bool = True
    # Developer knob: launchers use this libvirt instead of their embedded QEMU (test:///default for density runs).
    libvirt_uri: str = ""
    qemu_timeout_seconds: int = 240
    qemu_timeout_jitter: int = QEMU_TIMEOUT_JITTER
    random: Callable[[int], int] = _random.randrange
    kubevirt_share_dir: str = VIRT_SHARE_DIR
    ephemeral_disk_dir: str = "/var/run/kubevirt-ephemeral-disks"
    container_disk_dir: str = "/var/run/kubevirt/container-disks"
    hotplug_disk_dir: str = "/var/run/kubevirt/hotplug-disks"
    ovmf_path: str | None = None
    disk_memory_limit: int = DEFAULT_DISK_MEMORY_LIMIT
    hypervisor: str = "kvm"
    node_selectors: tuple[tuple[str, str], ...] = ()
    # Node-labeller labels (CPU model/features, machine type, realtime) only exist where virt-handler labels nodes.
    node_labeller: bool = False
    additional_guest_memory_overhead_ratio: str | None = None
    cluster: ClusterConfig = field(default_factory=ClusterConfig)


def is_non_root(vmi: Mapping[str, Any]) -> bool:
    annotations = (vmi.get("metadata") or {}).get("annotations") or {}
    return NON_ROOT_ANNOTATION in annotations or bool((vmi.get("status") or {}).get("runtimeUser"))


def sanitized_hostname(vmi: Mapping[str, Any]) -> str:
    """`spec.hostname`, else the name's first DNS label cut to 63 characters."""
    hostname = (vmi.get("spec") or {}).get("hostname")
    return str(hostname) if hostname else str(vmi["metadata"]["name"]).split(".")[0][:63]


def grace_period_seconds(vmi: Mapping[str, Any]) -> int:
    value = (vmi.get("spec") or {}).get("terminationGracePeriodSeconds")
    return int(value) if value is not None else c.DEFAULT_GRACE_PERIOD_SECONDS


def is_launcher_pod(pod: Mapping[str, Any]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(c.APP_LABEL) == c.LAUNCHER_LABEL_VALUE and c.CREATED_BY_LABEL in labels


def launcher_pod_selector(vmi: Mapping[str, Any]) -> str:
    """Label selector matching the launcher pods of one VMI (by its UID)."""
    return f"{c.APP_LABEL}={c.LAUNCHER_LABEL_VALUE},{c.CREATED_BY_LABEL}={vmi['metadata']['uid']}"


def _security_context(user_id: int, capabilities: dict[str, list[str]]) -> dict[str, Any]:
    context: dict[str, Any] = {"runAsUser": user_id, "runAsNonRoot": user_id != 0, "capabilities": capabilities}
    if user_id != 0:
        context["runAsGroup"] = user_id
        context["allowPrivilegeEscalation"] = False
    return context


def _xdg_env(user_id: int) -> list[dict[str, Any]]:
    if user_id == 0:
        return []
    return [
        {"name": "XDG_CACHE_HOME", "value": VIRT_PRIVATE_DIR},
        {"name": "XDG_CONFIG_HOME", "value": VIRT_PRIVATE_DIR},
        {"name": "XDG_RUNTIME_DIR", "value": "/var/run"},
    ]


def _probe(vmi: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any]:
    """A VMI probe as a compute-container probe: defaulted, wrapped in virt-probe, delayed for libvirt's start."""
    rendered: dict[str, Any] = {
        "initialDelaySeconds": int(probe.get("initialDelaySeconds") or 0) + LIBVIRT_STARTUP_DELAY_SECONDS
    }
    for key, default in _PROBE_DEFAULTS.items():
        value = int(probe.get(key) or 0)
        rendered[key] = value if value >= 1 else default
    for handler in ("exec", "httpGet", "tcpSocket"):
        if probe.get(handler) is not None:
            rendered[handler] = copy_json(probe[handler])
    domain = domain_name(vmi["metadata"].get("namespace", ""), vmi["metadata"]["name"])
    prefix = ["virt-probe", "--domainName", domain, "--timeoutSeconds", str(rendered["timeoutSeconds"])]
    command = (rendered.get("exec") or {}).get("command") or []
    if probe.get("guestAgentPing") is not None:
        rendered["exec"] = {"command": [*prefix, "--guestAgentPing"]}
        rendered["timeoutSeconds"] += 1  # virt-probe needs a moment of its own
    elif command and command[0] != "virt-probe":
        rendered["exec"]["command"] = [*prefix, "--command", command[0], "--", *command[1:]]
        rendered["timeoutSeconds"] += 1
    return rendered


def _launcher_args(vmi: Mapping[str, Any], settings: LauncherSettings, non_root: bool) -> list[str]:
    meta = vmi["metadata"]
    annotations = meta.get("annotations") or {}
    arch = (vmi.get("spec") or {}).get("architecture") or settings.cluster.architecture
    ovmf = settings.ovmf_path if settings.ovmf_path is not None else _OVMF_PATHS.get(arch, _DEFAULT_OVMF_PATH)
    jitter = settings.random(settings.qemu_timeout_jitter) if settings.qemu_timeout_jitter > 0 else 0
    timeout = settings.qemu_timeout_seconds + jitter
    args = [
        *("--qemu-timeout", f"{timeout}s", "--name", meta["name"], "--uid", str(meta.get("uid", ""))),
        *("--namespace", meta.get("namespace", ""), "--kubevirt-share-dir", settings.kubevirt_share_dir),
        *("--ephemeral-disk-dir", settings.ephemeral_disk_dir, "--container-disk-dir", settings.container_disk_dir),
        *("--grace-period-seconds", str(grace_period_seconds(vmi) + GRACE_PERIOD_PADDING_SECONDS)),
        *("--hook-sidecars", "0", "--ovmf-path", ovmf, "--disk-memory-limit", str(settings.disk_memory_limit)),
        *("--hypervisor", settings.hypervisor),
    ]
    if non_root:
        args.append("--run-as-nonroot")
    if LIBVIRT_LOG_FILTERS_ANNOTATION in annotations:
        args += ["--libvirt-log-filters", annotations[LIBVIRT_LOG_FILTERS_ANNOTATION]]
    if settings.use_emulation:
        args.append("--allow-emulation")
    if settings.libvirt_uri:
        args += ["--libvirt-uri", settings.libvirt_uri]
    if any(
        key.startswith(KEEP_LAUNCHER_AFTER_FAILURE_ANNOTATION) and (value == "" or value.startswith("true"))
        for key, value in annotations.items()
    ):
        args.append("--keep-after-failure")
    if FAIL_FAST_ANNOTATION in annotations:
        args.append("--simulate-crash")
    return args


def _debug_env(vmi: Mapping[str, Any], cluster_verbosity: int) -> tuple[list[dict[str, Any]], int]:
    """The compute container's debug variables, and the launcher's log verbosity: the VMI's `logVerbosity` label,
    else the cluster's logVerbosity.virtLauncher."""
    labels = (vmi.get("metadata") or {}).get("labels") or {}
    env: list[dict[str, Any]] = []
    verbosity = cluster_verbosity
    if "logVerbosity" in labels:
        try:
            verbosity = int(labels["logVerbosity"])
        except ValueError as err:
            raise LaunchManifestError(f"verbosity {labels['logVerbosity']} cannot cast to int: {err}") from err
        env.append({"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": labels["logVerbosity"]})
    elif cluster_verbosity != DEFAULT_VERBOSITY:
        env.append({"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": str(cluster_verbosity)})
    for label, variable in (("debugLogs", "LIBVIRT_DEBUG_LOGS"), ("virtiofsdDebugLogs", "VIRTIOFSD_DEBUG_LOGS")):
        if str(labels.get(label, "")).lower() == "true" or verbosity > 5:
            env.append({"name": variable, "value": "1"})
    return env, verbosity


def _support_security_context() -> dict[str, Any]:
    return {
        "runAsUser": NON_ROOT_UID,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def is_serial_console_log_enabled(vmi: Mapping[str, Any], config: ClusterConfig) -> bool:
    """Never without the auto-attached serial console; else `logSerialConsole`, else the cluster's default."""
    devices = ((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}
    if devices.get("autoattachSerialConsole") is False:
        return False
    if devices.get("logSerialConsole") is not None:
        return bool(devices["logSerialConsole"])
    return not config.disable_serial_console_log


def _guest_console_log_container(
    vmi: Mapping[str, Any], settings: LauncherSettings, guaranteed: bool, verbosity: int
) -> dict[str, Any] | None:
    """The native sidecar whose log (`kubectl logs -c guest-console-log`) is serial port 0's log file."""
    if not is_serial_console_log_enabled(vmi, settings.cluster):
        return None
    log_file = f"{VIRT_PRIVATE_DIR}/{vmi['metadata'].get('uid', '')}/{pod_layout.SERIAL_LOG_NAME}"
    return {
        "name": GUEST_CONSOLE_LOG_CONTAINER,
        "image": settings.image,
        "command": [VIRT_TAIL_BINARY],
        "args": ["--logfile", log_file],
        "env": [{"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": str(verbosity)}],
        "resources": console_log_resources(guaranteed),
        "volumeMounts": [mount("private", VIRT_PRIVATE_DIR, readOnly=True)],
        "imagePullPolicy": settings.image_pull_policy,
        "securityContext": _support_security_context(),
        # Kubernetes' native sidecar: later init containers do not wait for it, it runs until the pod ends.
        "restartPolicy": "Always",
    }


def _container_disk_containers(
    vmi: Mapping[str, Any], settings: LauncherSettings, guaranteed: bool, init: bool
) -> list[dict[str, Any]]:
    """One `volume<name>` container per containerDisk serving the image's disk (`-init --no-op` pre-pulls it), then
    the kernel-boot image's, served the same way at `<dir>/kernel-boot`."""
    mount_dir = posixpath.join(settings.container_disk_dir, str(vmi["metadata"].get("uid", "")))
    containers = []
    volumes = [(f"disk_{i}", v) for i, v in enumerate((vmi.get("spec") or {}).get("volumes") or [])]
    volumes += [(KERNEL_BOOT_NAME, v) for v in [kernel_boot_volume(vmi)] if v is not None]
    for served_as, volume in volumes:
        source = volume.get("containerDisk")
        if source is None or (volume["name"] == KERNEL_BOOT_VOLUME_NAME and served_as != KERNEL_BOOT_NAME):
            continue
        args = ["--no-op"] if init else ["--copy-path", f"{mount_dir}/{served_as}"]
        container = {
            "name": f"volume{volume['name']}" + ("-init" if init else ""),
            "image": source.get("image", ""),
            "command": [CONTAINER_DISK_BINARY],
            "args": args,
            "resources": support_container_resources(guaranteed, container_disk=True),
            "volumeMounts": [mount("container-disks", mount_dir), mount("virt-bin-share-dir", "/usr/bin")],
            "securityContext": _support_security_context(),
        }
        if source.get("imagePullPolicy"):
            container["imagePullPolicy"] = source["imagePullPolicy"]
        containers.append(container)
    return containers


def _init_containers(
    vmi: Mapping[str, Any], settings: LauncherSettings, user_id: int, guaranteed: bool, verbosity: int
) -> list[dict[str, Any]]:
    """guest-console-log first, then what containerDisks need: the binary copy and one pre-pull per disk."""
    console_log = _guest_console_log_container(vmi, settings, guaranteed, verbosity)
    init = [console_log] if console_log is not None else []
    volumes = (vmi.get("spec") or {}).get("volumes") or []
    if not any(volume.get("containerDisk") is not None for volume in volumes) and kernel_boot_volume(vmi) is None:
        return init
    copier: dict[str, Any] = {
        "name": "container-disk-binary",
        "image": settings.image,
        "command": ["/usr/bin/cp"],
        "args": ["--preserve=all", CONTAINER_DISK_BINARY, "/init" + CONTAINER_DISK_BINARY],
        "resources": support_container_resources(guaranteed, container_disk=False),
        "volumeMounts": [mount("virt-bin-share-dir", "/init/usr/bin")],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "imagePullPolicy": settings.image_pull_policy,
        "securityContext": _security_context(user_id, {"drop": ["ALL"]}),
    }
    if env := _xdg_env(user_id):
        copier["env"] = env
    return [*init, copier, *_container_disk_containers(vmi, settings, guaranteed, init=True)]


def _node_selector(vmi: Mapping[str, Any], settings: LauncherSettings) -> dict[str, str]:
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") or {}
    cpu = domain.get("cpu") or {}
    selector = {c.NODE_SCHEDULABLE_LABEL: "true"}
    if spec.get("architecture"):
        selector[ARCH_LABEL] = str(spec["architecture"]).lower()
    selector.update(dict(settings.node_selectors))
    selector.update(spec.get("nodeSelector") or {})
    labels: list[str] = []
    if cpu.get("dedicatedCpuPlacement"):
        labels.append(CPU_MANAGER_LABEL)
    if settings.node_labeller:
        if cpu.get("model") and cpu["model"] not in ("host-model", "host-passthrough"):
            labels.append(CPU_MODEL_LABEL + cpu["model"])
        # The machine type the VMI booted with (status) wins over the requested one.
        machine = ((vmi.get("status") or {}).get("machine") or {}).get("type")
        if machine := machine or (domain.get("machine") or {}).get("type"):
            labels.append(MACHINE_TYPE_LABEL + machine)
        if cpu.get("model"):
            features = cpu.get("features") or []
            labels += [CPU_FEATURE_LABEL + f["name"] for f in features if f.get("policy") in (None, "", "require")]
        if cpu.get("realtime") is not None:
            labels.append(REALTIME_LABEL)
    selector.update(dict.fromkeys(labels, "true"))
    return selector


def _reject_label(affinity: dict[str, Any] | None, label: str) -> dict[str, Any]:
    """Require nodes without `label`: AND it into every required node-selector term (terms are ORed)."""
    requirement = {"key": label, "operator": "DoesNotExist"}
    affinity = copy_json(affinity) if affinity is not None else {}
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": [requirement]}]
        }
    else:
        terms = required.get("nodeSelectorTerms") or []
        required["nodeSelectorTerms"] = [
            {**term, "matchExpressions": [*(term.get("matchExpressions") or []), requirement]} for term in terms
        ]
    return affinity


def _affinity(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    affinity = copy_json(spec.get("affinity")) if spec.get("affinity") is not None else None
    cpu = (spec.get("domain") or {}).get("cpu")
    if cpu is None or not cpu.get("model") or cpu.get("model") == "host-model":
        affinity = _reject_label(affinity, OBSOLETE_HOST_MODEL_LABEL)
    for feature in (cpu or {}).get("features") or []:
        if feature.get("policy") == "forbid":
            affinity = _reject_label(affinity, CPU_FEATURE_LABEL + feature["name"])
    return affinity


def _annotations(vmi: Mapping[str, Any], overhead_bytes: int | None) -> dict[str, str]:
    annotations = {c.DOMAIN_ANNOTATION: vmi["metadata"]["name"]}
    for key, value in ((vmi.get("metadata") or {}).get("annotations") or {}).items():
        if not key.startswith(_FILTERED_ANNOTATION_PREFIXES):
            annotations[key] = value
    annotations[DEFAULT_CONTAINER_ANNOTATION] = c.LAUNCHER_COMPUTE_CONTAINER
    annotations[c.MIGRATION_TRANSPORT_UNIX_ANNOTATION] = "true"
    annotations[EVICT_ONLY_ANNOTATION] = ""
    if overhead_bytes is not None:
        annotations[c.MEMORY_OVERHEAD_ANNOTATION] = str(overhead_bytes)
    annotations.update(multus_annotations(vmi))
    return annotations


def _labels(vmi: Mapping[str, Any], hostname: str) -> dict[str, str]:
    meta = vmi["metadata"]
    return {
        **(meta.get("labels") or {}),
        c.APP_LABEL: c.LAUNCHER_LABEL_VALUE,
        c.CREATED_BY_LABEL: str(meta.get("uid", "")),
        c.VM_NAME_LABEL: hostname,
        c.VMI_ID_LABEL: vmi_id(meta["name"]),
    }


def _image_pull_secrets(spec: Mapping[str, Any], settings: LauncherSettings) -> list[dict[str, str]]:
    names = [
        str(volume["containerDisk"]["imagePullSecret"])
        for volume in spec.get("volumes") or []
        if (volume.get("containerDisk") or {}).get("imagePullSecret")
    ]
    if kernel_secret := get(spec, "domain", "firmware", "kernelBoot", "container", "imagePullSecret"):
        names.append(str(kernel_secret))
    if settings.image_pull_secret:
        names.append(settings.image_pull_secret)
    return [{"name": name} for name in dict.fromkeys(names)]


def _compute_env(
    vmi: Mapping[str, Any], user_id: int, volumes: PodVolumes, cluster_verbosity: int
) -> tuple[list[dict[str, Any]], int]:
    """The compute container's environment, and the launcher's log verbosity."""
    env = _xdg_env(user_id)
    if volumes.shared_paths:
        env.append({"name": "SHARED_FILESYSTEM_PATHS", "value": ":".join(volumes.shared_paths)})
    debug_env, verbosity = _debug_env(vmi, cluster_verbosity)
    env += debug_env
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    # pykubevirt's launcher keys its short socket directory by the pod's uid (unix socket paths are short).
    env.append({"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
    return env, verbosity


def _compute_capabilities(non_root: bool) -> dict[str, list[str]]:
    if non_root:
        return {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}
    return {"add": ["NET_BIND_SERVICE", "SYS_NICE"]}


def _compute_ports(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ports the VMI's interfaces declare, as container ports (TCP unless given)."""
    return [
        without_none(name=port.get("name") or None, containerPort=port["port"], protocol=port.get("protocol") or "TCP")
        for iface in ((spec.get("domain") or {}).get("devices") or {}).get("interfaces") or []
        for port in iface.get("ports") or []
    ]


def _compute_container(
    vmi: Mapping[str, Any],
    settings: LauncherSettings,
    user_id: int,
    resources: dict[str, Any],
    volumes: PodVolumes,
    env: list[dict[str, Any]],
) -> dict[str, Any]:
    """The `compute` container: the launcher with the VMI's mounts, devices, ports and probes."""
    spec = vmi.get("spec") or {}
    non_root = user_id != 0
    compute: dict[str, Any] = {
        "name": c.LAUNCHER_COMPUTE_CONTAINER,
        "image": settings.image,
        "command": list(settings.command_prefix),
        "args": _launcher_args(vmi, settings, non_root),
        "env": env,
        "resources": resources,
        "volumeMounts": volumes.mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "imagePullPolicy": settings.image_pull_policy,
        "securityContext": _security_context(user_id, _compute_capabilities(non_root)),
    }
    if ports := _compute_ports(spec):
        compute["ports"] = ports
    if volumes.devices:
        compute["volumeDevices"] = volumes.devices
    for key in ("livenessProbe", "readinessProbe"):
        if spec.get(key) is not None:
            compute[key] = _probe(vmi, spec[key])
    return compute


def _pod_security_context(user_id: int) -> dict[str, Any]:
    security: dict[str, Any] = {"fsGroup": NON_ROOT_UID, "runAsUser": user_id}
    if user_id != 0:
        security.update(runAsGroup=NON_ROOT_UID, runAsNonRoot=True)
    return security


def _volume_service_account(spec: Mapping[str, Any]) -> str | None:
    """The service account a serviceAccount volume names, if the VMI has one."""
    return next(
        (v["serviceAccount"].get("serviceAccountName") for v in spec.get("volumes") or [] if "serviceAccount" in v),
        None,
    )


def _optional_pod_fields(
    vmi: Mapping[str, Any], settings: LauncherSettings, init_containers: list[dict[str, Any]]
) -> dict[str, Any]:
    """Pod spec fields present only when the VMI asks for them: init containers, pull secrets, scheduling, DNS."""
    spec = vmi.get("spec") or {}
    fields: dict[str, Any] = {}
    if init_containers:
        fields["initContainers"] = init_containers
    if pull_secrets := _image_pull_secrets(spec, settings):
        fields["imagePullSecrets"] = pull_secrets
    if affinity := _affinity(spec):
        fields["affinity"] = affinity
    if service_account := spec.get("serviceAccountName") or _volume_service_account(spec):
        fields["serviceAccountName"] = service_account
    for key in _COPIED_SPEC_FIELDS.split():
        if spec.get(key):
            fields[key] = copy_json(spec[key])
    return fields


def _owner_reference(vmi: Mapping[str, Any]) -> dict[str, Any]:
    meta = vmi["metadata"]
    return {
        "apiVersion": c.KUBEVIRT_API_VERSION,
        "kind": c.VMI_KIND,
        "name": meta["name"],
        "uid": str(meta.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def render_launcher_pod(
    vmi: Mapping[str, Any],
    settings: LauncherSettings,
    *,
    pvcs: Mapping[str, Mapping[str, Any]] | None = None,
    backend_claim: str = "",
    auto_cpu_limits: bool = False,
    auto_memory_limits_ratio: float | None = None,
) -> dict[str, Any]:
    """The launcher Pod for a (defaulted) VMI; `pvcs` by claim name tells block from filesystem claims, and
    `backend_claim` is the VMI's backend-storage claim (persistent EFI/TPM state)."""
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    config = settings.cluster
    user_id = NON_ROOT_UID if is_non_root(vmi) else 0
    guaranteed = is_cpu_dedicated(vmi) or wants_guaranteed_qos(vmi)
    overhead = memory_overhead(vmi, config, additional_ratio=settings.additional_guest_memory_overhead_ratio)
    resources = launcher_resources(
        vmi,
        config,
        use_emulation=settings.use_emulation,
        overhead=overhead,
        auto_cpu_limits=auto_cpu_limits,
        auto_memory_limits_ratio=auto_memory_limits_ratio,
    )
    volumes = render_volumes(vmi, settings, pvcs, backend_claim, non_root=user_id != 0)
    hostname = sanitized_hostname(vmi)
    env, verbosity = _compute_env(vmi, user_id, volumes, settings.cluster.verbosity("virtLauncher"))
    compute = _compute_container(vmi, settings, user_id, resources, volumes, env)
    pod_spec: dict[str, Any] = {
        "hostname": hostname,
        "securityContext": _pod_security_context(user_id),
        "terminationGracePeriodSeconds": grace_period_seconds(vmi) + 2 * GRACE_PERIOD_PADDING_SECONDS,
        "restartPolicy": "Never",
        "containers": [compute, *_container_disk_containers(vmi, settings, guaranteed, init=False)],
        "nodeSelector": _node_selector(vmi, settings),
        "volumes": volumes.volumes,
        "readinessGates": [{"conditionType": c.UNPAUSED_READINESS_GATE}],
        "enableServiceLinks": False,
        # The token is only mounted when a serviceAccount volume asks for it (no istio proxy here).
        "automountServiceAccountToken": _volume_service_account(spec) is not None,
    }
    init_containers = _init_containers(vmi, settings, user_id, guaranteed, verbosity)
    pod_spec.update(_optional_pod_fields(vmi, settings, init_containers))
    overhead_bytes = overhead.ceil_int() if config.gate_enabled("VmiMemoryOverheadReport") else None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"virt-launcher-{meta['name']}-",
            "namespace": meta.get("namespace", "default"),
            "labels": _labels(vmi, hostname),
            "annotations": _annotations(vmi, overhead_bytes),
            "ownerReferences": [_owner_reference(vmi)],
        },
        "spec": pod_spec,
    }
