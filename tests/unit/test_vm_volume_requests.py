"""status.volumeRequests: virt-api's queueing rules and the VM controller's apply and trim (KubeVirt's messages)."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.controller.vm_volume_requests import remaining_requests, template_with_requests, vmi_requests
from pykubevirt.virtapi.volumes import VolumeRequest, queued_requests, status_patch

ADD = {"addVolumeOptions": {"name": "d", "disk": {"name": "d"}, "volumeSource": {"dataVolume": {"name": "d"}}}}
REMOVE = {"removeVolumeOptions": {"name": "d"}}


def vm(requests: list[dict[str, Any]], volumes: list[str], disks: list[str]) -> dict[str, Any]:
    spec = {"volumes": [{"name": v} for v in volumes], "domain": {"devices": {"disks": [{"name": d} for d in disks]}}}
    return {"spec": {"template": {"spec": spec}}, "status": {"volumeRequests": requests}}


def test_an_add_is_appended_unless_one_for_the_volume_is_queued() -> None:
    add = VolumeRequest(add=ADD["addVolumeOptions"])
    assert queued_requests([], add) == [ADD]
    with pytest.raises(ValueError, match=r"^add volume request for volume \[d\] already exists$"):
        queued_requests([ADD], add)
    with pytest.raises(ValueError, match=r"remove volume request for volume \[d\] already exists and is still being"):
        queued_requests([REMOVE], add)


def test_a_remove_drops_the_pending_add_of_its_volume() -> None:
    remove = VolumeRequest(remove={"name": "d"})
    assert queued_requests([ADD], remove) == [REMOVE]
    with pytest.raises(ValueError, match=r"^a remove volume request for volume \[d\] already exists"):
        queued_requests([REMOVE], remove)


def test_the_status_patch_tests_what_was_read() -> None:
    assert status_patch([], [ADD]) == [
        {"op": "test", "path": "/status/volumeRequests", "value": None},
        {"op": "add", "path": "/status/volumeRequests", "value": [ADD]},
    ]
    assert status_patch([ADD], [REMOVE])[1]["op"] == "replace"


def test_requests_apply_to_the_template_and_leave_once_it_shows_them() -> None:
    queued = vm([ADD], ["root"], ["root"])
    spec = template_with_requests(queued)
    assert [v["name"] for v in spec["volumes"]] == ["root", "d"]
    assert spec["volumes"][1]["dataVolume"] == {"name": "d", "hotpluggable": True}
    assert remaining_requests(queued) == [ADD]
    # Both the volume and the disk must be there for an add; neither for a remove.
    assert remaining_requests(vm([ADD], ["root", "d"], ["root"])) == [ADD]
    assert remaining_requests(vm([ADD], ["root", "d"], ["root", "d"])) == []
    assert remaining_requests(vm([REMOVE], ["root"], ["root", "d"])) == [REMOVE]
    assert remaining_requests(vm([REMOVE], ["root"], ["root"])) == []


def test_the_vmi_gets_only_what_it_lacks_and_nothing_while_it_goes() -> None:
    running = {"metadata": {}, "spec": {"volumes": [{"name": "root"}]}}
    assert vmi_requests(vm([ADD], [], []), running) == [ADD]
    assert vmi_requests(vm([REMOVE], [], []), running) == []
    has_it = {"metadata": {}, "spec": {"volumes": [{"name": "root"}, {"name": "d"}]}}
    assert vmi_requests(vm([ADD, REMOVE], [], []), has_it) == [REMOVE]
    going = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"volumes": []}}
    assert vmi_requests(vm([ADD], [], []), going) == []
    assert vmi_requests(vm([ADD], [], []), None) == []
