"""What virt-handler must remember across restarts: which VMIs it runs guests for, and running shutdowns.

A restarted handler re-learns everything else from the API and the launchers; these records only let it stop the
guest of a VMI deleted while it was down and keep counting a grace period that had already started.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote


class NodeRecords:
    """VMI key → {vmiUid, podUid, shutdownStarted}, one small JSON file per VMI in a directory, written atomically.

    One file per VMI keeps a change O(1): rewriting one file of every VMI on the node for each change made starting
    n VMIs cost O(n²). `path` is the former single file (`vmis.json`); its records are taken over once.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dir = path.with_suffix(".d")
        self._records: dict[str, dict[str, Any]] = {}
        if self.dir.is_dir():
            for entry in self.dir.glob("*.json"):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    data = json.loads(entry.read_text())
                    self._records[str(data["key"])] = dict(data["record"])
        try:
            legacy = json.loads(path.read_text())
        except (OSError, ValueError):
            legacy = None
        if isinstance(legacy, dict):
            for key, record in legacy.items():
                if isinstance(record, dict) and key not in self._records:
                    self._records[key] = record
                    self._save(key)
            path.unlink()

    def _file(self, key: str) -> Path:
        return self.dir / f"{quote(key, safe='')}.json"

    def _save(self, key: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self._file(key)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "record": self._records[key]}))
        partial.replace(target)

    def keys(self) -> list[str]:
        return list(self._records)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._records.get(key)

    def put(self, key: str, vmi_uid: str, pod_uid: str) -> None:
        record = self._records.get(key)
        if record is not None and record.get("vmiUid") == vmi_uid and record.get("podUid") == pod_uid:
            return
        self._records[key] = {"vmiUid": vmi_uid, "podUid": pod_uid}
        self._save(key)

    def remove(self, key: str) -> None:
        if self._records.pop(key, None) is not None:
            self._file(key).unlink(missing_ok=True)

    def shutdown_started(self, key: str) -> float | None:
        value = (self._records.get(key) or {}).get("shutdownStarted")
        return float(value) if value is not None else None

    def start_shutdown(self, key: str, when: float) -> None:
        record = self._records.get(key)
        if record is not None:
            record["shutdownStarted"] = when
            self._save(key)
