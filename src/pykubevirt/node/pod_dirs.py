"""What the node agent keeps on disk per pod, under `<data-dir>/pods/<pod-uid>/`, so a restarted agent can re-adopt.

pod.json                      namespace, name and uid of the pod
volumes/<volume>/             emptyDir, configMap, secret and downwardAPI volumes (api.pod_layout's contract)
logs/<container>.log          the container's stdout and stderr
containers/<name>.json        ContainerRecord: pid + start ticks of the current attempt, restarts, last state
containers/<name>-<n>.exit.json   written by the exit recorder when attempt n ends
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pykubevirt.api import pod_layout


def write_json(path: Path, value: Any) -> None:
    """Atomic replace, so a crash never leaves half a record behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class ContainerRecord:
    """One container's runtime facts that must survive an agent restart."""

    name: str
    init: bool = False
    # Attempts so far minus one: the container's restartCount.
    attempt: int = 0
    # The exit recorder of the current attempt (0: no process, e.g. a virtual container).
    pid: int = 0
    ticks: int = 0
    started_at: str = ""
    image_id: str = ""
    # The terminated state of the current attempt once it ended, and of the attempt before it.
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None
    # Virtual containers: "running" or "" (terminated is in `terminated`), and what they made (the disk link).
    virtual: bool = False
    virtual_state: str = ""
    link: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContainerRecord:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class PodDir:
    """The directory of one pod on this node."""

    def __init__(self, pods_dir: Path, uid: str) -> None:
        self.pods_dir = pods_dir
        self.uid = uid
        self.path = pods_dir / uid
        self._created = False

    @property
    def volumes(self) -> Path:
        return self.path / "volumes"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def containers(self) -> Path:
        return self.path / "containers"

    def volume_dir(self, volume: str) -> Path:
        return Path(pod_layout.volume_dir(str(self.pods_dir), self.uid, volume))

    def log_file(self, container: str) -> Path:
        return self.logs / f"{container}.log"

    def record_file(self, container: str) -> Path:
        return self.containers / f"{container}.json"

    def exit_file(self, container: str, attempt: int) -> Path:
        return self.containers / f"{container}-{attempt}.exit.json"

    def create(self, pod: dict[str, Any]) -> None:
        """Make the directory and its pod.json; once per PodDir, as a pod's uid, name and namespace never change."""
        if self._created:
            return
        for path in (self.volumes, self.logs, self.containers):
            path.mkdir(parents=True, exist_ok=True)
        meta = pod.get("metadata") or {}
        identity = {"namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "uid": self.uid}
        if read_json(self.path / "pod.json") != identity:
            write_json(self.path / "pod.json", identity)
        self._created = True

    def exists(self) -> bool:
        return (self.path / "pod.json").exists()

    def identity(self) -> dict[str, str]:
        data = read_json(self.path / "pod.json")
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def load_records(self) -> dict[str, ContainerRecord]:
        records: dict[str, ContainerRecord] = {}
        if not self.containers.is_dir():
            return records
        for path in self.containers.glob("*.json"):
            if path.name.endswith(".exit.json"):
                continue
            data = read_json(path)
            if isinstance(data, dict) and data.get("name"):
                record = ContainerRecord.from_json(data)
                records[record.name] = record
        return records

    def save_record(self, record: ContainerRecord) -> None:
        self.containers.mkdir(parents=True, exist_ok=True)
        write_json(self.record_file(record.name), asdict(record))

    def read_exit(self, container: str, attempt: int) -> dict[str, Any] | None:
        data = read_json(self.exit_file(container, attempt))
        return data if isinstance(data, dict) else None

    def remove(self) -> None:
        """Delete the pod's directory; rmtree unlinks symlinks (the container-disk links) without following them."""
        unmount_below(self.path)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.path)
        self._created = False


def unmount_below(path: Path) -> None:
    """Lazily unmount what the agent mounted inside a pod's directory (hugetlbfs volumes), deepest first."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return
    prefix = f"{path}/"
    points = [fields[1] for fields in (line.split() for line in lines) if len(fields) > 1]
    for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def existing_pod_dirs(pods_dir: Path) -> list[PodDir]:
    if not pods_dir.is_dir():
        return []
    return [PodDir(pods_dir, entry.name) for entry in sorted(pods_dir.iterdir()) if entry.is_dir()]
