"""Firmware and devices on real QEMU guests (TCG here): the specification's three firmware scenarios, UEFI with and
without Secure Boot, a missing OVMF image, direct kernel boot, TPM, persistent EFI variables and TPM state across a
restart and a snapshot's restore, virtio-rng and the i6300esb watchdog's actions. One cluster for the module; its
launchers read OVMF from a directory of links the missing-firmware test can take one out of."""

from __future__ import annotations

import asyncio
import copy
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pykubevirt.api import pod_layout
from pykubevirt.client.resources import (
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
    VM_RESTORES,
    VM_SNAPSHOTS,
)
from pykubevirt.launcher.host_firmware import EFI_VARS
from pykubevirt.node.cpu_manager import parse_cpu_list
from tests.e2e.test_vm_lifecycle import qemu_pid
from tests.paths import REPO
from tests.support.cluster import DEMO_IMAGE, DEMO_KERNEL_IMAGE, ClusterView, EmbeddedCluster
from tests.support.snapshot_manifests import vm_restore, vm_snapshot
from tests.support.waiting import eventually, status_when

# Guests boot under TCG on a loaded host, OVMF slowest of all: more than the suite's 300 s a test.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

BOOTED = "pykubevirt-guest: booted"
SCENARIOS = REPO / "tests" / "data" / "examples" / "scenarios"
HOST_OVMF = Path("/usr/share/OVMF")
# Seconds a launcher waits for its guest to start before it exits (KubeVirt: 240 plus up to 119).
QEMU_TIMEOUT = 45
# OVMF, systemd-boot and the kernel do not fit in the scenarios' 128Mi: the firmware alone takes most of it.
EFI_GUEST_MEMORY = "256Mi"
# OVMF under TCG is slow to reach its boot manager, and slower still with SMM (Secure Boot).
EFI_BOOT_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def ovmf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Links to the host's OVMF images: the launchers' --ovmf-path, so one test can take an image away."""
    if not (HOST_OVMF / EFI_VARS).exists():
        pytest.fail("the ovmf package is not installed: run scripts/setup-host.sh")
    links = tmp_path_factory.mktemp("ovmf")
    for image in HOST_OVMF.iterdir():
        (links / image.name).symlink_to(image)
    return links


NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
# 2 MiB pages this module reserves before its node registers (the kubelet reads them once, at start): a 128Mi guest
# and some to spare.
HUGEPAGES = 80


@pytest.fixture(scope="module")
def reserved_hugepages() -> Iterator[int]:
    """HUGEPAGES more 2 MiB pages reserved on the host for the module, given back afterwards."""
    before = int(NR_HUGEPAGES.read_text())
    NR_HUGEPAGES.write_text(str(before + HUGEPAGES))
    try:
        yield int(NR_HUGEPAGES.read_text())
    finally:
        NR_HUGEPAGES.write_text(str(before))


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, images_dir: Path, ovmf_dir: Path, reserved_hugepages: int
) -> Iterator[EmbeddedCluster]:
    flags = {
        "virt-controller": ("--ovmf-path", str(ovmf_dir), "--launcher-qemu-timeout", str(QEMU_TIMEOUT)),
        # The static CPU manager (CPU 0 reserved, as kubelets must keep some): the node gets kubevirt.io/cpumanager.
        "node": ("--cpu-manager-policy", "static", "--reserved-cpus", "0"),
    }
    running = EmbeddedCluster.start(tmp_path_factory.mktemp("cluster"), images_dir, flags=flags)
    yield running
    running.stop()


def scenario_vm(file_name: str, name: str) -> dict[str, Any]:
    """A specification scenario as written, running the demo guest instead of Fedora."""
    vm: dict[str, Any] = yaml.safe_load((SCENARIOS / file_name).read_text())
    vm["metadata"]["name"] = name
    vm["spec"]["runStrategy"] = "Always"
    template = vm["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("labels", {})["kubevirt.io/domain"] = name
    template["spec"]["terminationGracePeriodSeconds"] = 0
    for volume in template["spec"]["volumes"]:
        if "containerDisk" in volume:
            volume["containerDisk"]["image"] = DEMO_IMAGE
    return vm


def guest_vmi(name: str, domain: dict[str, Any], user_data: str = "") -> dict[str, Any]:
    """The demo guest as a bare VMI with extra domain parts and, if given, NoCloud user-data."""
    disks: list[dict[str, Any]] = [{"name": "root", "disk": {"bus": "virtio"}}]
    volumes: list[dict[str, Any]] = [{"name": "root", "containerDisk": {"image": DEMO_IMAGE}}]
    if user_data:
        disks.append({"name": "cloudinit", "disk": {"bus": "virtio"}})
        volumes.append({"name": "cloudinit", "cloudInitNoCloud": {"userData": user_data}})
    spec_domain = copy.deepcopy(domain)
    spec_domain.setdefault("memory", {"guest": "128Mi"})
    spec_domain.setdefault("devices", {})["disks"] = disks
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0, "domain": spec_domain, "volumes": volumes},
    }


def runcmd(*commands: str) -> str:
    return "#cloud-config\nruncmd:\n" + "".join(
        f"  - {yaml.safe_dump(c, default_style=chr(39)).strip()}\n" for c in commands
    )


async def console_of(kube: ClusterView, ns: str, name: str, text: str, timeout: float = 120.0) -> str:  # noqa: ASYNC109
    """The VMI's serial console log once it shows `text`."""
    vmi = await kube.wait_vmi_phase(ns, name, "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    return await kube.wait_serial(kube.node, pod, vmi, text, timeout=timeout)


# ------------------------------------------------------------------------------------------------ firmware


async def test_bios_scenarios_boot_and_use_serial_puts_seabios_on_the_console(kube: ClusterView) -> None:
    ns = await kube.namespace()
    await kube.admin.create(VIRTUAL_MACHINES, scenario_vm("032-bios-useserial.yaml", "bios-useserial"), ns)
    await kube.admin.create(VIRTUAL_MACHINES, scenario_vm("033-bios-default.yaml", "bios-default"), ns)
    serial, default = await asyncio.gather(
        console_of(kube, ns, "bios-useserial", BOOTED), console_of(kube, ns, "bios-default", BOOTED)
    )
    # bios.useSerial: SeaBIOS writes to the serial port too; by default it writes only to the screen.
    assert "SeaBIOS" in serial
    assert "SeaBIOS" not in default
    for name in ("bios-useserial", "bios-default"):
        await kube.wait_printable(ns, name, "Running")
        await kube.admin.delete(VIRTUAL_MACHINES, name, ns)


async def test_uefi_without_secure_boot_boots_the_demo_guest(kube: ClusterView) -> None:
    ns = await kube.namespace()
    efi = {"firmware": {"bootloader": {"efi": {"secureBoot": False}}}, "memory": {"guest": EFI_GUEST_MEMORY}}
    await kube.admin.create(VIRTUAL_MACHINE_INSTANCES, guest_vmi("uefi", efi), ns)
    console = await console_of(kube, ns, "uefi", BOOTED, timeout=EFI_BOOT_TIMEOUT)
    # OVMF's boot manager started the removable-media loader (systemd-boot) from the guest's FAT filesystem.
    assert "BdsDxe: starting Boot" in console
    await kube.admin.delete(VIRTUAL_MACHINE_INSTANCES, "uefi", ns)


async def test_secure_boot_scenario_runs_ovmf_which_refuses_the_unsigned_loader(kube: ClusterView) -> None:
    ns = await kube.namespace()
    vm = scenario_vm("031-efi-secureboot.yaml", "efi-secureboot")
    domain = vm["spec"]["template"]["spec"]["domain"]
    # As written the scenario is rejected (Secure Boot needs SMM, which KubeVirt does not default); this is the fix
    # the rejection message asks for.
    domain["features"] = {"smm": {}}
    domain["memory"]["guest"] = EFI_GUEST_MEMORY
    # `persistent: true` stays: the vars file lives on the VM's backend-storage claim (the default class, `local`).
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    console = await console_of(kube, ns, "efi-secureboot", "Access Denied", timeout=EFI_BOOT_TIMEOUT)
    # The Microsoft-keys vars template enforces Secure Boot: systemd-boot is unsigned, so it never runs.
    assert "failed to load Boot" in console
    assert BOOTED not in console
    await kube.wait_printable(ns, "efi-secureboot", "Running")
    await kube.admin.delete(VIRTUAL_MACHINES, "efi-secureboot", ns)


async def sync_failed_event(kube: ClusterView, ns: str) -> bool:
    return ("Warning", "SyncFailed") in await kube.events(ns, "no-ovmf")


async def test_a_missing_ovmf_image_is_named_and_the_vm_ends_in_crash_loop_backoff(
    kube: ClusterView, ovmf_dir: Path
) -> None:
    ns = await kube.namespace()
    # Every vars template goes (as root, a file made unreadable would still be read), so no code/vars pair is left.
    removed = sorted(ovmf_dir.glob("OVMF_VARS*.fd"))
    for link in removed:
        link.unlink()
    try:
        vm = scenario_vm("033-bios-default.yaml", "no-ovmf")
        vm["spec"]["template"]["spec"]["domain"]["firmware"] = {"bootloader": {"efi": {"secureBoot": False}}}
        await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
        wanted = "install the ovmf package on the node"

        async def unsynchronized() -> dict[str, Any] | None:
            vmi = await kube.vmi(ns, "no-ovmf")
            conditions = ((vmi or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Synchronized" and wanted in c["message"]), None)

        condition = await eventually(unsynchronized, timeout=120, interval=0.5)
        assert condition["status"] == "False"
        assert condition["message"].startswith("EFI OVMF rom missing for booting in EFI mode with SecureBoot disabled")

        async def mirrored() -> dict[str, Any] | None:
            # The VM controller copies the VMI's condition onto the VM from its own informer's event, a moment later.
            vm_now = await kube.vm(ns, "no-ovmf")
            conditions = ((vm_now or {}).get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Synchronized" and wanted in c["message"]), None)

        assert (await eventually(mirrored, timeout=30, interval=0.5))["status"] == "False"
        # virt-handler posts its event from a task of its own, beside the condition's patch.
        await eventually(lambda: sync_failed_event(kube, ns), timeout=30, interval=0.5)
        # The launcher gives up after its qemu-timeout, the VMI fails without having run, the VM backs off.
        await kube.wait_printable(ns, "no-ovmf", "CrashLoopBackOff", timeout=QEMU_TIMEOUT + 90)
    finally:
        for link in removed:
            link.symlink_to(HOST_OVMF / link.name)
        await kube.admin.delete(VIRTUAL_MACHINES, "no-ovmf", ns)


async def test_kernel_boot_example_boots_the_kernel_image_with_no_disk(kube: ClusterView) -> None:
    """examples/vm-kernel-boot.yaml: QEMU loads the demo guest's kernel and initrd from the kernel-boot image."""
    ns = await kube.namespace()
    vm: dict[str, Any] = yaml.safe_load((REPO / "examples" / "vm-kernel-boot.yaml").read_text())
    vm["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    assert vm["spec"]["template"]["spec"]["domain"]["firmware"]["kernelBoot"]["container"]["image"] == (
        DEMO_KERNEL_IMAGE
    )
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    vmi = await kube.wait_vmi_phase(ns, "kernel-boot", "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    console = await kube.wait_serial(kube.node, pod, vmi, BOOTED, timeout=180)
    # The guest's disk boots through syslinux, which prints its banner on the serial port; here nothing did.
    assert "SYSLINUX" not in console
    assert [c["name"] for c in pod["spec"]["containers"]] == ["compute", "volumekernel-boot-volume"]
    domain_xml = (Path(pod_layout.short_runtime_dir(pod["metadata"]["uid"])) / "domain.xml").read_text()
    assert "<disk" not in domain_xml
    # The launcher's container-disks dir, at its pod-volume path on this process-based node.
    assert "/container-disks/kernel-boot/vmlinuz</kernel>" in domain_xml
    assert "/container-disks/kernel-boot/initrd.gz</initrd>" in domain_xml
    assert "<cmdline>console=ttyS0 panic=-1 quiet no_timer_check</cmdline>" in domain_xml
    await kube.wait_printable(ns, "kernel-boot", "Running")
    await kube.admin.delete(VIRTUAL_MACHINES, "kernel-boot", ns)


# An OVMF variable store entry (edk2's AUTHENTICATED_VARIABLE_HEADER): StartId 0x55AA, State, …, NameSize and DataSize
# at 36, the UTF-16 name from 60, then the data. Only entries in state VAR_ADDED are live.
VAR_ADDED = 0x3F
VAR_HEADER_SIZE = 60


def efi_variables(store: bytes) -> dict[str, bytes]:
    """The live variables of an OVMF vars file by name (GUIDs aside)."""
    found: dict[str, bytes] = {}
    offset = 0
    while (offset := store.find(b"\xaa\x55", offset)) != -1:
        name_size, data_size = struct.unpack_from("<II", store, offset + 36)
        if store[offset + 2] == VAR_ADDED and 0 < name_size < 1024 and data_size < len(store):
            start = offset + VAR_HEADER_SIZE
            name = store[start : start + name_size].decode("utf-16-le", errors="replace").rstrip("\0")
            found[name] = store[start + name_size : start + name_size + data_size]
        offset += 2
    return found


def boot_count(vars_file: Path) -> int:
    """OVMF's monotonic counter (variable MTC): each boot from this vars file adds one."""
    return int(struct.unpack("<I", efi_variables(vars_file.read_bytes())["MTC"])[0])


async def test_persistent_efi_vars_and_tpm_state_survive_a_restart_and_a_restore(kube: ClusterView) -> None:
    """One VM with both: its backend-storage claim (class `local`) keeps the vars file and the swtpm state, which the
    launcher of the next start reuses instead of the template and a freshly manufactured TPM."""
    ns = await kube.namespace()
    domain = {
        "firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}},
        "devices": {"tpm": {"persistent": True}},
        "memory": {"guest": EFI_GUEST_MEMORY},
    }
    spec = guest_vmi("keeper", domain, runcmd('echo "tpm0: $(ls /dev/tpm0)"'))["spec"]
    template = {"metadata": {"labels": {"kubevirt.io/domain": "keeper"}}, "spec": spec}
    vm = {"metadata": {"name": "keeper"}, "spec": {"runStrategy": "Always", "template": template}}
    await kube.admin.create(VIRTUAL_MACHINES, {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", **vm}, ns)
    seen = "tpm0: /dev/tpm0"
    await console_of(kube, ns, "keeper", seen, timeout=EFI_BOOT_TIMEOUT)
    first = await kube.vmi(ns, "keeper") or {}
    first_pod = await kube.launcher_pod(first)
    claims = await kube.admin.list(PERSISTENT_VOLUME_CLAIMS, ns, label_selector="persistent-state-for=keeper")
    (pvc,) = claims["items"]
    pv = await kube.admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    state = Path(pv["spec"]["hostPath"]["path"])
    vars_file = state / "nvram" / "keeper_VARS.fd"
    (tpm_state,) = state.glob("swtpm/*/tpm2/tpm2-00.permall")
    domain_xml = (Path(pod_layout.short_runtime_dir(first_pod["metadata"]["uid"])) / "domain.xml").read_text()
    assert f">{vars_file}</nvram>" in domain_xml and 'persistent_state="yes"' in domain_xml
    booted_once = boot_count(vars_file)
    vars_inode = vars_file.stat().st_ino
    # libvirt made the TPM (swtpm_setup) for the first launcher.
    logs = Path(pod_layout.embed_root(first_pod["metadata"]["uid"])) / "log" / "swtpm"
    assert any("vTPM manufacturing" in log.read_text() for log in logs.rglob("*-swtpm.log"))

    await kube.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Halted"}}, ns)

    async def gone() -> bool:
        return await kube.vmi(ns, "keeper") is None

    await eventually(gone, timeout=120, interval=0.5)
    # A snapshot of the stopped VM takes its state claim with it (KubeVirt's volume name for it).
    await kube.admin.create(VM_SNAPSHOTS, vm_snapshot("after-first-boot", "keeper"), ns)
    snapshot = await status_when(
        kube.admin, VM_SNAPSHOTS, ns, "after-first-boot", lambda s: s.get("readyToUse") is True, timeout=120
    )
    assert snapshot["status"]["snapshotVolumes"]["includedVolumes"] == ["persistent-state-for-keeper"]
    await kube.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Always"}}, ns)
    await console_of(kube, ns, "keeper", seen, timeout=EFI_BOOT_TIMEOUT)
    second = await kube.vmi(ns, "keeper") or {}
    second_pod = await kube.launcher_pod(second)
    assert second_pod["metadata"]["uid"] != first_pod["metadata"]["uid"]
    # The same vars file, booted once more: a template copy would count one boot again.
    assert vars_file.stat().st_ino == vars_inode
    assert boot_count(vars_file) == booted_once + 1
    # The TPM state was reused, not manufactured again (no swtpm_setup run for the second launcher).
    assert tpm_state.exists()
    logs = Path(pod_layout.embed_root(second_pod["metadata"]["uid"])) / "log" / "swtpm"
    assert not any("vTPM manufacturing" in log.read_text() for log in logs.rglob("*-swtpm.log"))

    # Restored, the VM boots from the snapshot's variables (one boot after the first), on the restored claim, and
    # the claim it replaced is deleted.
    await kube.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Halted"}}, ns)
    await eventually(gone, timeout=120, interval=0.5)
    restore = vm_restore("back", "keeper", "after-first-boot")
    await kube.admin.create(VM_RESTORES, restore, ns)
    restored = await status_when(kube.admin, VM_RESTORES, ns, "back", lambda s: s.get("complete") is True, timeout=120)
    (entry,) = restored["status"]["restores"]
    await kube.admin.patch(VIRTUAL_MACHINES, "keeper", {"spec": {"runStrategy": "Always"}}, ns)
    await console_of(kube, ns, "keeper", seen, timeout=EFI_BOOT_TIMEOUT)
    (current,) = (await kube.admin.list(PERSISTENT_VOLUME_CLAIMS, ns, label_selector="persistent-state-for=keeper"))[
        "items"
    ]
    assert current["metadata"]["name"] == entry["persistentVolumeClaim"] != pvc["metadata"]["name"]
    pv = await kube.admin.get(PERSISTENT_VOLUMES, current["spec"]["volumeName"])
    assert boot_count(Path(pv["spec"]["hostPath"]["path"]) / "nvram" / "keeper_VARS.fd") == booted_once + 1
    await eventually(lambda: not vars_file.exists(), timeout=60, interval=0.5)
    await kube.admin.delete(VIRTUAL_MACHINES, "keeper", ns)


# ------------------------------------------------------------------------------------------------ devices


async def test_tpm_and_rng_are_seen_by_the_guest(kube: ClusterView) -> None:
    ns = await kube.namespace()
    domain = {"devices": {"tpm": {}, "rng": {}}}
    probe = runcmd(
        "ls /dev/tpm0 && echo tpm-present",
        "echo rng-available $(cat /sys/devices/virtual/misc/hw_random/rng_available)",
    )
    await kube.admin.create(VIRTUAL_MACHINE_INSTANCES, guest_vmi("devices", domain, probe), ns)
    console = await console_of(kube, ns, "devices", "rng-available")
    assert "tpm-present" in console
    rng_line = next(line for line in console.splitlines() if line.startswith("rng-available"))
    # The TPM brings an RNG of its own (tpm-rng-0); the virtio one is there beside it.
    assert "virtio_rng.0" in rng_line.split()
    await kube.admin.delete(VIRTUAL_MACHINE_INSTANCES, "devices", ns)


WATCHDOG_EXPIRES = runcmd("watchdog -T 2 -t 600 /dev/watchdog", "echo watchdog-armed")


async def test_watchdog_actions(kube: ClusterView) -> None:
    """The guest arms the i6300esb for 2 s and stops feeding it: poweroff and shutdown end the VMI, reset reboots."""
    ns = await kube.namespace()
    for action in ("poweroff", "reset", "shutdown"):
        domain = {"devices": {"watchdog": {"name": "wd", "i6300esb": {"action": action}}}}
        await kube.admin.create(VIRTUAL_MACHINE_INSTANCES, guest_vmi(f"wd-{action}", domain, WATCHDOG_EXPIRES), ns)
    reset_vmi = await kube.wait_vmi_phase(ns, "wd-reset", "Running", timeout=120)
    reset_pod = await kube.launcher_pod(reset_vmi)

    async def booted_twice() -> bool:
        log = kube.serial_log(kube.node, reset_pod, reset_vmi)
        return log.exists() and log.read_text(errors="replace").count(BOOTED) >= 2

    # KubeVirt maps libvirt's watchdog poweroff to a Failed VMI; shutdown is an ACPI power-off the guest obeys.
    poweroff, shutdown = await asyncio.gather(
        kube.wait_vmi_phase(ns, "wd-poweroff", "Failed", timeout=240),
        kube.wait_vmi_phase(ns, "wd-shutdown", "Succeeded", timeout=240),
    )
    assert poweroff["status"]["phase"] == "Failed" and shutdown["status"]["phase"] == "Succeeded"
    await eventually(booted_twice, timeout=240, interval=0.5)
    assert (await kube.vmi(ns, "wd-reset") or {})["status"]["phase"] == "Running"
    for action in ("poweroff", "reset", "shutdown"):
        await kube.admin.delete(VIRTUAL_MACHINE_INSTANCES, f"wd-{action}", ns)


def free_hugepages() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("HugePages_Free:"):
            return int(line.split()[1])
    raise AssertionError("no HugePages_Free in /proc/meminfo")


async def test_hugepages_vm_runs_backed_by_the_nodes_reserved_pages(kube: ClusterView, reserved_hugepages: int) -> None:
    node = await kube.admin.get(NODES, kube.node.name)
    assert node["status"]["capacity"]["hugepages-2Mi"] == f"{reserved_hugepages * 2}Mi"
    ns = await kube.namespace()
    free_before = free_hugepages()
    domain = {"memory": {"guest": "128Mi", "hugepages": {"pageSize": "2Mi"}}}
    await kube.admin.create(VIRTUAL_MACHINE_INSTANCES, guest_vmi("huge", domain), ns)
    vmi = await kube.wait_vmi_phase(ns, "huge", "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"] == "128Mi"
    await kube.wait_serial(kube.node, pod, vmi, BOOTED, timeout=180)
    # The guest's 128Mi came out of the reserved pool: 64 pages of 2 MiB.
    assert free_before - free_hugepages() >= 64
    await kube.admin.delete(VIRTUAL_MACHINE_INSTANCES, "huge", ns)
    await eventually(lambda: free_hugepages() >= free_before, timeout=120, interval=0.5)


def affinity(pid: int) -> set[int]:
    """Cpus_allowed_list of every thread of a process."""
    cpus: set[int] = set()
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                cpus |= parse_cpu_list(line.split(":", 1)[1])
    return cpus


async def test_dedicated_cpu_placement_pins_the_guest_to_an_exclusive_cpu(kube: ClusterView) -> None:
    node = await kube.admin.get(NODES, kube.node.name)
    assert node["metadata"]["labels"]["kubevirt.io/cpumanager"] == "true"
    ns = await kube.namespace()
    domain = {"cpu": {"cores": 1, "dedicatedCpuPlacement": True}, "resources": {"requests": {"memory": "128Mi"}}}
    await kube.admin.create(VIRTUAL_MACHINE_INSTANCES, guest_vmi("pinned", domain), ns)
    vmi = await kube.wait_vmi_phase(ns, "pinned", "Running", timeout=120)
    pod = await kube.launcher_pod(vmi)
    assert pod["spec"]["nodeSelector"]["kubevirt.io/cpumanager"] == "true"
    assert pod["status"]["qosClass"] == "Guaranteed"
    await kube.wait_serial(kube.node, pod, vmi, BOOTED, timeout=180)
    domain_xml = (Path(pod_layout.short_runtime_dir(pod["metadata"]["uid"])) / "domain.xml").read_text()
    host_cpus = os.cpu_count() or 1
    exclusive = set(range(1, host_cpus))
    assert '<vcpupin vcpu="0" cpuset="1"' in domain_xml
    # QEMU (every thread) runs on the exclusive CPU only, never on the reserved CPU 0.
    assert affinity(qemu_pid(pod, vmi)) <= exclusive
    await kube.admin.delete(VIRTUAL_MACHINE_INSTANCES, "pinned", ns)
