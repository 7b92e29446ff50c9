"""virt-launcher as a real process on libvirt's test driver (no QEMU), laid out in a pod directory as on a node."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.api import pod_layout
from pykubevirt.handler.launcher_client import LauncherClient, LauncherUnavailable
from pykubevirt.node.processes import kill_pod_strays

Obj = dict[str, Any]


def small_vmi(name: str, namespace: str = "default", **spec: Any) -> Obj:
    """A VMI the test driver can run: an empty disk and a cloud-init disk, which the launcher prepares for real."""
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "domain": {
                "memory": {"guest": "64Mi"},
                "devices": {
                    "disks": [
                        {"name": "scratch", "disk": {"bus": "virtio"}},
                        {"name": "cloudinit", "disk": {"bus": "virtio"}},
                    ]
                },
            },
            "volumes": [
                {"name": "scratch", "emptyDisk": {"capacity": "10Mi"}},
                {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\nhostname: launched\n"}},
            ],
            **spec,
        },
    }


def defaulted_vmi(name: str, uid: str, **spec: Any) -> Obj:
    """`small_vmi` as admission defaults it, with the given uid (what virt-handler would send in `sync`)."""
    vmi = small_vmi(name, **spec)
    vmi["metadata"]["uid"] = uid
    vmi["status"] = {}
    mutate_vmi(vmi, AdmissionContext(), operation="CREATE")
    return vmi


@dataclass
class LauncherProcess:
    process: subprocess.Popen[bytes]
    pod_dir: Path
    vmi_uid: str
    log_path: Path

    @property
    def pod_uid(self) -> str:
        return self.pod_dir.name

    @property
    def socket(self) -> Path:
        return self.pod_dir / "volumes" / "sockets" / pod_layout.LAUNCHER_SOCKET_NAME

    def client(self) -> LauncherClient:
        return LauncherClient(self.socket)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def wait_ready(self, within: float = 20.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"launcher exited early:\n{self.log()}"
            try:
                await self.client().ping()
                return
            except LauncherUnavailable:
                await asyncio.sleep(0.05)
        raise AssertionError(f"launcher never answered:\n{self.log()}")

    async def wait_exit(self, within: float = 20.0) -> int:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.05)
        raise AssertionError(f"launcher did not exit:\n{self.log()}")

    def stop(self) -> None:
        """Kill the process if it still runs and remove its runtime dir (on a node the agent does that)."""
        # The whole process group, as a node agent ends a pod: a migration target's libvirtd with its launcher.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        # libvirt daemonizes QEMU out of the group; its command line names the pod's runtime dir.
        kill_pod_strays(pod_layout.short_runtime_dir(self.pod_uid) + "/")
        shutil.rmtree(pod_layout.short_runtime_dir(self.pod_uid), ignore_errors=True)


def start_launcher(
    tmp_path: Path,
    name: str,
    vmi_uid: str,
    *extra: str,
    namespace: str = "default",
    libvirt_uri: str = "test:///default",
) -> LauncherProcess:
    """`pykubevirt virt-launcher` for the VMI `namespace/name` in a new pod dir under `tmp_path/pods`.

    `libvirt_uri=""` gives the launcher its own embedded libvirt and real QEMU guests."""
    pod_uid = str(uuid.uuid4())
    pod_dir = tmp_path / "pods" / pod_uid
    mounts = {
        pod_layout.SOCKETS_DIR: str(pod_dir / "volumes" / "sockets"),
        pod_layout.PRIVATE_DIR: str(pod_dir / "volumes" / "private"),
        pod_layout.EPHEMERAL_DISK_DIR: str(pod_dir / "volumes" / "ephemeral-disks"),
        pod_layout.CONTAINER_DISK_DIR: str(pod_dir / "volumes" / "container-disks"),
        pod_layout.LIBVIRT_RUNTIME_DIR: str(pod_dir / "volumes" / "libvirt-runtime"),
    }
    for path in mounts.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, pod_layout.MOUNTS_ENV: json.dumps(mounts), "POD_UID": pod_uid}
    log_path = tmp_path / f"{name}-{pod_uid[:8]}.log"
    command = [
        sys.executable, "-m", "pykubevirt.cli.main", "virt-launcher",
        "--name", name, "--uid", vmi_uid, "--namespace", namespace,
        *(("--libvirt-uri", libvirt_uri) if libvirt_uri else ()), *extra,
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return LauncherProcess(process, pod_dir, vmi_uid, log_path)
