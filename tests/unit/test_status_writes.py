"""What a write to /status and a write to the main resource keep of the stored object and of the request."""

from __future__ import annotations

import json

from pykubevirt.apiserver.metadata import only_status_changes, without_status_changes

STORED = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {"name": "vmi", "labels": {"a": "1"}},
    "spec": {"domain": {"devices": {"disks": [{"name": "root"}]}}},
    "status": {"phase": "Scheduling", "conditions": [{"type": "Ready", "status": "False"}]},
}


def test_a_status_write_takes_only_the_status_and_leaves_the_stored_object_alone() -> None:
    before = json.dumps(STORED)
    request = {"metadata": {"name": "vmi", "labels": {"a": "changed"}}, "spec": {}, "status": {"phase": "Running"}}
    result = only_status_changes(request, STORED)
    assert list(result) == list(STORED)
    assert result["status"] == {"phase": "Running"}
    assert result["metadata"] == STORED["metadata"] and result["spec"] == STORED["spec"]
    result["metadata"]["labels"]["a"] = "x"
    result["spec"]["domain"]["devices"]["disks"][0]["name"] = "x"
    assert json.dumps(STORED) == before


def test_a_status_write_without_a_status_drops_it() -> None:
    assert "status" not in only_status_changes({"metadata": {}}, STORED)
    unstatused = {k: v for k, v in STORED.items() if k != "status"}
    assert only_status_changes({"status": {"phase": "Pending"}}, unstatused)["status"] == {"phase": "Pending"}


def test_a_main_resource_write_keeps_the_stored_status() -> None:
    before = json.dumps(STORED)
    request = {"metadata": {"name": "vmi"}, "spec": {"running": True}, "status": {"phase": "Failed"}}
    result = without_status_changes(request, STORED)
    assert result["spec"] == {"running": True}
    assert result["status"] == STORED["status"]
    result["status"]["conditions"][0]["status"] = "True"
    assert json.dumps(STORED) == before
    assert "status" not in without_status_changes({"spec": {}, "status": {"phase": "x"}}, {"spec": {}})
