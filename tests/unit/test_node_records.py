"""virt-handler's records of the guests it runs: survive a restart, one file per VMI, the old single file taken over."""

from __future__ import annotations

import json
from pathlib import Path

from pykubevirt.handler.records import NodeRecords


def test_records_survive_a_restart(tmp_path: Path) -> None:
    records = NodeRecords(tmp_path / "vmis.json")
    records.put("default/a", "vmi-a", "pod-a")
    records.put("default/b", "vmi-b", "pod-b")
    records.start_shutdown("default/a", 12.5)
    records.remove("default/b")
    again = NodeRecords(tmp_path / "vmis.json")
    assert again.keys() == ["default/a"]
    assert again.get("default/a") == {"vmiUid": "vmi-a", "podUid": "pod-a", "shutdownStarted": 12.5}
    assert again.shutdown_started("default/a") == 12.5


def test_a_change_writes_only_that_vmis_file(tmp_path: Path) -> None:
    records = NodeRecords(tmp_path / "vmis.json")
    for i in range(20):
        records.put(f"ns/vm-{i}", f"vmi-{i}", f"pod-{i}")
    files = sorted((tmp_path / "vmis.d").iterdir())
    assert len(files) == 20
    before = {f.name: f.stat().st_ino for f in files}
    records.put("ns/vm-3", "vmi-3", "pod-3-new")
    changed = [f.name for f in sorted((tmp_path / "vmis.d").iterdir()) if f.stat().st_ino != before[f.name]]
    assert changed == ["ns%2Fvm-3.json"]


def test_the_former_single_file_is_taken_over(tmp_path: Path) -> None:
    legacy = tmp_path / "vmis.json"
    legacy.write_text(json.dumps({"default/old": {"vmiUid": "u", "podUid": "p", "shutdownStarted": 3.0}}))
    records = NodeRecords(legacy)
    assert records.get("default/old") == {"vmiUid": "u", "podUid": "p", "shutdownStarted": 3.0}
    assert not legacy.exists()
    assert NodeRecords(legacy).get("default/old") == {"vmiUid": "u", "podUid": "p", "shutdownStarted": 3.0}
