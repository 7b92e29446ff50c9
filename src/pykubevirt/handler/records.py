"""What virt-handler must remember across restarts: which VMIs it runs guests for, and running shutdowns.

A restarted handler re-learns everything else from the API and the launchers; these records only let it stop the
guest of a VMI deleted while it was down and keep counting a grace period that had already started.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class NodeRecords:
    """A small JSON file of VMI key → {vmiUid, podUid, shutdownStarted}; written atomically on change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        self._records: dict[str, dict[str, Any]] = data if isinstance(data, dict) else {}

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(self._records, indent=1, sort_keys=True))
        partial.replace(self.path)

    def keys(self) -> list[str]:
        return list(self._records)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._records.get(key)

    def put(self, key: str, vmi_uid: str, pod_uid: str) -> None:
        record = self._records.get(key)
        if record is not None and record.get("vmiUid") == vmi_uid and record.get("podUid") == pod_uid:
            return
        self._records[key] = {"vmiUid": vmi_uid, "podUid": pod_uid}
        self._save()

    def remove(self, key: str) -> None:
        if self._records.pop(key, None) is not None:
            self._save()

    def shutdown_started(self, key: str) -> float | None:
        value = (self._records.get(key) or {}).get("shutdownStarted")
        return float(value) if value is not None else None

    def start_shutdown(self, key: str, when: float) -> None:
        record = self._records.get(key)
        if record is not None:
            record["shutdownStarted"] = when
            self._save()
