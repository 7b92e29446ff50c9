"""Persistent disks on a real guest: a VM boots from a PVC the test fills with the demo image (class `shared`,
Immediate), with a second, blank PVC of the default class `local` (WaitForFirstConsumer: provisioned on the node the
launcher pod is scheduled to, its disk.img created sparse by the launcher); a marker the guest writes to that disk
is still there after the VM restarts."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import http.server
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.api import pod_layout
from pykubevirt.api.quantity import MI
from pykubevirt.client.resources import (
    CLUSTER_PREFERENCES,
    CONFIG_MAPS,
    DATA_SOURCES,
    DATA_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    SECRETS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from pykubevirt.handler.launcher_client import connectable
from pykubevirt.launcher.pvc_disks import possible_guest_size
from tests.e2e.test_vm_lifecycle import DEMO
from tests.support.cluster import ClusterView
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e
VIRTCTL = str(Path(sys.executable).parent / "virtctl")

MARKER_SCRIPT = """#!/bin/sh
if [ "$(head -c 14 /dev/vdb)" = persist-marker ]; then
  echo found-persisted-marker >/dev/console
else
  printf persist-marker >/dev/vdb && sync && echo wrote-persisted-marker >/dev/console
fi
"""


def claim(name: str, size: str, class_name: str, modes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}, "storageClassName": class_name},
    }


def pvc_vm(name: str) -> dict[str, Any]:
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": name}
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"] = [
        {"name": "rootdisk", "disk": {"bus": "virtio"}},
        {"name": "datadisk", "disk": {"bus": "virtio"}, "serial": "data-0001", "cache": "writethrough"},
        {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
    ]
    spec["volumes"] = [
        {"name": "rootdisk", "persistentVolumeClaim": {"claimName": f"{name}-boot"}},
        {"name": "datadisk", "persistentVolumeClaim": {"claimName": f"{name}-data"}},
        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": MARKER_SCRIPT}},
    ]
    return vm


async def test_a_vm_boots_from_a_pvc_and_its_data_survives_a_restart(kube: ClusterView, guest_image: Path) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("pvm-boot", "64Mi", "shared", ["ReadWriteMany"]), ns)
    await admin.create(PERSISTENT_VOLUME_CLAIMS, claim("pvm-data", "16Mi", "local", ["ReadWriteOnce"]), ns)

    async def boot_volume() -> Path | None:
        pvc = await admin.get(PERSISTENT_VOLUME_CLAIMS, "pvm-boot", ns)
        if (pvc.get("status") or {}).get("phase") != "Bound":
            return None
        pv = await admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
        return Path(pv["spec"]["hostPath"]["path"])

    directory = await eventually(boot_volume, timeout=30)
    # What an import would do: the raw demo image as the volume's disk.img.
    shutil.copyfile(guest_image, directory / "disk.img")
    assert (await admin.get(PERSISTENT_VOLUME_CLAIMS, "pvm-data", ns))["status"]["phase"] == "Pending"

    await admin.create(VIRTUAL_MACHINES, pvc_vm("pvm"), ns)
    first = await kube.wait_vmi_phase(ns, "pvm", "Running", timeout=120)
    pod = await kube.launcher_pod(first)
    await kube.wait_serial(kube.node, pod, first, "wrote-persisted-marker", timeout=120)

    # The blank claim was provisioned on the launcher's node, and its disk.img created sparse at the claim's size.
    data = await admin.get(PERSISTENT_VOLUME_CLAIMS, "pvm-data", ns)
    assert data["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == kube.node.name
    data_pv = await admin.get(PERSISTENT_VOLUMES, data["spec"]["volumeName"])
    data_image = Path(data_pv["spec"]["hostPath"]["path"]) / "disk.img"
    assert data_image.stat().st_size == 16 * MI
    assert data_image.read_bytes()[:14] == b"persist-marker"
    # The controller tells the launcher what it knows of each claim.
    statuses = {s["name"]: s for s in first["status"].get("volumeStatus") or []}
    assert statuses["datadisk"]["persistentVolumeClaimInfo"]["capacity"] == {"storage": "16Mi"}
    xml = pod_runtime_xml(pod).read_text()
    assert "<serial>data-0001</serial>" in xml
    assert 'cache="writethrough"' in xml or "cache='writethrough'" in xml

    # Restart: a new VMI, a new launcher pod, the same disks.
    await admin.delete(VIRTUAL_MACHINE_INSTANCES, "pvm", ns)

    async def restarted() -> dict[str, Any] | None:
        vmi = await kube.vmi(ns, "pvm")
        if vmi is None or vmi["metadata"]["uid"] == first["metadata"]["uid"]:
            return None
        return vmi if (vmi.get("status") or {}).get("phase") == "Running" else None

    second = await eventually(restarted, timeout=180, interval=0.5)
    pod = await kube.launcher_pod(second)
    await kube.wait_serial(kube.node, pod, second, "found-persisted-marker", timeout=120)


SIZE_SCRIPT = """#!/bin/sh
echo "vdb-sectors $(cat /sys/block/vdb/size)" >/dev/console
"""


def dv_vm(name: str, namespace: str, source_claim: str) -> dict[str, Any]:
    """A VM whose dataVolumeTemplates clone `source_claim` as its root disk and add a blank 16Mi disk."""
    vm = pvc_vm(name)
    vm["spec"]["dataVolumeTemplates"] = [
        {
            "metadata": {"name": f"{name}-root"},
            "spec": {
                "source": {"pvc": {"namespace": namespace, "name": source_claim}},
                "storage": {"resources": {"requests": {"storage": "64Mi"}}},
            },
        },
        {
            "metadata": {"name": f"{name}-blank"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "16Mi"}}}},
        },
    ]
    spec = vm["spec"]["template"]["spec"]
    spec["volumes"] = [
        {"name": "rootdisk", "dataVolume": {"name": f"{name}-root"}},
        {"name": "datadisk", "dataVolume": {"name": f"{name}-blank"}},
        {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": SIZE_SCRIPT}},
    ]
    return vm


async def boot_claim(kube: ClusterView, ns: str, name: str, guest_image: Path) -> Path:
    """A `shared` claim holding the demo image as disk.img; returns its directory."""
    await kube.admin.create(PERSISTENT_VOLUME_CLAIMS, claim(name, "64Mi", "shared", ["ReadWriteMany"]), ns)

    async def bound() -> Path | None:
        pvc = await kube.admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
        if (pvc.get("status") or {}).get("phase") != "Bound":
            return None
        pv = await kube.admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
        return Path(pv["spec"]["hostPath"]["path"])

    directory = await eventually(bound, timeout=30)
    shutil.copyfile(guest_image, directory / "disk.img")
    return directory


async def test_data_volume_templates_clone_a_claim_and_add_a_blank_disk(kube: ClusterView, guest_image: Path) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    await boot_claim(kube, ns, "golden", guest_image)
    await admin.create(VIRTUAL_MACHINES, dv_vm("dvm", ns, "golden"), ns)
    vmi = await kube.wait_vmi_phase(ns, "dvm", "Running", timeout=180)
    for name in ("dvm-root", "dvm-blank"):
        dv = await admin.get(DATA_VOLUMES, name, ns)
        assert dv["status"]["phase"] == "Succeeded"
        assert dv["status"]["progress"] == "100.0%"
        conditions = {c["type"]: (c["status"], c.get("reason")) for c in dv["status"]["conditions"]}
        assert conditions["Bound"] == ("True", "Bound")
        assert conditions["Ready"][0] == "True"
        pvc = await admin.get(PERSISTENT_VOLUME_CLAIMS, name, ns)
        assert pvc["metadata"]["ownerReferences"][0]["uid"] == dv["metadata"]["uid"]
        assert pvc["metadata"]["annotations"]["cdi.kubevirt.io/storage.pod.phase"] == "Succeeded"
    blank = await admin.get(PERSISTENT_VOLUME_CLAIMS, "dvm-blank", ns)
    # CDI's filesystem overhead: the claim asks for 16Mi * 1.06, the image gets the 16Mi.
    assert blank["spec"]["resources"]["requests"]["storage"] == "17783849"
    ready = {c["type"]: c for c in vmi["status"]["conditions"]}["DataVolumesReady"]
    assert (ready["status"], ready["reason"]) == ("True", "AllDVsReady")
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, f"vdb-sectors {16 * MI // 512}", timeout=120)
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: booted", timeout=60)

    # Deleting the VM deletes its DataVolumes, their claims and (reclaim Delete) their volumes; the golden claim stays.
    volumes = [
        (await admin.get(PERSISTENT_VOLUME_CLAIMS, n, ns))["spec"]["volumeName"] for n in ("dvm-root", "dvm-blank")
    ]
    await admin.delete(VIRTUAL_MACHINES, "dvm", ns)

    async def reclaimed() -> bool:
        names = {pv["metadata"]["name"] for pv in (await admin.list(PERSISTENT_VOLUMES))["items"]}
        claims = {c["metadata"]["name"] for c in (await admin.list(PERSISTENT_VOLUME_CLAIMS, ns))["items"]}
        return not names & set(volumes) and claims == {"golden"}

    await eventually(reclaimed, timeout=120, interval=0.5)


@contextlib.contextmanager
def loopback_file_server(directory: Path) -> Iterator[int]:
    """An HTTP server for `directory` on 127.0.0.1 (a free port), in a thread of this test."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def qcow2_of(image: Path, directory: Path) -> Path:
    out = directory / "demo-guest.qcow2"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(image), str(out)], check=True)
    return out


async def test_a_vm_boots_from_a_dv_template_importing_the_demo_qcow2_over_http(
    kube: ClusterView, guest_image: Path, tmp_path: Path
) -> None:
    ns = await kube.namespace()
    admin = kube.admin
    served = tmp_path / "served"
    served.mkdir()
    qcow2 = await asyncio.to_thread(qcow2_of, guest_image, served)
    with loopback_file_server(served) as port:
        vm = copy.deepcopy(DEMO)
        vm["metadata"] = {"name": "hvm"}
        vm["spec"]["dataVolumeTemplates"] = [
            {
                "metadata": {"name": "hvm-root"},
                "spec": {
                    "source": {"http": {"url": f"http://127.0.0.1:{port}/{qcow2.name}"}},
                    "storage": {"resources": {"requests": {"storage": "64Mi"}}},
                },
            }
        ]
        spec = vm["spec"]["template"]["spec"]
        spec["domain"]["devices"]["disks"] = [
            {"name": "rootdisk", "disk": {"bus": "virtio"}},
            {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
        ]
        spec["volumes"] = [
            {"name": "rootdisk", "dataVolume": {"name": "hvm-root"}},
            {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#!/bin/sh\necho imported-over-http\n"}},
        ]
        await admin.create(VIRTUAL_MACHINES, vm, ns)
        vmi = await kube.wait_vmi_phase(ns, "hvm", "Running", timeout=240)
    dv = await admin.get(DATA_VOLUMES, "hvm-root", ns)
    assert (dv["status"]["phase"], dv["status"]["progress"]) == ("Succeeded", "100.0%")
    pvc = await admin.get(PERSISTENT_VOLUME_CLAIMS, "hvm-root", ns)
    annotations = pvc["metadata"]["annotations"]
    assert annotations["cdi.kubevirt.io/storage.import.source"] == "http"
    assert annotations["cdi.kubevirt.io/storage.import.endpoint"].endswith("/demo-guest.qcow2")
    pv = await admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    disk = Path(pv["spec"]["hostPath"]["path"]) / "disk.img"
    # Raw, and grown to the claim's usable space (64Mi; the claim asks for 6 % more).
    assert disk.read_bytes()[:4] != b"QFI\xfb"
    assert disk.stat().st_size == 64 * MI
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: booted", timeout=120)
    await kube.wait_serial(kube.node, pod, vmi, "imported-over-http", timeout=60)
    await admin.delete(VIRTUAL_MACHINES, "hvm", ns)


def pod_runtime_xml(pod: dict[str, Any]) -> Path:
    """The domain XML the launcher wrote in its short runtime directory."""
    return Path(pod_layout.short_runtime_dir(pod["metadata"]["uid"])) / "domain.xml"


class Console:
    """The guest's serial console, held open while the test types, as `virtctl console` holds it."""

    def __init__(self, kube: ClusterView, pod: dict[str, Any], vmi: dict[str, Any]) -> None:
        self.kube, self.pod, self.vmi = kube, pod, vmi
        self.writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Console:
        path = pod_layout.serial_socket(
            str(self.kube.node.pods_dir), self.pod["metadata"]["uid"], self.vmi["metadata"]["uid"]
        )
        _, self.writer = await asyncio.open_unix_connection(connectable(path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.writer is not None
        self.writer.close()
        await self.writer.wait_closed()

    async def type(self, line: str) -> None:
        """One line, a few bytes at a time: the guest's UART takes 16 bytes at once and QEMU holds the rest."""
        assert self.writer is not None
        data = line.encode() + b"\n"
        for start in range(0, len(data), 8):
            self.writer.write(data[start : start + 8])
            await self.writer.drain()
            await asyncio.sleep(0.02)

    async def answer(self, tag: str, command: str) -> str:
        """Type `echo "<tag>:$(<command>):end"` and return what the shell printed between the markers."""
        await self.type(f'echo "{tag}:$({command}):end"')
        # The typed line is echoed too, with `$(` in it; the answer is the line without it.
        pattern = re.compile(rf"{tag}:([^$:]*):end")
        log = self.kube.serial_log(self.kube.node, self.pod, self.vmi)

        async def answer() -> str | None:
            found = pattern.findall(log.read_text(errors="replace"))
            return found[-1] if found else None

        try:
            return await eventually(answer, timeout=60, interval=0.2)
        except AssertionError:
            raise AssertionError(
                f"no {tag} answer on the console:\n{log.read_text(errors='replace')[-2000:]}"
            ) from None

    async def answer_until(self, tag: str, command: str, wanted: str) -> None:
        """Ask again until the answer is `wanted`: the guest learns of a change to its disks on its own time."""
        answer = ""
        for attempt in range(30):
            answer = await self.answer(f"{tag}{attempt}", command)
            if answer == wanted:
                return
        raise AssertionError(f"{command} answered {answer!r}, never {wanted!r}")

    async def block_devices_until(self, tag: str, wanted: Callable[[list[str]], bool]) -> list[str]:
        """Ask for /sys/block again until `wanted` holds: the guest scans a hotplugged disk on its own time."""
        devices: list[str] = []
        for attempt in range(30):
            devices = (await self.answer(f"{tag}{attempt}", BLOCK_DEVICES)).split()
            if wanted(devices):
                return devices
        raise AssertionError(f"/sys/block never became what {tag} wanted: {devices}")


BLOCK_DEVICES = "ls /sys/block | tr '\\n' ' '"


def blank_dv(name: str, size: str) -> dict[str, Any]:
    """A blank DataVolume of class `shared` (Immediate: bound and filled before any pod uses it)."""
    return {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name},
        "spec": {
            "source": {"blank": {}},
            "storage": {
                "storageClassName": "shared",
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": size}},
            },
        },
    }


async def test_a_blank_disk_is_hotplugged_into_the_running_guest_then_unplugged(kube: ClusterView) -> None:
    """--persist puts the volume in the VM's template, so the guest has it from its start; removevolume --persist
    takes it out of the running guest and the template; then a plain addvolume hotplugs it into the running guest
    only, the claim grows under it, and removevolume unplugs it. One boot: the template is filled before the start
    rather than by restarting a running VM, which would prove the same at the cost of a second boot."""
    ns = await kube.namespace()
    admin = kube.admin
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": "hpvm"}
    vm["spec"]["runStrategy"] = "Halted"
    await admin.create(VIRTUAL_MACHINES, vm, ns)
    await admin.create(DATA_VOLUMES, blank_dv("hp-blank", "16Mi"), ns)
    await data_volume_succeeded(kube, ns, "hp-blank")

    # --persist on the stopped VM: only its template changes, and the VMI it starts has the volume.
    await kube.run("virtctl", "-n", ns, "addvolume", "hpvm", "--volume-name=hp-blank", "--persist")
    template = (await admin.get(VIRTUAL_MACHINES, "hpvm", ns))["spec"]["template"]["spec"]
    assert [v["name"] for v in template["volumes"]] == ["rootdisk", "cloudinitdisk", "hp-blank"]
    await kube.run("virtctl", "-n", ns, "start", "hpvm")
    vmi = await kube.wait_vmi_phase(ns, "hpvm", "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: ready", timeout=120)
    async with Console(kube, pod, vmi) as console:
        await console.block_devices_until("from-template", lambda devices: "sda" in devices)
        await kube.run("virtctl", "-n", ns, "removevolume", "hpvm", "--volume-name=hp-blank", "--persist")
        template = (await admin.get(VIRTUAL_MACHINES, "hpvm", ns))["spec"]["template"]["spec"]
        assert [v["name"] for v in template["volumes"]] == ["rootdisk", "cloudinitdisk"]
        before = await console.block_devices_until("before-plug", lambda devices: "sda" not in devices)
        assert "vda" in before
        await eventually(lambda: volume_gone(kube, ns), timeout=60, interval=0.5)
        await hotplug_and_unplug(kube, ns, console)
    await dump_memory(kube, ns, "hpvm")
    reasons = [reason for _, reason in await kube.events(ns, "hpvm")]
    for reason in ("AttachedToNode", "VolumeMountedToPod", "VolumeReady", "VolumeDetaching", "VolumeUnplugged"):
        assert reason in reasons


async def dump_memory(kube: ClusterView, ns: str, name: str) -> None:
    """virtctl memory-dump: a claim of the default (WaitForFirstConsumer) class made for it and placed on the VMI's
    node, the running guest's memory dumped into it, the file named in the VM's status and on the claim; then the
    association removed."""
    _, out, _ = await kube.run(
        "virtctl", "-n", ns, "memory-dump", "get", name, "--claim-name=hp-dump", "--create-claim"
    )
    assert f"PVC {ns}/hp-dump created" in out and f"Successfully submitted memory dump request of VM {name}" in out

    async def completed() -> dict[str, Any] | None:
        vm = await kube.admin.get(VIRTUAL_MACHINES, name, ns)
        request = (vm.get("status") or {}).get("memoryDumpRequest") or {}
        assert request.get("phase") != "Failed", request
        return request if request.get("phase") == "Completed" else None

    request = await eventually(completed, timeout=120, interval=1)
    assert re.fullmatch(rf"{name}-hp-dump-\d{{8}}-\d{{6}}\.memory\.dump", request["fileName"])
    assert request["startTimestamp"] <= request["endTimestamp"]
    pvc = await kube.admin.get(PERSISTENT_VOLUME_CLAIMS, "hp-dump", ns)
    assert pvc["metadata"]["annotations"]["kubevirt.io/memory-dump"] == request["fileName"]
    pv = await kube.admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    source = pv["spec"].get("local") or pv["spec"].get("hostPath")
    dump = Path(source["path"]) / request["fileName"]
    # An ELF core of the guest's memory (virDomainCoreDumpWithFormat, raw, memory only): its 128Mi of RAM at least.
    with dump.open("rb") as file:
        assert file.read(4) == b"\x7fELF"
    assert dump.stat().st_size >= 128 * MI
    vmi = await kube.vmi(ns, name)
    assert vmi is not None and all(s["name"] != "hp-dump" for s in vmi["status"].get("volumeStatus") or [])

    # The download: a VirtualMachineExport of the claim, its exporter pod, the API server's export link, a tarball.
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "dump.tar.gz"
        _, out, _ = await kube.run("virtctl", "-n", ns, "memory-dump", "download", name, f"--output={output}")
        assert f"VirtualMachineExport '{ns}/export-{name}-hp-dump' deleted successfully" in out
        with tarfile.open(output, "r:gz") as tar:
            member = tar.getmember(f"./{request['fileName']}")
            assert member.size == dump.stat().st_size
            extracted = tar.extractfile(member)
            assert extracted is not None and extracted.read(4) == b"\x7fELF"

    _, out, _ = await kube.run("virtctl", "-n", ns, "memory-dump", "remove", name)
    assert out.strip() == f"Successfully submitted remove memory dump association of VM {name}"

    async def dissociated() -> bool:
        vm = await kube.admin.get(VIRTUAL_MACHINES, name, ns)
        volumes = [v["name"] for v in vm["spec"]["template"]["spec"]["volumes"]]
        return "memoryDumpRequest" not in (vm.get("status") or {}) and "hp-dump" not in volumes

    await eventually(dissociated, timeout=60, interval=0.5)
    assert dump.exists()  # the dump stays on its claim


async def volume_gone(kube: ClusterView, ns: str) -> bool:
    """The VMI no longer lists hp-blank in its volumeStatus (virt-handler is done unplugging it)."""
    vmi = await kube.vmi(ns, "hpvm")
    assert vmi is not None
    return all(s["name"] != "hp-blank" for s in (vmi.get("status") or {}).get("volumeStatus") or [])


async def data_volume_succeeded(kube: ClusterView, ns: str, name: str) -> None:
    async def succeeded() -> bool:
        dv = await kube.admin.get(DATA_VOLUMES, name, ns)
        return (dv.get("status") or {}).get("phase") == "Succeeded"

    await eventually(succeeded, timeout=60, interval=0.5)


async def hotplug_and_unplug(kube: ClusterView, ns: str, console: Console) -> None:
    """virtctl addvolume, the disk in the guest, virtctl removevolume, the disk gone."""
    admin = kube.admin
    _, out, _ = await kube.run("virtctl", "-n", ns, "addvolume", "hpvm", "--volume-name=hp-blank", "--serial=hp0001")
    assert out.strip() == "Successfully submitted add volume request to VM hpvm for volume hp-blank"

    async def volume(phase: str | None) -> dict[str, Any] | None:
        current = await kube.vmi(ns, "hpvm")
        assert current is not None
        entry = next((s for s in current["status"].get("volumeStatus") or [] if s["name"] == "hp-blank"), None)
        if phase is None:
            return current if entry is None else None
        return entry if entry is not None and entry.get("phase") == phase else None

    ready = await eventually(lambda: volume("Ready"), timeout=60, interval=0.5)
    assert ready["target"] == "sda" and ready["hotplugVolume"] == {}
    # Without --persist only the VMI has it: the VM's template is unchanged.
    template = (await admin.get(VIRTUAL_MACHINES, "hpvm", ns))["spec"]["template"]["spec"]
    assert [v["name"] for v in template["volumes"]] == ["rootdisk", "cloudinitdisk"]

    # The guest sees a 16Mi SCSI disk appear.
    await console.block_devices_until("after-plug", lambda devices: "sda" in devices)
    assert await console.answer("sda-size", "cat /sys/block/sda/size") == str(16 * MI // 512)

    # Online expansion: the claim grows and the running guest's disk follows, KubeVirt's possibleGuestSize of it.
    grow = {"spec": {"resources": {"requests": {"storage": "40Mi"}}}}
    await admin.patch(PERSISTENT_VOLUME_CLAIMS, "hp-blank", grow, ns)
    await console.answer_until("grown", "cat /sys/block/sda/size", str(possible_guest_size(40 * MI, 0.055) // 512))

    _, out, _ = await kube.run("virtctl", "-n", ns, "removevolume", "hpvm", "--volume-name=hp-blank")
    assert out.strip() == "Successfully submitted remove volume request to VM hpvm for volume hp-blank"
    await eventually(lambda: volume(None), timeout=60, interval=0.5)
    unplugged = await console.block_devices_until("after-unplug", lambda devices: "sda" not in devices)
    assert "vda" in unplugged


async def test_a_vm_made_by_virtctl_create_boots_a_clone_of_a_golden_image_of_another_namespace(
    kube: ClusterView, guest_image: Path
) -> None:
    """The golden-image path of KubeVirt's user guide: a DataSource in a golden-image namespace names a claim holding
    an OS image (labelled with its preference), `virtctl create vm --volume-import=type:ds,src:NS/NAME` clones it
    into the user's namespace once its service account may (CDI's clone-sourcer), the preference is inferred, and
    the clone boots."""
    ns, golden = await kube.namespace(), await kube.namespace()
    admin = kube.admin
    preference_name = f"golden-{ns}"
    await boot_claim(kube, golden, "golden-os", guest_image)
    labels = {"instancetype.kubevirt.io/default-preference": preference_name}
    await admin.patch(PERSISTENT_VOLUME_CLAIMS, "golden-os", {"metadata": {"labels": labels}}, golden)
    preference = {
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterPreference",
        "metadata": {"name": preference_name},
        "spec": {"devices": {"preferredDiskBus": "virtio"}},
    }
    await admin.create(CLUSTER_PREFERENCES, preference)
    source = {
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataSource",
        "metadata": {"name": "golden"},
        "spec": {"source": {"pvc": {"name": "golden-os"}}},
    }
    await admin.create(DATA_SOURCES, source, golden)

    async def labelled() -> bool:
        found = await admin.get(DATA_SOURCES, "golden", golden)
        return (found["metadata"].get("labels") or {}).items() >= labels.items()

    await eventually(labelled, timeout=30)
    try:
        argv = [VIRTCTL, "create", "vm", "--name=gold", "--memory=128Mi", "--termination-grace-period=5"]
        # No size: the clone takes the golden claim's.
        argv.append(f"--volume-import=type:ds,src:{golden}/golden,name:gold-root")
        created = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, check=True)
        vm = yaml.safe_load(created.stdout)
        assert vm["spec"]["preference"] == {"inferFromVolume": "gold-root", "inferFromVolumeFailurePolicy": "Ignore"}
        await admin.create(VIRTUAL_MACHINES, vm, ns)
        stored = await admin.get(VIRTUAL_MACHINES, "gold", ns)
        # Admission inferred the preference from the DataSource's labels (a cluster preference: no kind label).
        assert stored["spec"]["preference"]["name"] == preference_name, stored["spec"]["preference"]

        async def refused() -> str | None:
            conditions = ((await admin.get(VIRTUAL_MACHINES, "gold", ns)).get("status") or {}).get("conditions") or []
            return next((c["message"] for c in conditions if c["type"] == "Failure"), None)

        # The VM's service account may not clone from the golden namespace yet.
        message = await eventually(refused, timeout=30)
        assert message.endswith(f"insufficient permissions in clone source namespace {golden}"), message
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"clone-for-{ns}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cdi.kubevirt.io:clone-sourcer",
            },
            "subjects": [{"kind": "Group", "name": f"system:serviceaccounts:{ns}"}],
        }
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{golden}/rolebindings"
        await admin.request("POST", path, body=binding)

        vmi = await kube.wait_vmi_phase(ns, "gold", "Running", timeout=240)
        disks = {d["name"]: d for d in vmi["spec"]["domain"]["devices"]["disks"]}
        assert disks["gold-root"]["disk"]["bus"] == "virtio"
        dv = await admin.get(DATA_VOLUMES, "gold-root", ns)
        assert dv["status"]["phase"] == "Succeeded"
        # KubeVirt made the DataVolume with the source the DataSource names.
        assert dv["spec"]["source"] == {"pvc": {"name": "golden-os", "namespace": golden}}
        pod = await kube.launcher_pod(vmi)
        await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: booted", timeout=120)
        await admin.delete(VIRTUAL_MACHINES, "gold", ns)
    finally:
        await admin.delete(CLUSTER_PREFERENCES, preference_name)


async def test_configmap_secret_and_service_account_volumes_are_disks_the_guest_mounts(kube: ClusterView) -> None:
    """KubeVirt's config disks: a ConfigMap, a Secret and the namespace's default service account as ISO disks (the
    ConfigMap's with its `volumeLabel`), found in the guest by their serials and mounted, their keys as files."""
    ns = await kube.namespace()
    admin = kube.admin
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}}
    config_map["data"] = {"DATABASE": "staging", "app.properties": "greeting=hello\n"}
    await admin.create(CONFIG_MAPS, config_map, ns)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-secret"}}
    secret["stringData"] = {"password": "s3cret"}
    await admin.create(SECRETS, secret, ns)
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": "cfgvm"}
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["disks"] += [
        {"name": "appcfg", "disk": {"bus": "virtio"}, "serial": "CFG1"},
        {"name": "appsecret", "disk": {"bus": "virtio"}, "serial": "SEC1"},
        {"name": "account", "disk": {"bus": "virtio"}, "serial": "SA1"},
    ]
    spec["volumes"] += [
        {"name": "appcfg", "configMap": {"name": "app-config", "volumeLabel": "APPCFG"}},
        {"name": "appsecret", "secret": {"secretName": "app-secret"}},
        {"name": "account", "serviceAccount": {"serviceAccountName": "default"}},
    ]
    await admin.create(VIRTUAL_MACHINES, vm, ns)
    vmi = await kube.wait_vmi_phase(ns, "cfgvm", "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: ready", timeout=120)

    def mounted(serial: str, where: str) -> str:
        device = f'$(for b in /sys/block/vd*; do [ "$(cat $b/serial)" = {serial} ] && basename $b; done)'
        return f"mkdir -p {where} && mount -t iso9660 -o ro /dev/{device} {where} && ls {where} | tr '\\n' ' '"

    async with Console(kube, pod, vmi) as console:
        assert (await console.answer("cfgfiles", mounted("CFG1", "/mnt/cfg"))).split() == ["DATABASE", "app.properties"]
        assert await console.answer("cfgdb", "cat /mnt/cfg/DATABASE") == "staging"
        await console.answer("secfiles", mounted("SEC1", "/mnt/sec"))
        assert await console.answer("secpw", "cat /mnt/sec/password") == "s3cret"
        # The account's token, the cluster CA and the namespace, as kube's admission mounted them in the launcher pod.
        assert (await console.answer("safiles", mounted("SA1", "/mnt/sa"))).split() == ["ca.crt", "namespace", "token"]
        assert await console.answer("sans", "cat /mnt/sa/namespace") == ns
        assert await console.answer("saca", "head -n 1 /mnt/sa/ca.crt") == "-----BEGIN CERTIFICATE-----"
    await admin.delete(VIRTUAL_MACHINES, "cfgvm", ns)
