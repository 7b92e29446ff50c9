"""The VMI → domain XML converter: golden files for every accepted example, libvirt's acceptance of each
document (test driver, and one real TCG guest under qemu:///embed), and the mapping rules one by one."""

from __future__ import annotations

import copy
import itertools
import os
import shutil
import subprocess
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import libvirt
import pytest
import yaml

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.vmi_from_vm import vmi_from_vm
from pykubevirt.instancetype.instancetype_apply import apply_instancetype
from pykubevirt.instancetype.preference_apply import apply_preference
from pykubevirt.launcher.converter import SMBIOS, ConversionError, ConverterContext, convert, domain_name
from pykubevirt.launcher.converter.disks import device_name
from pykubevirt.launcher.converter.interfaces import tap_name
from pykubevirt.launcher.domain_manager import embed_uri
from tests import paths
from tests.support.waiting import eventually_sync

GOLDEN_DIR = paths.REPO / "tests" / "data" / "converter"
REGENERATE = os.environ.get("REGENERATE_GOLDEN") == "1"
NOW = "2024-01-01T00:00:00Z"
VM_UID = "11111111-2222-4333-8444-555555555555"
VMI_UID = "f4686d2c-6e8d-4335-b8fd-81bee22f4814"
# The instance type and preference scenario 001 names, as test_examples_admission defines them.
STANDARD_2 = {"cpu": {"guest": 2}, "memory": {"guest": "4Gi"}}
FEDORA = {"devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio"}}

KV_NS = {"kv": "http://kubevirt.io"}
Obj = dict[str, Any]


# ------------------------------------------------------------------------------------------------ building VMIs


def admission() -> AdmissionContext:
    """Deterministic time and UUIDs, so the golden files never change by themselves."""
    counter = itertools.count(1)
    return AdmissionContext(now=lambda: NOW, random_uuid=lambda: f"00000000-0000-4000-8000-{next(counter):012d}")


def admit_vmi(vmi: Obj) -> Obj:
    vmi["metadata"].setdefault("namespace", "default")
    vmi["metadata"]["uid"] = VMI_UID
    vmi.setdefault("status", {})
    mutate_vmi(vmi, admission(), operation="CREATE")
    return vmi


def vmi_from_vm_doc(doc: Obj) -> Obj:
    """The VMI the VM controller creates from this VM (template, defaults, instance type), then the VMI mutator."""
    vm = copy.deepcopy(doc)
    vm["metadata"].setdefault("namespace", "default")
    vm["metadata"]["uid"] = VM_UID
    vmi = vmi_from_vm(vm, ClusterConfig())
    if vm["spec"].get("instancetype"):
        apply_instancetype(vmi["spec"], vmi["metadata"], STANDARD_2, FEDORA)
    if vm["spec"].get("preference"):
        apply_preference(FEDORA, vmi["spec"], vmi["metadata"])
    return admit_vmi(vmi)


def new_vmi(domain: Obj | None = None, volumes: list[Obj] | None = None, **spec: Any) -> Obj:
    """A VMI named `testvmi` with a 128Mi guest and the given domain parts, through admission defaults."""
    dom: Obj = {"memory": {"guest": "128Mi"}, "devices": {}}
    for key, value in (domain or {}).items():
        dom[key] = value
    body = {"domain": dom, "volumes": volumes or [], **spec}
    return admit_vmi(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "testvmi"},
            "spec": body,
        }
    )


def golden_ctx(vmi: Obj, block: frozenset[str] = frozenset()) -> ConverterContext:
    """KubeVirt's paths; containerDisks at the launcher's disk_<index>.img; LUNs and Block PVCs are block devices."""
    volumes = vmi["spec"].get("volumes") or []
    container_disks = {
        vol["name"]: (f"/var/run/kubevirt/container-disks/disk_{index}.img", "qcow2")
        for index, vol in enumerate(volumes)
        if "containerDisk" in vol
    }
    luns = {d["name"] for d in vmi["spec"]["domain"]["devices"].get("disks") or [] if "lun" in d}
    return ConverterContext(container_disks=container_disks, block_volumes=frozenset(luns) | block)


def load(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]


def accepted(path: Path) -> bool:
    return "expect: reject" not in path.read_text(encoding="utf-8").splitlines()[0]


def _scenario_case(path: Path) -> Callable[[], tuple[Obj, ConverterContext]]:
    def build() -> tuple[Obj, ConverterContext]:
        vmi = vmi_from_vm_doc(load(path)[-1])
        return vmi, golden_ctx(vmi)

    return build


def _seed_vmi_case(name: str) -> Callable[[], tuple[Obj, ConverterContext]]:
    def build() -> tuple[Obj, ConverterContext]:
        docs = load(paths.SEEDS / name)
        # PVCs in the same file tell which claims are block devices (seed 001's root disk is volumeMode Block).
        block_claims = {
            d["metadata"]["name"]
            for d in docs
            if d["kind"] == "PersistentVolumeClaim" and d["spec"].get("volumeMode") == "Block"
        }
        (doc,) = [d for d in docs if d["kind"] == "VirtualMachineInstance"]
        vmi = admit_vmi(copy.deepcopy(doc))
        block = frozenset(
            v["name"]
            for v in vmi["spec"]["volumes"]
            if (v.get("persistentVolumeClaim") or {}).get("claimName") in block_claims
        )
        return vmi, golden_ctx(vmi, block)

    return build


CASES: dict[str, Callable[[], tuple[Obj, ConverterContext]]] = {
    path.stem: _scenario_case(path) for path in sorted(paths.SCENARIOS.glob("*.yaml")) if accepted(path)
}
CASES["seed-001-vmi-centos01"] = _seed_vmi_case("001-vmi-centos01.yaml")
CASES["seed-003-vmi-my-vmi"] = _seed_vmi_case("003-vmi-my-vmi.yaml")


def case_xml(case: str) -> str:
    vmi, ctx = CASES[case]()
    return convert(vmi, ctx)


def parse(xml: str) -> Any:
    """The parsed domain, typed Any so tests can chain find(); a missing element fails with AttributeError."""
    return ET.fromstring(xml)


def dom_of(vmi: Obj, **ctx: Any) -> Any:
    base = golden_ctx(vmi)
    return parse(convert(vmi, replace(base, **ctx)))


@pytest.fixture(scope="module")
def test_conn() -> Iterator[libvirt.virConnect]:
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()


def assert_defines(conn: libvirt.virConnect, xml: str) -> None:
    """libvirt parses and validates the document (test driver: the QEMU driver's XML rules, no QEMU)."""
    dom = conn.defineXML(xml)
    try:
        assert dom.name() == parse(xml).findtext("name")
    finally:
        dom.undefine()


# ------------------------------------------------------------------------------------------------ golden files


def test_every_accepted_example_has_a_case() -> None:
    scenarios = sorted(paths.SCENARIOS.glob("*.yaml"))
    assert len(scenarios) == 103
    assert len(CASES) == sum(accepted(p) for p in scenarios) + 2 == 91


def test_golden_directory_has_no_stale_files() -> None:
    if REGENERATE:
        for stale in set(GOLDEN_DIR.glob("*.xml")) - {GOLDEN_DIR / f"{c}.xml" for c in CASES}:
            stale.unlink()
    assert {p.stem for p in GOLDEN_DIR.glob("*.xml")} - set(CASES) == set(), "golden files without a case"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    xml = case_xml(case)
    golden = GOLDEN_DIR / f"{case}.xml"
    if REGENERATE:
        GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
        golden.write_text(xml, encoding="utf-8")
    assert xml == golden.read_text(encoding="utf-8"), f"{case}: differs from {golden} (REGENERATE_GOLDEN=1 rewrites)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_libvirt_accepts(case: str, test_conn: libvirt.virConnect) -> None:
    assert_defines(test_conn, case_xml(case))


@pytest.mark.parametrize("case", sorted(CASES))
def test_libvirt_accepts_the_launcher_flavour(case: str, test_conn: libvirt.virConnect) -> None:
    """What our launcher actually asks for: TCG and user-mode networking."""
    vmi, ctx = CASES[case]()
    assert_defines(test_conn, convert(vmi, replace(ctx, use_emulation=True, network_mode="user")))


def test_conversion_is_pure() -> None:
    vmi, ctx = CASES["061-volumes-pvc-containerdisk-cloudinit"]()
    before = copy.deepcopy(vmi)
    assert convert(vmi, ctx) == convert(vmi, ctx)
    assert vmi == before


# ------------------------------------------------------------------------------------------------ top level


def test_name_type_and_no_uuid_element() -> None:
    vmi = new_vmi()
    dom = dom_of(vmi)
    assert dom.tag == "domain" and dom.get("type") == "kvm"
    assert dom.findtext("name") == "default_testvmi" == domain_name(vmi)
    # The domain UUID comes from the SMBIOS system uuid; a separate <uuid> could disagree with it.
    assert dom.find("uuid") is None
    assert [child.tag for child in dom][:3] == ["name", "memory", "os"]


def test_emulation_makes_a_qemu_domain_without_kvm_only_features() -> None:
    features = {
        "acpi": {},
        "kvm": {"hidden": True},
        "pvspinlock": {},
        "hyperv": {"relaxed": {}, "vapic": {}, "vpindex": {}},
    }
    vmi = new_vmi({"features": features, "cpu": {"model": "host-passthrough", "cores": 1}})
    kvm = dom_of(vmi)
    assert kvm.get("type") == "kvm"
    assert kvm.find("features/hyperv/vpindex").get("state") == "on"
    assert kvm.find("features/pvspinlock").get("state") == "on"
    assert kvm.find("cpu").get("mode") == "host-passthrough"
    tcg = dom_of(vmi, use_emulation=True)
    assert tcg.get("type") == "qemu"
    assert tcg.find("features/hyperv") is None
    assert tcg.find("features/pvspinlock") is None
    assert tcg.find("features/kvm/hidden").get("state") == "on"
    assert tcg.find("cpu").get("mode") == "maximum"


def test_emulation_keeps_host_model_and_disabled_pvspinlock() -> None:
    vmi = new_vmi({"features": {"pvspinlock": {"enabled": False}}})
    tcg = dom_of(vmi, use_emulation=True)
    assert tcg.find("cpu").get("mode") == "host-model"
    assert tcg.find("features/pvspinlock").get("state") == "off"


def test_metadata_uid_and_grace_period() -> None:
    vmi = new_vmi(terminationGracePeriodSeconds=5)
    # KubeVirt's metadata lives in its own XML namespace, as libvirt requires for <metadata> children.
    kubevirt = dom_of(vmi).find("metadata/kv:kubevirt", KV_NS)
    assert kubevirt.findtext("kv:uid", namespaces=KV_NS) == VMI_UID
    assert kubevirt.findtext("kv:graceperiod/kv:deletionGracePeriodSeconds", namespaces=KV_NS) == "5"
    unset = dom_of(new_vmi(), grace_period_seconds=42)
    assert unset.findtext("metadata/kv:kubevirt/kv:graceperiod/kv:deletionGracePeriodSeconds", namespaces=KV_NS) == "42"


@pytest.mark.parametrize(("policy", "expected"), [("Terminate", "destroy"), ("Reboot", "restart"), (None, None)])
def test_reboot_policy(policy: str | None, expected: str | None) -> None:
    domain = {"rebootPolicy": policy} if policy else {}
    assert dom_of(new_vmi(domain)).findtext("on_reboot") == expected


# ------------------------------------------------------------------------------------------------ memory and CPU


@pytest.mark.parametrize(
    ("memory", "resources", "expected"),
    [
        ({"guest": "1Gi"}, {}, 1073741824),
        ({"guest": "128M"}, {}, 128000000),
        ({}, {"requests": {"memory": "512Mi"}}, 536870912),
        ({}, {"limits": {"memory": "64Mi"}}, 67108864),
        ({"guest": "64Mi"}, {"requests": {"memory": "1Gi"}}, 67108864),
        # A fractional byte count is rounded up and then reduced by one, as KubeVirt's QuantityToByte does.
        ({"guest": "1500m"}, {}, 1),
    ],
)
def test_memory_in_bytes(memory: Obj, resources: Obj, expected: int) -> None:
    vmi = new_vmi()
    vmi["spec"]["domain"]["memory"] = memory
    vmi["spec"]["domain"]["resources"] = resources
    el = dom_of(vmi).find("memory")
    assert el.get("unit") == "b"
    assert el.text == str(expected)


def test_max_guest_gives_max_memory_slot_and_numa_node(test_conn: libvirt.virConnect) -> None:
    vmi = new_vmi({"memory": {"guest": "1Gi", "maxGuest": "4Gi"}})
    dom = dom_of(vmi)
    assert dom.findtext("memory") == str(1 << 30)
    assert dom.find("maxMemory").attrib == {"unit": "b", "slots": "1"}
    assert dom.findtext("maxMemory") == str(4 << 30)
    assert dom.find("currentMemory") is None
    assert dom.find("cpu/numa/cell").attrib == {"id": "0", "cpus": "0-3", "memory": str(1 << 20), "unit": "KiB"}
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


def test_max_guest_equal_to_guest_is_no_hotplug() -> None:
    vmi = new_vmi({"memory": {"guest": "1Gi", "maxGuest": "1Gi"}})
    assert dom_of(vmi).find("maxMemory") is None


def test_hugepages_use_memfd_and_a_numa_node() -> None:
    vmi = new_vmi({"memory": {"guest": "128Mi", "hugepages": {"pageSize": "2Mi"}}, "cpu": {"cores": 2}})
    dom = dom_of(vmi)
    assert [c.tag for c in dom.find("memoryBacking")] == ["hugepages", "source"]
    assert dom.find("memoryBacking/source").get("type") == "memfd"
    assert dom.find("cpu/numa/cell").get("cpus") == "0-1"
    # Hugepages make the VMI "high performance": no free page reporting.
    assert dom.find("devices/memballoon").get("freePageReporting") == "off"


@pytest.mark.parametrize(
    ("cpu", "resources", "topology", "vcpus"),
    [
        ({"sockets": 2, "cores": 4, "threads": 2}, {}, ("2", "4", "2"), "16"),
        ({"cores": 3}, {}, ("1", "3", "1"), "3"),
        ({}, {"limits": {"cpu": "2500m"}}, ("3", "1", "1"), "3"),
    ],
)
def test_topology_and_vcpu(cpu: Obj, resources: Obj, topology: tuple[str, str, str], vcpus: str) -> None:
    vmi = new_vmi({"cpu": cpu, "resources": resources})
    vmi["spec"]["domain"]["cpu"].pop("maxSockets", None)
    dom = dom_of(vmi)
    topo = dom.find("cpu/topology")
    assert (topo.get("sockets"), topo.get("cores"), topo.get("threads")) == topology
    assert dom.find("vcpu").attrib == {"placement": "static"}
    assert dom.findtext("vcpu") == vcpus
    assert dom.find("vcpus") is None


def test_max_sockets_spans_the_topology_and_lists_hotpluggable_vcpus() -> None:
    vmi = new_vmi({"cpu": {"sockets": 2, "cores": 2, "threads": 1, "maxSockets": 4}})
    dom = dom_of(vmi)
    assert dom.find("cpu/topology").get("sockets") == "4"
    assert dom.findtext("vcpu") == "8"
    states = [(v.get("id"), v.get("enabled"), v.get("hotpluggable")) for v in dom.findall("vcpus/vcpu")]
    assert states == [
        ("0", "yes", "no"),
        ("1", "yes", "no"),
        ("2", "yes", "yes"),
        ("3", "yes", "yes"),
        ("4", "no", "yes"),
        ("5", "no", "yes"),
        ("6", "no", "yes"),
        ("7", "no", "yes"),
    ]


def test_named_cpu_model_is_custom_with_feature_policies() -> None:
    features = [{"name": "vmx", "policy": "require"}, {"name": "sse4.1", "policy": "forbid"}]
    cpu = dom_of(new_vmi({"cpu": {"model": "Skylake-Client", "features": features}})).find("cpu")
    assert cpu.get("mode") == "custom"
    assert cpu.findtext("model") == "Skylake-Client"
    got = [(f.get("name"), f.get("policy")) for f in cpu.findall("feature")]
    # mpx is disabled unless the user chose its policy: libvirt's model tables still list it.
    assert got == [("vmx", "require"), ("sse4.1", "forbid"), ("mpx", "disable")]
    assert [c.tag for c in cpu] == ["model", "feature", "feature", "feature", "topology"]


def test_default_cpu_model_is_host_model() -> None:
    cpu = dom_of(new_vmi()).find("cpu")
    assert cpu.get("mode") == "host-model"
    assert cpu.find("model") is None and cpu.find("feature") is None


@pytest.mark.parametrize("cpu", [{"realtime": {}}, {"numa": {"guestMappingPassthrough": {}}}])
def test_pinning_features_are_refused(cpu: Obj) -> None:
    with pytest.raises(ConversionError, match="not supported"):
        convert(new_vmi({"cpu": cpu}), ConverterContext())


def test_dedicated_cpus_pin_each_vcpu_to_an_exclusive_cpu(test_conn: libvirt.virConnect) -> None:
    vmi = new_vmi({"cpu": {"cores": 2, "dedicatedCpuPlacement": True}})
    with pytest.raises(ConversionError, match="--cpu-manager-policy static"):
        dom_of(vmi)
    with pytest.raises(ConversionError, match="not enough exclusive CPUs for 2 vCPUs: the pod has 1"):
        dom_of(vmi, pinned_cpus=(3,))
    dom = dom_of(vmi, pinned_cpus=(5, 2, 3))
    assert dom.find("vcpu").attrib == {"placement": "static", "cpuset": "2,3,5"}
    assert [p.attrib for p in dom.findall("cputune/vcpupin")] == [
        {"vcpu": "0", "cpuset": "2"},
        {"vcpu": "1", "cpuset": "3"},
    ]
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


# ------------------------------------------------------------------------------------------------ OS, firmware, sysinfo


def test_os_machine_and_smbios_mode() -> None:
    os_el = dom_of(new_vmi({"machine": {"type": "pc-q35-7.2"}})).find("os")
    assert os_el.find("type").attrib == {"arch": "x86_64", "machine": "pc-q35-7.2"}
    assert os_el.findtext("type") == "hvm"
    assert os_el.find("smbios").get("mode") == "sysinfo"
    assert os_el.find("loader") is None and os_el.find("boot") is None


def test_sysinfo_entries() -> None:
    vmi = new_vmi({"firmware": {"uuid": "e4686d2c-6e8d-4335-b8fd-81bee22f4814", "serial": "S3R1AL"}})
    vmi["spec"]["domain"]["chassis"] = {"manufacturer": "ACME", "asset": "A1"}
    smbios = SMBIOS(manufacturer="M", family="F", product="P", sku="K", version="1")
    sysinfo = dom_of(vmi, smbios=smbios).find("sysinfo")
    assert sysinfo.get("type") == "smbios"
    system = [(e.get("name"), e.text or "") for e in sysinfo.findall("system/entry")]
    assert system == [
        ("uuid", "e4686d2c-6e8d-4335-b8fd-81bee22f4814"),
        ("serial", "S3R1AL"),
        ("manufacturer", "M"),
        ("family", "F"),
        ("product", "P"),
        ("sku", "K"),
        ("version", "1"),
    ]
    chassis = {e.get("name"): e.text or "" for e in sysinfo.findall("chassis/entry")}
    assert chassis == {"manufacturer": "ACME", "version": "", "serial": "", "asset": "A1", "sku": ""}


def test_sysinfo_defaults_are_kubevirts() -> None:
    names = {e.get("name"): e.text or "" for e in dom_of(new_vmi()).findall("sysinfo/system/entry")}
    assert names["manufacturer"] == "KubeVirt" and names["family"] == "KubeVirt" and names["product"] == "None"
    assert "serial" not in names
    # The VMI mutator gave the firmware a UUID.
    assert names["uuid"] == "00000000-0000-4000-8000-000000000001"


def test_efi_secure_boot_uses_secure_firmware_and_smm(test_conn: libvirt.virConnect) -> None:
    vmi = new_vmi({"firmware": {"bootloader": {"efi": {"secureBoot": True}}}, "features": {"smm": {}}})
    dom = dom_of(vmi)
    loader = dom.find("os/loader")
    assert loader.attrib == {"readonly": "yes", "secure": "yes", "type": "pflash"}
    assert loader.text == "/usr/share/OVMF/OVMF_CODE.secboot.fd"
    nvram = dom.find("os/nvram")
    assert nvram.get("template") == "/usr/share/OVMF/OVMF_VARS.secboot.fd"
    assert nvram.text == "/var/run/kubevirt-private/libvirt/qemu/nvram/testvmi_VARS.fd"
    assert dom.find("features/smm") is not None
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


def test_efi_without_secure_boot() -> None:
    vmi = new_vmi({"firmware": {"bootloader": {"efi": {"secureBoot": False}}}})
    dom = dom_of(vmi, nvram_dir="/nv")
    assert dom.find("os/loader").get("secure") == "no"
    assert dom.findtext("os/loader") == "/usr/share/OVMF/OVMF_CODE.fd"
    assert dom.find("os/nvram").get("template") == "/usr/share/OVMF/OVMF_VARS.fd"
    assert dom.findtext("os/nvram") == "/nv/testvmi_VARS.fd"
    assert dom.find("features/smm") is None


def test_persistent_efi_and_tpm_keep_state_on_the_backend_storage_dirs(test_conn: libvirt.virConnect) -> None:
    domain = {
        "firmware": {"bootloader": {"efi": {"secureBoot": False, "persistent": True}}},
        "devices": {"tpm": {"persistent": True}},
    }
    # The launcher passes the claim's nvram mount; the file name and the template stay KubeVirt's.
    dom = dom_of(new_vmi(domain), nvram_dir="/var/lib/libvirt/qemu/nvram")
    nvram = dom.find("os/nvram")
    assert nvram.get("template") == "/usr/share/OVMF/OVMF_VARS.fd"
    assert nvram.text == "/var/lib/libvirt/qemu/nvram/testvmi_VARS.fd"
    # KubeVirt pairs persistence with the CRB model.
    assert dom.find("devices/tpm").get("model") == "tpm-crb"
    assert dom.find("devices/tpm/backend").attrib == {"type": "emulator", "version": "2.0", "persistent_state": "yes"}
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


def test_efi_firmware_autoselection(test_conn: libvirt.virConnect) -> None:
    vmi = new_vmi({"firmware": {"bootloader": {"efi": {}}}, "features": {"smm": {}}})
    dom = dom_of(vmi, efi_firmware_autoselect=True)
    os_el = dom.find("os")
    assert os_el.get("firmware") == "efi"
    assert [c.tag for c in os_el][:2] == ["firmware", "type"]
    assert {f.get("name"): f.get("enabled") for f in os_el.findall("firmware/feature")} == {
        "secure-boot": "yes",
        "enrolled-keys": "yes",
    }
    assert os_el.find("loader") is None
    assert os_el.find("nvram").get("format") == "raw"
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


def test_bios_use_serial_and_paused_boot_menu() -> None:
    vmi = new_vmi({"firmware": {"bootloader": {"bios": {"useSerial": True}}}}, startStrategy="Paused")
    os_el = dom_of(vmi).find("os")
    assert os_el.find("bios").get("useserial") == "yes"
    assert os_el.find("bootmenu").attrib == {"enable": "yes", "timeout": "10000"}


def test_kernel_boot() -> None:
    kernel_boot = {
        "kernelArgs": "console=ttyS0",
        "container": {"image": "k", "kernelPath": "/boot/vmlinuz", "initrdPath": "/boot/initrd.img"},
    }
    os_el = dom_of(new_vmi({"firmware": {"kernelBoot": kernel_boot}})).find("os")
    assert os_el.findtext("kernel") == "/var/run/kubevirt/container-disks/kernel-boot/vmlinuz"
    assert os_el.findtext("initrd") == "/var/run/kubevirt/container-disks/kernel-boot/initrd.img"
    assert os_el.findtext("cmdline") == "console=ttyS0"


# ------------------------------------------------------------------------------------------------ features and clock


def test_features_acpi_apic_smm_kvm_and_vmport() -> None:
    features = {"acpi": {}, "apic": {}, "smm": {"enabled": False}, "kvm": {"hidden": True}}
    got = dom_of(new_vmi({"features": features})).find("features")
    assert [c.tag for c in got] == ["acpi", "apic", "kvm", "vmport"]
    assert got.find("vmport").get("state") == "off"
    off = dom_of(new_vmi({"features": {"acpi": {"enabled": False}}})).find("features")
    assert off.find("acpi") is None


def test_hyperv_enlightenments() -> None:
    hyperv = {
        "relaxed": {"enabled": False},
        "vapic": {},
        "spinlocks": {"spinlocks": 8191},
        "synictimer": {"direct": {}},
        "vendorid": {"vendorid": "myvendor", "enabled": False},
        "tlbflush": {"direct": {}, "extended": {}},
    }
    el = dom_of(new_vmi({"features": {"hyperv": hyperv}})).find("features/hyperv")
    assert el.find("relaxed").get("state") == "off"
    assert el.find("spinlocks").attrib == {"state": "on", "retries": "8191"}
    assert el.find("stimer").get("state") == "on" and el.find("stimer/direct").get("state") == "on"
    assert el.find("vendor_id").attrib == {"state": "off", "value": "myvendor"}
    assert el.find("tlbflush/extended").get("state") == "on"
    # Admission turned on what the enabled enlightenments depend on.
    assert el.find("synic").get("state") == "on" and el.find("vpindex").get("state") == "on"
    order = [c.tag for c in el]
    assert order == sorted(
        order,
        key=[
            "relaxed",
            "vapic",
            "spinlocks",
            "vpindex",
            "runtime",
            "synic",
            "stimer",
            "reset",
            "vendor_id",
            "frequencies",
            "reenlightenment",
            "tlbflush",
            "ipi",
            "evmcs",
        ].index,
    )


def test_clock_utc_timezone_and_timers() -> None:
    clock = {
        "utc": {"offsetSeconds": 3600},
        "timer": {
            "rtc": {"tickPolicy": "catchup", "track": "guest"},
            "pit": {"present": False, "tickPolicy": "discard"},
            "kvm": {},
            "hpet": {"present": False},
            "hyperv": {},
        },
    }
    el = dom_of(new_vmi({"clock": clock})).find("clock")
    assert el.attrib == {"offset": "utc", "adjustment": "3600"}
    timers = [dict(t.attrib) for t in el.findall("timer")]
    assert timers == [
        {"name": "rtc", "tickpolicy": "catchup", "present": "yes", "track": "guest"},
        {"name": "pit", "tickpolicy": "discard", "present": "no"},
        {"name": "kvmclock", "present": "yes"},
        {"name": "hpet", "present": "no"},
        {"name": "hypervclock", "present": "yes"},
    ]
    reset = dom_of(new_vmi({"clock": {"utc": {}}})).find("clock")
    assert reset.attrib == {"offset": "utc", "adjustment": "reset"}
    tz = dom_of(new_vmi({"clock": {"timezone": "Europe/Paris"}})).find("clock")
    assert tz.attrib == {"offset": "timezone", "timezone": "Europe/Paris"}
    assert dom_of(new_vmi()).find("clock") is None


# ------------------------------------------------------------------------------------------------ disks


def disks_of(dom: Any) -> dict[str, Any]:
    return {d.find("alias").get("name").removeprefix("ua-"): d for d in dom.findall("devices/disk")}


def cd(name: str) -> Obj:
    return {"name": name, "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}


def test_target_names_per_prefix_in_disk_order() -> None:
    disk_specs = [
        {"name": "a", "disk": {"bus": "virtio"}},
        {"name": "b", "disk": {"bus": "sata"}},
        {"name": "c", "disk": {"bus": "virtio"}},
        {"name": "d", "disk": {"bus": "scsi"}},
        {"name": "e", "cdrom": {"bus": "sata"}},
        {"name": "f", "disk": {"bus": "usb"}},
    ]
    vmi = new_vmi({"devices": {"disks": disk_specs}}, volumes=[cd(n) for n in "abcdef"])
    got = {name: d.find("target").attrib for name, d in disks_of(dom_of(vmi)).items()}
    assert {n: t["dev"] for n, t in got.items()} == {
        "a": "vda",
        "b": "sda",
        "c": "vdb",
        "d": "sdb",
        "e": "sdc",
        "f": "sdd",
    }
    assert got["d"]["bus"] == "scsi"
    # SCSI disks sit on controller 0 at the unit of their name's index.
    assert disks_of(dom_of(vmi))["d"].find("address").attrib == {
        "type": "drive",
        "controller": "0",
        "bus": "0",
        "unit": "1",
    }


def test_target_names_past_z() -> None:
    assert [device_name("vd", i) for i in (0, 25, 26, 27, 701, 702)] == ["vda", "vdz", "vdaa", "vdab", "vdzz", "vdaaa"]
    names = [f"d{i}" for i in range(28)]
    vmi = new_vmi(
        {"devices": {"disks": [{"name": n, "disk": {"bus": "virtio"}} for n in names]}}, volumes=[cd(n) for n in names]
    )
    targets = [d.find("target").get("dev") for d in dom_of(vmi).findall("devices/disk")]
    assert targets[25:] == ["vdz", "vdaa", "vdab"]


def test_targets_recorded_in_volume_status_are_kept() -> None:
    vmi = new_vmi(
        {"devices": {"disks": [{"name": "a", "disk": {"bus": "virtio"}}, {"name": "b", "disk": {"bus": "virtio"}}]}},
        volumes=[cd("a"), cd("b")],
    )
    vmi["status"]["volumeStatus"] = [{"name": "a", "target": "vdb"}, {"name": "b", "target": ""}]
    got = {n: d.find("target").get("dev") for n, d in disks_of(dom_of(vmi)).items()}
    assert got == {"a": "vdb", "b": "vda"}


def test_disk_alias_boot_order_serial_readonly_and_model() -> None:
    disk_specs = [
        {"name": "root", "disk": {"bus": "virtio"}, "bootOrder": 2, "serial": "SER1"},
        {"name": "data", "disk": {"bus": "sata", "readonly": True}, "bootOrder": 1},
        {"name": "legacy", "disk": {"bus": "virtio"}},
    ]
    vmi = new_vmi(
        {"devices": {"disks": disk_specs, "useVirtioTransitional": False}},
        volumes=[cd("root"), cd("data"), cd("legacy")],
    )
    disks = disks_of(dom_of(vmi))
    assert disks["root"].find("boot").get("order") == "2"
    assert disks["data"].find("boot").get("order") == "1"
    assert disks["legacy"].find("boot") is None
    assert disks["root"].findtext("serial") == "SER1"
    assert disks["data"].find("readonly") is not None and disks["root"].find("readonly") is None
    assert disks["root"].get("model") == "virtio-non-transitional"
    assert disks["data"].get("model") is None
    vmi["spec"]["domain"]["devices"]["useVirtioTransitional"] = True
    assert disks_of(dom_of(vmi))["root"].get("model") == "virtio-transitional"


def test_cdrom() -> None:
    disk_specs = [{"name": "iso", "cdrom": {"bus": "sata"}}, {"name": "ci", "cdrom": {"bus": "sata", "tray": "open"}}]
    volumes = [cd("iso"), {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}]
    disks = disks_of(dom_of(new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)))
    iso, ci = disks["iso"], disks["ci"]
    assert iso.get("device") == "cdrom" and iso.get("model") is None
    assert iso.find("target").attrib == {"bus": "sata", "dev": "sda", "tray": "closed"}
    assert iso.find("readonly") is not None
    assert ci.find("target").get("tray") == "open"
    # Discard is a disk/LUN property; a containerDisk overlay asks for it whatever the device.
    assert ci.find("driver").get("discard") is None
    assert iso.find("driver").get("discard") == "unmap"


def test_empty_cdrom_has_no_source(test_conn: libvirt.virConnect) -> None:
    vmi = new_vmi({"devices": {"disks": [{"name": "tray", "cdrom": {"bus": "sata"}}]}})
    disk = disks_of(dom_of(vmi))["tray"]
    assert disk.get("type") == "block" and disk.find("source") is None
    assert disk.find("driver").get("cache") is None
    assert_defines(test_conn, convert(vmi, golden_ctx(vmi)))


@pytest.mark.parametrize(
    ("cache", "direct_io", "expected"),
    [
        (None, True, "none"),
        (None, False, "writethrough"),
        ("writeback", True, "writeback"),
        ("writethrough", False, "writethrough"),
        ("none", True, "none"),
    ],
)
def test_cache_mode(cache: str | None, direct_io: bool, expected: str) -> None:
    disk: Obj = {"name": "d", "disk": {"bus": "virtio"}}
    if cache:
        disk["cache"] = cache
    vmi = new_vmi({"devices": {"disks": [disk]}}, volumes=[cd("d")])
    assert disks_of(dom_of(vmi, direct_io=direct_io))["d"].find("driver").get("cache") == expected


def test_cache_none_without_direct_io_is_an_error() -> None:
    vmi = new_vmi(
        {"devices": {"disks": [{"name": "d", "disk": {"bus": "virtio"}, "cache": "none"}]}}, volumes=[cd("d")]
    )
    with pytest.raises(ConversionError, match="does not support direct I/O"):
        convert(vmi, replace(golden_ctx(vmi), direct_io=False))


def test_io_mode_and_error_policy() -> None:
    disk_specs = [
        {"name": "blk", "disk": {"bus": "virtio"}},
        {"name": "pre", "disk": {"bus": "virtio"}},
        {"name": "file", "disk": {"bus": "virtio"}, "errorPolicy": "report"},
        {"name": "mine", "disk": {"bus": "virtio"}, "io": "threads", "errorPolicy": "enospace"},
    ]
    volumes = [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in ("blk", "pre", "file", "mine")]
    vmi = new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)
    disks = disks_of(dom_of(vmi, block_volumes=frozenset({"blk"}), preallocated_volumes=frozenset({"pre"})))
    driver = {n: d.find("driver").attrib for n, d in disks.items()}
    assert driver["blk"] == {
        "cache": "none",
        "error_policy": "stop",
        "io": "native",
        "name": "qemu",
        "type": "raw",
        "discard": "unmap",
    }
    # Preallocated: native IO, and no discard (it would undo the preallocation).
    assert driver["pre"]["io"] == "native" and "discard" not in driver["pre"]
    assert driver["file"]["error_policy"] == "report" and "io" not in driver["file"]
    assert driver["mine"]["io"] == "threads" and driver["mine"]["error_policy"] == "enospace"
    assert disks["blk"].get("type") == "block"
    assert disks["blk"].find("source").attrib == {"dev": "/dev/blk", "name": "blk"}
    assert disks["file"].find("source").get("file") == "/var/run/kubevirt-private/vmi-disks/file/disk.img"


def test_a_read_only_claim_is_a_read_only_disk() -> None:
    disk_specs = [{"name": n, "disk": {"bus": "virtio"}, "serial": f"s-{n}"} for n in ("ro", "rw")]
    volumes = [
        {"name": "ro", "persistentVolumeClaim": {"claimName": "ro", "readOnly": True}},
        {"name": "rw", "persistentVolumeClaim": {"claimName": "rw"}},
    ]
    disks = disks_of(dom_of(new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)))
    assert disks["ro"].find("readonly") is not None
    assert disks["rw"].find("readonly") is None
    assert disks["ro"].find("serial").text == "s-ro"


def test_volume_sources() -> None:
    disk_specs = [
        {"name": n, "disk": {"bus": "virtio"}} for n in ("cd", "empty", "host", "nocloud", "cfg", "dv", "sec")
    ]
    volumes = [
        cd("cd"),
        {"name": "empty", "emptyDisk": {"capacity": "1Gi"}},
        {"name": "host", "hostDisk": {"path": "/data/images/win.img", "type": "Disk"}},
        {"name": "nocloud", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
        {"name": "cfg", "cloudInitConfigDrive": {"userData": "#cloud-config\n"}},
        {"name": "dv", "dataVolume": {"name": "fedora-dv"}},
        {"name": "sec", "secret": {"secretName": "s"}},
    ]
    vmi = new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)
    disks = disks_of(dom_of(vmi))
    files_and_formats = {n: (d.find("source").get("file"), d.find("driver").get("type")) for n, d in disks.items()}
    assert files_and_formats == {
        "cd": ("/var/run/kubevirt-ephemeral-disks/disk-data/cd/disk.qcow2", "qcow2"),
        "empty": ("/var/run/libvirt/empty-disks/empty.qcow2", "qcow2"),
        "host": ("/var/run/kubevirt-private/vmi-disks/host/win.img", "raw"),
        "nocloud": ("/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi/noCloud.iso", "raw"),
        "cfg": ("/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi/configdrive.iso", "raw"),
        "dv": ("/var/run/kubevirt-private/vmi-disks/dv/disk.img", "raw"),
        "sec": ("/var/run/kubevirt-private/secret-disks/sec.iso", "raw"),
    }
    store = disks["cd"].find("backingStore")
    assert store.get("type") == "file"
    assert store.find("format").get("type") == "qcow2"
    assert store.find("source").get("file") == "/var/run/kubevirt/container-disks/disk_0.img"


def test_container_disk_backing_comes_from_the_context() -> None:
    vmi = new_vmi({"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}}, volumes=[cd("root")])
    ctx = ConverterContext(ephemeral_disk_dir="/e", container_disks={"root": ("/images/cirros.img", "raw")})
    disk = disks_of(parse(convert(vmi, ctx)))["root"]
    assert disk.find("source").get("file") == "/e/disk-data/root/disk.qcow2"
    assert disk.find("backingStore/format").get("type") == "raw"
    assert disk.find("backingStore/source").get("file") == "/images/cirros.img"
    with pytest.raises(ConversionError, match="no disk info provided for volume root"):
        convert(vmi, ConverterContext())


def test_lun_with_reservation_and_shareable_disk(test_conn: libvirt.virConnect) -> None:
    disk_specs = [
        {"name": "lun", "lun": {"bus": "scsi", "reservation": True}},
        {"name": "shared", "disk": {"bus": "virtio"}, "shareable": True},
    ]
    volumes = [{"name": n, "persistentVolumeClaim": {"claimName": n}} for n in ("lun", "shared")]
    vmi = new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)
    dom = dom_of(vmi)
    disks = disks_of(dom)
    lun = disks["lun"]
    assert lun.get("device") == "lun" and lun.get("type") == "block"
    assert lun.find("source/reservations").attrib == {"managed": "no", "migration": "yes"}
    assert lun.find("source/reservations/source").get("path") == "/var/run/kubevirt/daemons/pr/pr-helper.sock"
    assert disks["shared"].find("shareable") is not None
    assert disks["shared"].find("driver").get("cache") == "none"
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


def test_unmounted_hotplug_volume_is_left_out() -> None:
    disk_specs = [{"name": "root", "disk": {"bus": "virtio"}}, {"name": "hp", "disk": {"bus": "scsi"}}]
    volumes = [cd("root"), {"name": "hp", "persistentVolumeClaim": {"claimName": "hp", "hotpluggable": True}}]
    vmi = new_vmi({"devices": {"disks": disk_specs}}, volumes=volumes)
    vmi["status"]["volumeStatus"] = [
        {"name": "root", "target": "vda"},
        {"name": "hp", "hotplugVolume": {}, "phase": "Bound"},
    ]
    assert set(disks_of(dom_of(vmi))) == {"root"}
    vmi["status"]["volumeStatus"][1]["phase"] = "Ready"
    hp = disks_of(dom_of(vmi))["hp"]
    assert hp.find("source").get("file") == "/var/run/kubevirt/hotplug-disks/hp.img"


IOTHREAD_DISKS = ["dedicated", "shared", "omitted1", "omitted2", "omitted3", "omitted4", "omitted5"]


@pytest.mark.parametrize(
    ("policy", "cpus", "total", "thread_ids"),
    [
        ("shared", 1, 2, [2, 1, 1, 1, 1, 1, 1]),
        ("auto", 1, 2, [2, 1, 1, 1, 1, 1, 1]),
        ("auto", 2, 4, [4, 1, 2, 3, 1, 2, 3]),
        ("auto", 3, 6, [6, 1, 2, 3, 4, 5, 1]),
        ("auto", 4, 7, [7, 1, 2, 3, 4, 5, 6]),
    ],
)
def test_io_threads_like_kubevirt(policy: str, cpus: int, total: int, thread_ids: list[int]) -> None:
    """KubeVirt's IOThreads table: dedicated threads are numbered after the shared pool."""
    disk_specs: list[Obj] = [{"name": n, "disk": {"bus": "virtio"}} for n in IOTHREAD_DISKS]
    disk_specs[0]["dedicatedIOThread"] = True
    disk_specs[1]["dedicatedIOThread"] = False
    domain = {
        "ioThreadsPolicy": policy,
        "resources": {"requests": {"cpu": str(cpus)}},
        "devices": {"disks": disk_specs},
    }
    dom = dom_of(new_vmi(domain, volumes=[cd(n) for n in IOTHREAD_DISKS]))
    assert dom.findtext("iothreads") == str(total)
    assert [int(d.find("driver").get("iothread")) for d in dom.findall("devices/disk")] == thread_ids


def test_dedicated_io_threads_only_on_virtio_disks() -> None:
    disk_specs = [
        {"name": "a", "disk": {"bus": "virtio"}, "dedicatedIOThread": True},
        {"name": "b", "disk": {"bus": "virtio"}, "dedicatedIOThread": True},
        {"name": "c", "disk": {"bus": "sata"}},
        {"name": "d", "disk": {"bus": "virtio"}},
    ]
    dom = dom_of(new_vmi({"devices": {"disks": disk_specs}}, volumes=[cd(n) for n in "abcd"]))
    assert dom.findtext("iothreads") == "3"
    threads = {n: d.find("driver").get("iothread") for n, d in disks_of(dom).items()}
    assert threads == {"a": "2", "b": "3", "c": None, "d": "1"}


def test_supplemental_pool_and_block_multiqueue() -> None:
    domain = {
        "ioThreadsPolicy": "supplementalPool",
        "ioThreads": {"supplementalPoolThreadCount": 2},
        "cpu": {"cores": 3},
        "devices": {"disks": [{"name": "a", "disk": {"bus": "virtio"}}], "blockMultiQueue": True},
    }
    dom = dom_of(new_vmi(domain, volumes=[cd("a")]))
    assert dom.findtext("iothreads") == "2"
    driver = dom.find("devices/disk/driver")
    assert [t.get("id") for t in driver.findall("iothreads/iothread")] == ["1", "2"]
    assert driver.get("iothread") is None and driver.get("queues") == "3"


def test_no_io_threads_without_policy_or_dedicated_disk() -> None:
    dom = dom_of(new_vmi({"devices": {"disks": [{"name": "a", "disk": {"bus": "virtio"}}]}}, volumes=[cd("a")]))
    assert dom.find("iothreads") is None
    assert dom.find("devices/disk/driver").get("iothread") is None


# ------------------------------------------------------------------------------------------------ interfaces


def nic_vmi(interfaces: list[Obj], networks: list[Obj], **devices: Any) -> Obj:
    return new_vmi({"devices": {"interfaces": interfaces, **devices}}, networks=networks)


def test_pod_interface_is_a_tap_ethernet() -> None:
    vmi = nic_vmi(
        [{"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:01"}], [{"name": "default", "pod": {}}]
    )
    iface = dom_of(vmi).find("devices/interface")
    assert iface.get("type") == "ethernet"
    assert iface.find("target").attrib == {"dev": "tap0", "managed": "no"}
    assert iface.find("model").get("type") == "virtio-non-transitional"
    assert iface.find("mac").get("address") == "02:00:00:00:00:01"
    assert iface.find("alias").get("name") == "ua-default"
    assert iface.find("rom").get("enabled") == "no"
    assert iface.find("boot") is None


def test_interface_boot_order_keeps_the_rom() -> None:
    vmi = nic_vmi([{"name": "default", "bridge": {}, "bootOrder": 1}], [{"name": "default", "pod": {}}])
    iface = dom_of(vmi).find("devices/interface")
    assert iface.find("boot").get("order") == "1"
    assert iface.find("rom") is None


def test_interface_options() -> None:
    interfaces: list[Obj] = [
        {"name": "default", "bridge": {}, "model": "e1000e", "acpiIndex": 3, "pciAddress": "0000:02:01.0"},
        {"name": "sec", "bridge": {}, "state": "down"},
        {"name": "gone", "bridge": {}, "state": "absent"},
    ]
    networks = [
        {"name": "default", "pod": {}},
        {"name": "sec", "multus": {"networkName": "br"}},
        {"name": "gone", "multus": {"networkName": "x"}},
    ]
    ifaces = dom_of(nic_vmi(interfaces, networks, networkInterfaceMultiqueue=True)).findall("devices/interface")
    assert [i.find("alias").get("name") for i in ifaces] == ["ua-default", "ua-sec"]
    first, second = ifaces
    assert first.find("model").get("type") == "e1000e"
    assert first.find("acpi").get("index") == "3"
    assert first.find("address").attrib == {
        "type": "pci",
        "domain": "0x0000",
        "bus": "0x02",
        "slot": "0x01",
        "function": "0x0",
    }
    assert first.find("driver") is None  # multi-queue is a virtio feature
    assert second.find("link").get("state") == "down"
    assert second.find("target").get("dev") == tap_name({"name": "sec", "multus": {}}) != "tap0"
    assert len(second.find("target").get("dev")) == 14
    assert second.find("driver").attrib == {"name": "vhost", "queues": "1"}


def test_pod_nic_takes_the_pod_interface_mac_and_mtu_unless_the_spec_names_a_mac() -> None:
    networks = [{"name": "default", "pod": {}}]
    macs, mtus = {"default": "0a:58:0a:f4:00:05"}, {"default": 1400}
    plain = nic_vmi([{"name": "default", "bridge": {}}], networks)
    iface = dom_of(plain, interface_macs=macs, interface_mtus=mtus).find("devices/interface")
    assert iface.find("mac").get("address") == "0a:58:0a:f4:00:05"
    assert iface.find("mtu").get("size") == "1400"
    named = nic_vmi([{"name": "default", "bridge": {}, "macAddress": "02:00:00:00:00:07"}], networks)
    iface = dom_of(named, interface_macs=macs).find("devices/interface")
    assert iface.find("mac").get("address") == "02:00:00:00:00:07"
    assert iface.find("mtu") is None


@pytest.mark.parametrize("model", ["e1000e", "rtl8139", "e1000", "pcnet", "ne2k_pci"])
def test_interface_models_other_than_virtio_are_passed_through(model: str) -> None:
    vmi = nic_vmi([{"name": "default", "bridge": {}, "model": model}], [{"name": "default", "pod": {}}])
    assert dom_of(vmi).find("devices/interface/model").get("type") == model


def test_user_network_mode(test_conn: libvirt.virConnect) -> None:
    interfaces: list[Obj] = [
        {"name": "default", "masquerade": {}, "macAddress": "02:00:00:00:00:02", "bootOrder": 3},
        {"name": "sec", "bridge": {}},
    ]
    networks = [{"name": "default", "pod": {}}, {"name": "sec", "multus": {"networkName": "br"}}]
    dom = dom_of(nic_vmi(interfaces, networks), network_mode="user")
    pod, secondary = dom.findall("devices/interface")
    assert pod.get("type") == "user"
    assert pod.find("target") is None
    assert pod.find("model").get("type") == "virtio-non-transitional"
    assert pod.find("mac").get("address") == "02:00:00:00:00:02"
    assert pod.find("alias").get("name") == "ua-default"
    assert pod.find("boot").get("order") == "3"
    # Only the pod network becomes user-mode; a secondary network keeps KubeVirt's tap.
    assert secondary.get("type") == "ethernet"
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


@pytest.mark.parametrize("binding", [{"sriov": {}}, {"binding": {"name": "passt"}}])
def test_unsupported_bindings(binding: Obj) -> None:
    vmi = nic_vmi([{"name": "n", "bridge": {}}], [{"name": "n", "multus": {"networkName": "n"}}])
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "n", **binding}]
    with pytest.raises(ConversionError, match="interface n"):
        convert(vmi, ConverterContext())


def test_interface_without_network_is_an_error() -> None:
    vmi = nic_vmi([{"name": "default", "bridge": {}}], [{"name": "default", "pod": {}}])
    vmi["spec"]["networks"] = []
    with pytest.raises(ConversionError, match="failed to find network default"):
        convert(vmi, ConverterContext())


# ------------------------------------------------------------------------------------------------ other devices


def test_default_devices() -> None:
    dom = dom_of(new_vmi())
    devices = dom.find("devices")
    vnc = devices.find("graphics")
    assert vnc.get("type") == "vnc"
    assert vnc.find("listen").attrib == {"type": "socket", "socket": f"/var/run/kubevirt-private/{VMI_UID}/virt-vnc"}
    assert devices.find("video/model").attrib == {"type": "vga", "heads": "1", "vram": "16384"}
    serial = devices.find("serial")
    assert serial.get("type") == "unix"
    assert serial.find("target").get("port") == "0"
    assert serial.find("source").attrib == {"mode": "bind", "path": f"/var/run/kubevirt-private/{VMI_UID}/virt-serial0"}
    assert serial.find("log").attrib == {
        "file": f"/var/run/kubevirt-private/{VMI_UID}/virt-serial0-log",
        "append": "on",
    }
    assert devices.find("console").get("type") == "pty"
    assert devices.find("console/target").attrib == {"type": "serial", "port": "0"}
    channel = devices.find("channel")
    assert channel.get("type") == "unix" and channel.find("source") is None
    assert channel.find("target").attrib == {"name": "org.qemu.guest_agent.0", "type": "virtio"}
    controllers = [(c.get("type"), c.get("model")) for c in devices.findall("controller")]
    assert controllers == [
        ("usb", "none"),
        ("scsi", "virtio-non-transitional"),
        ("virtio-serial", "virtio-non-transitional"),
    ]
    balloon = devices.find("memballoon")
    assert balloon.attrib == {"model": "virtio-non-transitional", "freePageReporting": "on"}
    assert balloon.find("stats").get("period") == "10"
    assert devices.find("rng") is None and devices.find("watchdog") is None and devices.find("input") is None
    assert [c.tag for c in devices] == [
        "interface",
        "channel",
        "controller",
        "controller",
        "controller",
        "video",
        "graphics",
        "memballoon",
        "serial",
        "console",
    ]


def test_switching_devices_off() -> None:
    devices = {
        "autoattachGraphicsDevice": False,
        "autoattachSerialConsole": False,
        "autoattachMemBalloon": False,
        "disableHotplug": True,
    }
    dom = dom_of(new_vmi({"devices": devices}))
    devs = dom.find("devices")
    assert devs.find("graphics") is None and devs.find("video") is None
    assert devs.find("serial") is None and devs.find("console") is None
    assert [c.get("type") for c in devs.findall("controller")] == ["usb"]
    assert devs.find("memballoon").attrib == {"model": "none"}


@pytest.mark.parametrize(
    ("cluster", "vmi_setting", "logged"),
    [(True, None, True), (False, None, False), (False, True, True), (True, False, False)],
)
def test_serial_console_log(cluster: bool, vmi_setting: bool | None, logged: bool) -> None:
    devices = {} if vmi_setting is None else {"logSerialConsole": vmi_setting}
    serial = dom_of(new_vmi({"devices": devices}), serial_log=cluster).find("devices/serial")
    assert (serial.find("log") is not None) == logged


def test_balloon_stats_and_free_page_reporting_switches() -> None:
    vmi = new_vmi()
    balloon = dom_of(vmi, mem_balloon_stats_period=0, free_page_reporting=False).find("devices/memballoon")
    assert balloon.get("freePageReporting") == "off" and balloon.find("stats") is None
    vmi["metadata"].setdefault("annotations", {})["kubevirt.io/free-page-reporting-disabled"] = "true"
    assert dom_of(vmi).find("devices/memballoon").get("freePageReporting") == "off"


def test_rng_watchdog_inputs_and_usb_controller() -> None:
    devices = {
        "rng": {},
        "watchdog": {"name": "wd", "i6300esb": {}},
        "inputs": [
            {"name": "tab", "type": "tablet", "bus": "usb"},
            {"name": "vtab", "type": "tablet", "bus": "virtio"},
        ],
    }
    devs = dom_of(new_vmi({"devices": devices})).find("devices")
    rng = devs.find("rng")
    assert rng.get("model") == "virtio-non-transitional"
    assert rng.find("backend").attrib == {"model": "random"} and rng.findtext("backend") == "/dev/urandom"
    watchdog = devs.find("watchdog")
    assert watchdog.attrib == {"model": "i6300esb", "action": "reset"}
    assert watchdog.find("alias").get("name") == "ua-wd"
    inputs = [dict(i.attrib) for i in devs.findall("input")]
    assert inputs == [{"type": "tablet", "bus": "usb"}, {"type": "tablet", "bus": "virtio", "model": "virtio"}]
    # A USB tablet needs a USB controller.
    assert devs.find("controller[@type='usb']").get("model") == "qemu-xhci"


def test_video_type_and_bochs_for_efi() -> None:
    chosen = dom_of(new_vmi({"devices": {"video": {"type": "virtio"}}})).find("devices/video/model")
    assert chosen.attrib == {"type": "virtio", "heads": "1", "vram": "16384"}
    efi = new_vmi({"firmware": {"bootloader": {"efi": {"secureBoot": False}}}})
    assert dom_of(efi, bochs_display_for_efi=True).find("devices/video/model").attrib == {"type": "bochs", "heads": "1"}
    assert dom_of(efi).find("devices/video/model").get("type") == "vga"


def test_sound_tpm_panic_and_usb_redirection(test_conn: libvirt.virConnect) -> None:
    devices = {"sound": {"name": "snd"}, "tpm": {}, "panicDevices": [{"model": "isa"}], "clientPassthrough": {}}
    dom = dom_of(new_vmi({"devices": devices}))
    devs = dom.find("devices")
    assert devs.find("sound").get("model") == "ich9" and devs.find("sound/alias").get("name") == "ua-snd"
    assert devs.find("tpm").get("model") == "tpm-tis"
    assert devs.find("tpm/backend").attrib == {"type": "emulator", "version": "2.0"}
    assert devs.find("panic").get("model") == "isa"
    paths_ = [r.find("source").get("path") for r in devs.findall("redirdev")]
    assert paths_ == [f"/var/run/kubevirt-private/{VMI_UID}/virt-usbredir-{i}" for i in range(4)]
    assert_defines(test_conn, ET.tostring(dom, encoding="unicode"))


@pytest.mark.parametrize(
    "devices",
    [
        {"gpus": [{"name": "g", "deviceName": "nvidia"}]},
        {"hostDevices": [{"name": "h", "deviceName": "x"}]},
        {"filesystems": [{"name": "f", "virtiofs": {}}]},
    ],
)
def test_unsupported_devices(devices: Obj) -> None:
    with pytest.raises(ConversionError, match="not supported"):
        convert(new_vmi({"devices": devices}), ConverterContext())


# ------------------------------------------------------------------------------------------------ a real guest


_event_loop_started = False


def _start_event_loop() -> None:
    """qemu:///embed runs the QEMU driver in this process; it needs a libvirt event loop thread."""
    global _event_loop_started
    if _event_loop_started:
        return
    libvirt.virEventRegisterDefaultImpl()

    def run() -> None:
        while True:
            libvirt.virEventRunDefaultImpl()

    threading.Thread(target=run, name="libvirt-events", daemon=True).start()
    _event_loop_started = True


@pytest.mark.e2e
def test_demo_vmi_runs_under_tcg_with_user_networking() -> None:
    qemu_installed = shutil.which("qemu-system-x86_64") is not None and shutil.which("qemu-img") is not None
    assert qemu_installed, "QEMU is not installed (scripts/setup-host.sh)"
    libvirt_qemu_user = subprocess.run(["id", "libvirt-qemu"], capture_output=True).returncode == 0
    assert libvirt_qemu_user, "the libvirt-qemu user is missing (scripts/setup-host.sh)"
    # Unix socket paths must stay under 108 bytes: a short root directly under /tmp.
    root = Path(tempfile.mkdtemp(prefix="kvconv", dir="/tmp"))
    conn = None
    try:
        uri = embed_uri(root)
        # Seed 000's VM as the VM controller would start it: 2 cores, 4Gi (hotpluggable up to 16Gi), masquerade NIC.
        (doc,) = load(paths.SEEDS / "000-vm-my-vm.yaml")
        vmi = vmi_from_vm_doc(doc)
        base = root / "base.qcow2"
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(base), "16M"], check=True)
        ctx = ConverterContext(
            use_emulation=True,
            network_mode="user",
            private_dir=str(root / "private"),
            ephemeral_disk_dir=str(root / "ephemeral"),
            container_disk_dir=str(root / "container-disks"),
            libvirt_runtime_dir=str(root / "libvirt"),
            container_disks={"rootdisk": (str(base), "qcow2")},
        )
        overlay = root / "ephemeral" / "disk-data" / "rootdisk" / "disk.qcow2"
        overlay.parent.mkdir(parents=True)
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(base), str(overlay)], check=True
        )
        (root / "private" / VMI_UID).mkdir(parents=True)
        xml = convert(vmi, ctx)
        _start_event_loop()
        conn = libvirt.open(uri)
        dom = conn.defineXML(xml)
        try:
            dom.create()
            eventually_sync(lambda: dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING, timeout=30, interval=0.2)
            live = parse(dom.XMLDesc(0))
            assert live.get("type") == "qemu"
            assert live.find("devices/interface").get("type") == "user"
            assert live.find("maxMemory") is not None and live.find("cpu/numa/cell") is not None
            assert (root / "private" / VMI_UID / "virt-serial0").exists()
            assert (root / "private" / VMI_UID / "virt-vnc").exists()
            dom.destroy()
            assert dom.state()[0] == libvirt.VIR_DOMAIN_SHUTOFF
        finally:
            if dom.isActive():
                dom.destroy()
            dom.undefine()
    finally:
        if conn is not None:
            conn.close()
        shutil.rmtree(root, ignore_errors=True)
