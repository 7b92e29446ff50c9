"""Online disk expansion through a real launcher and a real QEMU (no guest OS: the firmware waits for a boot disk,
which is enough for QEMU to hold the disk open and resize it): a claim whose capacity grew in the VMI's volumeStatus
is grown under the running domain on the next sync, to KubeVirt's possibleGuestSize."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api.quantity import MI
from pykubevirt.launcher.pvc_disks import possible_guest_size
from tests.support.launcher_process import LauncherProcess, defaulted_vmi, start_launcher


def claim_status(capacity: str) -> dict[str, Any]:
    info = {
        "claimName": "data-claim",
        "accessModes": ["ReadWriteOnce"],
        "volumeMode": "Filesystem",
        "capacity": {"storage": capacity},
        "requests": {"storage": capacity},
        "filesystemOverhead": "0.055",
    }
    return {"name": "data", "target": "", "persistentVolumeClaimInfo": info}


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[LauncherProcess]:
    # An embedded libvirt and QEMU (the last --libvirt-uri wins over the test driver's), emulated where no KVM is.
    proc = start_launcher(tmp_path, "grow", str(uuid.uuid4()), "--libvirt-uri", "", "--allow-emulation")
    yield proc
    proc.stop()


async def test_a_grown_claim_is_resized_under_the_running_domain(launcher: LauncherProcess) -> None:
    vmi = defaulted_vmi(
        "grow",
        launcher.vmi_uid,
        domain={
            "memory": {"guest": "64Mi"},
            "devices": {"disks": [{"name": "data", "disk": {"bus": "virtio"}}]},
        },
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}}],
    )
    vmi["status"]["volumeStatus"] = [claim_status("16Mi")]
    claim_dir = launcher.pod_dir / "volumes" / "private" / "vmi-disks" / "data"
    claim_dir.mkdir(parents=True)
    image = claim_dir / "disk.img"
    await launcher.wait_ready(within=60)

    status = await launcher.client().sync(vmi)
    assert status["domain"]["state"] == "Running", launcher.log()
    assert image.stat().st_size == 16 * MI  # created sparse at the claim's capacity

    # The claim was expanded to 64Mi: the next sync grows the disk the running QEMU holds.
    grown = copy.deepcopy(vmi)
    grown["status"]["volumeStatus"] = [claim_status("64Mi")]
    status = await launcher.client().sync(grown)
    wanted = possible_guest_size(64 * MI, 0.055)
    assert wanted == 60 * MI
    assert status["domain"]["state"] == "Running"
    assert image.stat().st_size == wanted, launcher.log()
    assert "expanding volume data from 16777216 to 62914560 bytes" in launcher.log()

    # Nothing shrinks: a sync with the old capacity leaves the grown disk alone.
    status = await launcher.client().sync(vmi)
    assert image.stat().st_size == wanted
    assert status["domain"]["state"] == "Running"
