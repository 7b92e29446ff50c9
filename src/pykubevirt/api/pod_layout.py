"""Where things live in a virt-launcher pod, and how a process-based runtime maps pod paths to host paths.

KubeVirt's launcher and handler meet through pod volumes: the handler reaches a pod's `sockets` emptyDir through
the kubelet's pod directory. The embedded node agent keeps the same contract: every volume of a pod is a host
directory `<pods-dir>/<pod-uid>/volumes/<volume>`, and a container learns where its mounts are from the
`PYKUBEVIRT_MOUNTS` environment variable (container path → host path).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping

MOUNTS_ENV = "PYKUBEVIRT_MOUNTS"

# KubeVirt's in-pod directories: pkg/util/util.go (VirtShareDir, VirtPrivateDir), the virt-launcher flags
# (cmd/virt-launcher/virt-launcher.go) and pkg/virt-controller/services/rendervolumes.go.
KUBEVIRT_SHARE_DIR = "/var/run/kubevirt"
PRIVATE_DIR = "/var/run/kubevirt-private"
# Where the launcher pod mounts a VMI's config volumes (pkg/config), one directory a volume under each.
CONFIG_SOURCE_DIRS = {
    "secret": PRIVATE_DIR + "/secret",
    "configMap": PRIVATE_DIR + "/config-map",
    "downwardAPI": PRIVATE_DIR + "/downwardapi",
    "sysprep": PRIVATE_DIR + "/sysprep",
}
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
EPHEMERAL_DISK_DIR = "/var/run/kubevirt-ephemeral-disks"
CONTAINER_DISK_DIR = "/var/run/kubevirt/container-disks"
SOCKETS_DIR = "/var/run/kubevirt/sockets"
LIBVIRT_RUNTIME_DIR = "/var/run/libvirt"
LAUNCHER_SOCKET_NAME = "launcher-sock"
SOCKETS_VOLUME = "sockets"
PRIVATE_VOLUME = "private"


def volume_dir(pods_dir: str, pod_uid: str, volume: str) -> str:
    """The host directory of one pod volume under a node's pods directory."""
    return os.path.join(pods_dir, pod_uid, "volumes", volume)


def launcher_socket(pods_dir: str, pod_uid: str) -> str:
    """Where virt-handler finds the launcher's command socket of a pod."""
    return os.path.join(volume_dir(pods_dir, pod_uid, SOCKETS_VOLUME), LAUNCHER_SOCKET_NAME)


# The guest's sockets and console log in the VMI's private dir `<PRIVATE_DIR>/<vmi uid>/`: the launcher's domain binds
# them, virt-handler connects to the sockets and the guest-console-log sidecar tails the log.
SERIAL_SOCKET_NAME = "virt-serial0"
SERIAL_LOG_NAME = "virt-serial0-log"
VNC_SOCKET_NAME = "virt-vnc"


def serial_socket(pods_dir: str, pod_uid: str, vmi_uid: str) -> str:
    return os.path.join(volume_dir(pods_dir, pod_uid, PRIVATE_VOLUME), vmi_uid, SERIAL_SOCKET_NAME)


def serial_log(pods_dir: str, pod_uid: str, vmi_uid: str) -> str:
    return os.path.join(volume_dir(pods_dir, pod_uid, PRIVATE_VOLUME), vmi_uid, SERIAL_LOG_NAME)


def vnc_socket(pods_dir: str, pod_uid: str, vmi_uid: str) -> str:
    return os.path.join(volume_dir(pods_dir, pod_uid, PRIVATE_VOLUME), vmi_uid, VNC_SOCKET_NAME)


# A VMI with clientPassthrough gets this many USB redirection channels, one device each
# (KubeVirt's UsbClientPassthroughMaxNumberOf).
USB_REDIRECT_SLOTS = 4


def usbredir_socket_name(slot: int) -> str:
    return f"virt-usbredir-{slot}"


def usbredir_socket(pods_dir: str, pod_uid: str, vmi_uid: str, slot: int) -> str:
    return os.path.join(volume_dir(pods_dir, pod_uid, PRIVATE_VOLUME), vmi_uid, usbredir_socket_name(slot))


# Unix socket paths must stay under 108 bytes, which pod volume paths under a node's data dir exceed. A launcher
# therefore keeps its sockets and libvirt root in a short per-pod directory and links them from its volumes;
# clients connect through `handler.launcher_client.connectable()`.
# libvirt puts sockets up to 77 bytes deep under its embed root (the guest agent channel of a domain whose short
# name is 20 characters), so the root must stay within 30 bytes.
SHORT_RUNTIME_ROOT = "/run/pkv"
UNIX_PATH_MAX = 107
EMBED_ROOT_NAME = "lv"


# KubeVirt's /var/run/kubevirt/migrationproxy: the unix sockets of a migration, `<vmi uid>-source.sock` (libvirt),
# `<vmi uid>-49152-source.sock` (memory) and `<vmi uid>-49153-source.sock` (block copy). The source handler listens
# there; a target pod's daemon sees its own directory at the same path, where its QEMU listens.
MIGRATION_PROXY_DIR = f"{SHORT_RUNTIME_ROOT}/mp"
DIRECT_MIGRATION_PORT = 49152
BLOCK_MIGRATION_PORT = 49153


def migration_socket(vmi_uid: str, port: int = 0) -> str:
    """`<MIGRATION_PROXY_DIR>/<vmi uid>[-<port>]-source.sock`."""
    middle = f"-{port}" if port else ""
    return f"{MIGRATION_PROXY_DIR}/{vmi_uid}{middle}-source.sock"


def short_runtime_dir(pod_uid: str) -> str:
    return os.path.join(SHORT_RUNTIME_ROOT, pod_uid.replace("-", "")[:12])


def embed_root(pod_uid: str) -> str:
    """The launcher's embedded libvirt root (its QEMU pid files are under run/qemu/)."""
    return os.path.join(short_runtime_dir(pod_uid), EMBED_ROOT_NAME)


def mounts_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The container path → host path map the runtime gave a process (empty in a real container)."""
    raw = environ.get(MOUNTS_ENV, "")
    if not raw:
        return {}
    mounts = json.loads(raw)
    return {str(k): str(v) for k, v in mounts.items()}


def host_path(path: str, mounts: Mapping[str, str]) -> str:
    """The host path of a container path: the longest mount that contains it, else the path itself."""
    normalized = posixpath.normpath(path)
    best = ""
    for mount in mounts:
        prefix = posixpath.normpath(mount)
        if (normalized == prefix or normalized.startswith(prefix.rstrip("/") + "/")) and len(prefix) > len(best):
            best = prefix
    if not best:
        return path
    rest = posixpath.relpath(normalized, best)
    return mounts[best] if rest == "." else os.path.join(mounts[best], rest)


# Mirror pods show processes a node runs by other means (the kubelet's static pods; here `pykubevirt up`'s
# components). The node agent does not run them but serves their logs from this file.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def mirror_log_file(node_data_dir: str, namespace: str, pod: str, container: str) -> str:
    return os.path.join(node_data_dir, "mirror-logs", f"{namespace}_{pod}_{container}.log")
