"""The QEMU processes of one embedded cluster, from the process table: other clusters on the host (other tests, a
stress run) may have guests of the same names, so a QEMU counts only when its runtime directory
(/run/pkv/<pod uid prefix>/) belongs to a pod directory this cluster's nodes have had."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from pathlib import Path

from pykubevirt.api import pod_layout
from pykubevirt.node.pod_dirs import existing_pod_dirs

RUNTIME_PREFIX = pod_layout.SHORT_RUNTIME_ROOT + "/"


class ClusterQemus:
    """QEMUs per libvirt domain (`<namespace>_<name>`) of the cluster in `data_dir`; `refresh` learns its pods."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.runtime_ids: set[str] = set()

    def refresh(self) -> None:
        """Remember the runtime ids of the pods the nodes have now (never forgotten: a leaked QEMU outlives its pod)."""
        for node_dir in (self.data_dir / "nodes").glob("*"):
            for pod_dir in existing_pod_dirs(node_dir / "pods"):
                self.runtime_ids.add(Path(pod_layout.short_runtime_dir(pod_dir.uid)).name)

    def _owner(self, argv: list[bytes]) -> str | None:
        for arg in argv:
            text = arg.decode(errors="replace")
            start = text.find(RUNTIME_PREFIX)
            if start >= 0:
                return text[start + len(RUNTIME_PREFIX) :].split("/", 1)[0]
        return None

    def pids(self) -> dict[str, list[int]]:
        self.refresh()
        found: dict[str, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if not argv or b"qemu-system" not in argv[0] or self._owner(argv) not in self.runtime_ids:
                    continue
                # libvirt's capability probes are QEMUs too, without a guest name: not guests.
                domain = next((a for a in argv if a.startswith(b"guest=")), None)
                if domain is None:
                    continue
                found.setdefault(domain.split(b",")[0][len(b"guest=") :].decode(), []).append(int(entry))
        return found

    def count(self) -> Counter[str]:
        return Counter({domain: len(pids) for domain, pids in self.pids().items()})


class QemuCensus:
    """Polls the cluster's QEMUs in a thread; `most` is the largest number of QEMUs one domain ever had at once."""

    def __init__(self, qemus: ClusterQemus, interval: float = 0.1) -> None:
        self.qemus = qemus
        self.interval = interval
        self.most: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            for domain, count in self.qemus.count().items():
                self.most[domain] = max(self.most[domain], count)

    def stop(self) -> Counter[str]:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.most
