"""KubeVirt's mutating admission (defaults): one table per default, mirrored from upstream's unit tests."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml

from pykubevirt.admission.causes import AdmissionRejected
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import (
    PRESET_DEPRECATION_WARNING,
    MutationDenied,
    mutate_migration,
    mutate_vm,
    mutate_vmi,
    preset_warnings,
    set_vmi_spec_defaults,
    supports_pcie_hotplug,
)
from pykubevirt.admission.defaults.feature_defaults import set_hyperv_dependencies
from pykubevirt.api.quantity import Quantity, QuantityError
from pykubevirt.config.cluster_config import ClusterConfig
from tests import paths
from tests.support.object_lookup import DictLookup

NOW = "2026-08-01T12:00:00Z"
EXAMPLES = paths.EXAMPLES


def lookup_of(*objects: tuple[str, str | None, dict[str, Any]]) -> DictLookup:
    """A lookup of (kind, namespace, object) entries, each keyed by its metadata.name."""
    return DictLookup({(kind, ns, o["metadata"]["name"]): o for kind, ns, o in objects})


def make_ctx(lookup: DictLookup | None = None, username: str = "kubernetes-admin", **config: Any) -> AdmissionContext:
    counter: Iterator[int] = itertools.count(1)
    return AdmissionContext(
        config=replace(ClusterConfig(), **config),
        lookup=lookup or lookup_of(),
        username=username,
        now=lambda: NOW,
        random_uuid=lambda: f"00000000-0000-0000-0000-{next(counter):012d}",
    )


def new_vmi(spec: dict[str, Any] | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "default", **metadata},
        "spec": copy.deepcopy(spec) if spec is not None else {"domain": {"devices": {}}},
    }


def admit_vmi(spec: dict[str, Any] | None = None, ctx: AdmissionContext | None = None, **config: Any) -> dict[str, Any]:
    vmi = new_vmi(spec)
    mutate_vmi(vmi, ctx or make_ctx(**config), operation="CREATE")
    return vmi


def domain(spec_domain: dict[str, Any], arch: str | None = None, **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"domain": spec_domain, **spec}
    if arch is not None:
        out["architecture"] = arch
    return out


def at(data: Any, path: str) -> Any:
    """Follow a dotted path with [i] list indices; None when missing."""
    current = data
    for part in path.replace("[", ".").replace("]", "").split("."):
        if isinstance(current, list):
            current = current[int(part)] if int(part) < len(current) else None
        elif isinstance(current, dict):
            current = current.get(part)
        else:
            return None
    return current


# --- architecture, machine type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "cluster_arch", "expected_arch", "machine"),
    [
        (None, "amd64", "amd64", "q35"),
        (None, "arm64", "arm64", "virt"),
        (None, "s390x", "s390x", "s390-ccw-virtio"),
        ("arm64", "amd64", "arm64", "virt"),
        ("s390x", "amd64", "s390x", "s390-ccw-virtio"),
        ("ppc64le", "amd64", "ppc64le", "q35"),
    ],
)
def test_architecture_and_machine_type(arch: str | None, cluster_arch: str, expected_arch: str, machine: str) -> None:
    vmi = admit_vmi(domain({}, arch), architecture=cluster_arch)
    assert vmi["spec"]["architecture"] == expected_arch
    assert vmi["spec"]["domain"]["machine"] == {"type": machine}


def test_user_machine_type_kept() -> None:
    vmi = admit_vmi(domain({"machine": {"type": "pc-q35-2.0"}}))
    assert vmi["spec"]["domain"]["machine"]["type"] == "pc-q35-2.0"


# --- resources, guest memory, topology, cpu model -------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "cpu", "config", "expected_requests"),
    [
        ({"limits": {"cpu": "1"}}, None, {}, {"cpu": "1"}),
        ({"requests": {}, "limits": {"cpu": "1500m"}}, None, {}, {"cpu": "1500m"}),
        (
            {"requests": {"cpu": "600m", "memory": "512Mi"}, "limits": {"cpu": "1"}},
            None,
            {},
            {"cpu": "600m", "memory": "512Mi"},
        ),
        ({}, None, {}, None),
        ({}, None, {"cpu_request": "800m"}, {"cpu": "800m"}),
        ({}, None, {"cpu_request": "0.1"}, None),
        ({}, {"dedicatedCpuPlacement": True}, {"cpu_request": "800m"}, None),
        ({"requests": {"cpu": "600m"}}, None, {"cpu_request": "800m"}, {"cpu": "600m"}),
    ],
)
def test_cpu_request(resources: dict[str, Any], cpu: Any, config: dict[str, Any], expected_requests: Any) -> None:
    spec_domain: dict[str, Any] = {"resources": resources}
    if cpu is not None:
        spec_domain["cpu"] = cpu
    vmi = admit_vmi(domain(spec_domain), **config)
    assert vmi["spec"]["domain"]["resources"].get("requests") == expected_requests


@pytest.mark.parametrize(
    ("spec_domain", "guest"),
    [
        ({"resources": {"requests": {"memory": "1Gi"}}}, "1Gi"),
        ({"resources": {"limits": {"memory": "1Gi"}}}, "1Gi"),
        ({"resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}, "1Gi"),
        ({"memory": {"hugepages": {"pageSize": "1Gi"}}}, "1Gi"),
        ({"resources": {"requests": {"memory": "1024Mi"}}}, "1Gi"),
        ({"resources": {"requests": {"memory": 134217728}}}, "134217728"),
        ({"memory": {"guest": "3584Mi"}, "resources": {"requests": {"memory": "4Gi"}}}, "3584Mi"),
        ({"resources": {"requests": {"memory": "0"}, "limits": {"memory": "2Gi"}}}, "2Gi"),
        ({}, None),
    ],
)
def test_guest_memory(spec_domain: dict[str, Any], guest: str | None) -> None:
    vmi = admit_vmi(domain(spec_domain))
    assert vmi["spec"]["domain"]["memory"].get("guest") == guest
    if guest is None:
        assert "memory" not in vmi["status"]
    else:
        assert vmi["status"]["memory"] == {"guestAtBoot": guest, "guestCurrent": guest, "guestRequested": guest}


@pytest.mark.parametrize(
    ("spec_domain", "topology"),
    [
        ({}, (1, 1, 1)),
        ({"cpu": {"model": "EPYC"}, "resources": {"requests": {"cpu": "2200m"}}}, (3, 1, 1)),
        ({"cpu": {"model": "EPYC"}, "resources": {"requests": {"cpu": "2.3"}}}, (3, 1, 1)),
        ({"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "4"}}}, (4, 1, 1)),
        ({"cpu": {"sockets": 0, "cores": 0, "threads": 0}, "resources": {"limits": {"cpu": "2"}}}, (2, 1, 1)),
        ({"cpu": {"cores": 2}}, (None, 2, None)),
        ({"cpu": {"sockets": 2, "cores": 4, "threads": 1}}, (2, 4, 1)),
    ],
)
def test_cpu_topology(spec_domain: dict[str, Any], topology: tuple[Any, Any, Any]) -> None:
    cpu = admit_vmi(domain(spec_domain))["spec"]["domain"]["cpu"]
    assert (cpu.get("sockets"), cpu.get("cores"), cpu.get("threads")) == topology


@pytest.mark.parametrize(
    ("arch", "cpu", "cluster_model", "model"),
    [
        ("amd64", None, None, "host-model"),
        ("s390x", None, None, "host-model"),
        ("arm64", None, None, "host-passthrough"),
        ("amd64", None, "Haswell", "Haswell"),
        ("s390x", None, "Haswell", "Haswell"),
        ("arm64", None, "Haswell", "host-passthrough"),
        ("amd64", {"model": "EPYC"}, "Haswell", "EPYC"),
    ],
)
def test_cpu_model(arch: str, cpu: Any, cluster_model: str | None, model: str) -> None:
    spec_domain = {"cpu": cpu} if cpu else {}
    vmi = admit_vmi(domain(spec_domain, arch), cpu_model=cluster_model)
    assert vmi["spec"]["domain"]["cpu"]["model"] == model


def test_user_values_not_overridden() -> None:
    spec_domain = {
        "resources": {"requests": {"cpu": "600m", "memory": "512Mi"}},
        "cpu": {"model": "EPYC"},
        "machine": {"type": "q35"},
    }
    vmi = admit_vmi(domain(spec_domain), cpu_model="Haswell", cpu_request="800m")
    d = vmi["spec"]["domain"]
    assert (d["cpu"]["model"], d["machine"]["type"]) == ("EPYC", "q35")
    assert d["resources"]["requests"] == {"cpu": "600m", "memory": "512Mi"}


# --- container disks, eviction strategy ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "given", "expected"),
    [
        ("test@sha256:9c2b78e11c25b3fd0b24b0ed684a112052dff03eee4ca4bdcc4f3168f9a14396", None, "IfNotPresent"),
        ("test:latest", None, "Always"),
        ("test", None, "Always"),
        ("test:notlatest", None, "IfNotPresent"),
        ("registry:5000/test", None, "IfNotPresent"),
        ("registry:5000/test:latest", None, "Always"),
        ("test:latest", "Never", "Never"),
        ("test", "IfNotPresent", "IfNotPresent"),
    ],
)
def test_container_disk_pull_policy(image: str, given: str | None, expected: str) -> None:
    disk: dict[str, Any] = {"image": image}
    if given:
        disk["imagePullPolicy"] = given
    vmi = admit_vmi(domain({}, volumes=[{"name": "a", "containerDisk": disk}]))
    assert vmi["spec"]["volumes"][0]["containerDisk"] == {"image": image, "imagePullPolicy": expected}


@pytest.mark.parametrize(
    ("given", "cluster", "expected"),
    [
        (None, None, "None"),
        (None, "LiveMigrate", "LiveMigrate"),
        ("None", "LiveMigrate", "None"),
        ("External", None, "External"),
    ],
)
def test_eviction_strategy(given: str | None, cluster: str | None, expected: str) -> None:
    spec = domain({}) if given is None else domain({}, evictionStrategy=given)
    assert admit_vmi(spec, eviction_strategy=cluster)["spec"]["evictionStrategy"] == expected


# --- network -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "binding"), [("bridge", {"bridge": {}}), ("masquerade", {"masquerade": {}})])
def test_default_pod_interface(kind: str, binding: dict[str, Any]) -> None:
    vmi = admit_vmi(network_interface=kind)
    assert vmi["spec"]["domain"]["devices"]["interfaces"] == [{"name": "default", **binding}]
    assert vmi["spec"]["networks"] == [{"name": "default", "pod": {}}]


@pytest.mark.parametrize(
    ("devices", "networks"),
    [
        ({"interfaces": [{"name": "a"}]}, [{"name": "b"}]),
        ({"interfaces": [{"name": "a"}]}, []),
        ({"interfaces": []}, [{"name": "b"}]),
        ({"autoattachPodInterface": False}, None),
    ],
)
def test_no_default_pod_interface(devices: dict[str, Any], networks: Any) -> None:
    spec = domain({"devices": copy.deepcopy(devices)})
    if networks is not None:
        spec["networks"] = copy.deepcopy(networks)
    vmi = admit_vmi(spec)
    assert vmi["spec"]["domain"]["devices"].get("interfaces") == devices.get("interfaces")
    assert vmi["spec"].get("networks") == networks


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"network_interface": "bridge", "permit_bridge_interface_on_pod_network": False},
            "bridge interface is not enabled in kubevirt-config",
        ),
        ({"network_interface": "slirp", "permit_slirp_interface": True}, "slirp interface is deprecated as of v1.3"),
    ],
)
def test_default_pod_interface_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(MutationDenied) as denied:
        admit_vmi(**config)
    assert denied.value.message == message
    status = denied.value.status()
    assert status["code"] == 400
    assert (
        status["message"]
        == f'admission webhook "virtualmachineinstances-mutator.kubevirt.io" denied the request: {message}'
    )


def test_bridge_refusal_not_raised_when_interfaces_given() -> None:
    spec = domain(
        {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}, networks=[{"name": "default", "pod": {}}]
    )
    admit_vmi(spec, permit_bridge_interface_on_pod_network=False)


# --- disks, inputs, watchdog, probes --------------------------------------------------------------------


def test_missing_volume_disk_added() -> None:
    spec = domain(
        {"devices": {"disks": [{"name": "present-vol"}], "filesystems": [{"name": "fs", "virtiofs": {}}]}},
        volumes=[{"name": "present-vol"}, {"name": "missing-vol"}, {"name": "fs"}],
    )
    disks = admit_vmi(spec)["spec"]["domain"]["devices"]["disks"]
    assert [d["name"] for d in disks] == ["present-vol", "missing-vol"]
    assert disks[1]["disk"] == {"bus": "sata"}


def test_spec_defaults_add_bare_disks_only() -> None:
    """SetDefaultVirtualMachineInstanceSpec adds `{name}`; the target and bus come from the VMI-only defaults."""
    spec = domain({"devices": {}}, volumes=[{"name": "v", "emptyDisk": {"capacity": "1Gi"}}])
    set_vmi_spec_defaults(spec, make_ctx())
    assert spec["domain"]["devices"]["disks"] == [{"name": "v"}]
    assert "firmware" not in spec["domain"] and "features" not in spec["domain"]


@pytest.mark.parametrize(
    ("arch", "disk", "expected"),
    [
        ("amd64", {"name": "a"}, {"name": "a", "disk": {"bus": "sata"}}),
        ("amd64", {"name": "a", "disk": {"bus": "virtio"}}, {"name": "a", "disk": {"bus": "virtio"}}),
        (
            "amd64",
            {"name": "a", "cdrom": {}},
            {"name": "a", "cdrom": {"bus": "sata", "readonly": True, "tray": "closed"}},
        ),
        (
            "amd64",
            {"name": "a", "cdrom": {"readonly": False, "tray": "open", "bus": "scsi"}},
            {"name": "a", "cdrom": {"readonly": False, "tray": "open", "bus": "scsi"}},
        ),
        ("amd64", {"name": "a", "lun": {}}, {"name": "a", "lun": {"bus": "sata"}}),
        ("arm64", {"name": "a"}, {"name": "a", "disk": {"bus": "virtio"}}),
        ("arm64", {"name": "a", "disk": {"bus": "scsi"}}, {"name": "a", "disk": {"bus": "scsi"}}),
        (
            "arm64",
            {"name": "a", "cdrom": {}},
            {"name": "a", "cdrom": {"bus": "virtio", "readonly": True, "tray": "closed"}},
        ),
        ("arm64", {"name": "a", "lun": {}}, {"name": "a", "lun": {"bus": "virtio"}}),
        ("s390x", {"name": "a"}, {"name": "a", "disk": {"bus": "virtio"}}),
        (
            "amd64",
            {"name": "a", "blockSize": {"matchVolume": {}}},
            {"name": "a", "blockSize": {"matchVolume": {"enabled": True}}, "disk": {"bus": "sata"}},
        ),
    ],
)
def test_disk_defaults(arch: str, disk: dict[str, Any], expected: dict[str, Any]) -> None:
    spec = domain(
        {"devices": {"disks": [disk]}}, arch, volumes=[{"name": "a", "containerDisk": {"image": "test:latest"}}]
    )
    assert admit_vmi(spec)["spec"]["domain"]["devices"]["disks"] == [expected]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"name": "default-0"}, {"name": "default-0", "bus": "usb", "type": "tablet"}),
        ({"name": "t", "bus": "virtio"}, {"name": "t", "bus": "virtio", "type": "tablet"}),
    ],
)
def test_input_defaults(given: dict[str, Any], expected: dict[str, Any]) -> None:
    assert admit_vmi(domain({"devices": {"inputs": [given]}}))["spec"]["domain"]["devices"]["inputs"] == [expected]


@pytest.mark.parametrize(
    ("arch", "watchdog", "expected"),
    [
        ("amd64", {"name": "w"}, {"name": "w", "i6300esb": {"action": "reset"}}),
        ("amd64", {"name": "w", "i6300esb": {"action": "poweroff"}}, {"name": "w", "i6300esb": {"action": "poweroff"}}),
        ("s390x", {"name": "w"}, {"name": "w", "diag288": {"action": "reset"}}),
        ("amd64", None, None),
    ],
)
def test_watchdog_defaults(arch: str, watchdog: Any, expected: Any) -> None:
    devices = {"watchdog": watchdog} if watchdog else {}
    assert admit_vmi(domain({"devices": devices}, arch))["spec"]["domain"]["devices"].get("watchdog") == expected


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (
            {"tcpSocket": {"port": 22}},
            {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        ),
        (
            {
                "tcpSocket": {"port": 22},
                "timeoutSeconds": 5,
                "periodSeconds": 3,
                "successThreshold": 2,
                "failureThreshold": 9,
            },
            {"timeoutSeconds": 5, "periodSeconds": 3, "successThreshold": 2, "failureThreshold": 9},
        ),
        (
            {"tcpSocket": {"port": 22}, "periodSeconds": 0},
            {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        ),
    ],
)
def test_probe_defaults(probe: dict[str, Any], expected: dict[str, Any]) -> None:
    vmi = admit_vmi(domain({}, readinessProbe=copy.deepcopy(probe), livenessProbe=copy.deepcopy(probe)))
    for key in ("readinessProbe", "livenessProbe"):
        assert vmi["spec"][key] == {"tcpSocket": {"port": 22}, **expected}


def test_no_probe_no_defaults() -> None:
    assert "readinessProbe" not in admit_vmi()["spec"]


# --- firmware ----------------------------------------------------------------------------------------------


def test_firmware_uuid() -> None:
    assert admit_vmi()["spec"]["domain"]["firmware"] == {"uuid": "00000000-0000-0000-0000-000000000001"}
    kept = admit_vmi(domain({"firmware": {"uuid": "my-uuid", "serial": "s"}}))
    assert kept["spec"]["domain"]["firmware"] == {"uuid": "my-uuid", "serial": "s"}


@pytest.mark.parametrize(
    ("firmware", "bootloader"),
    [
        (None, {"efi": {"secureBoot": False}}),
        ({"bootloader": {"efi": {"secureBoot": True}}}, {"efi": {"secureBoot": True}}),
        ({"bootloader": {"efi": {"secureBoot": False}}}, {"efi": {"secureBoot": False}}),
        ({"bootloader": {}}, {}),
        ({"bootloader": {"efi": {}}}, {"efi": {"secureBoot": False}}),
        ({"bootloader": {"bios": {}}}, {"bios": {}}),
    ],
)
def test_arm64_bootloader(firmware: Any, bootloader: dict[str, Any]) -> None:
    spec_domain = {"firmware": firmware} if firmware else {}
    vmi = admit_vmi(domain(spec_domain, "arm64"))
    assert vmi["spec"]["domain"]["firmware"]["bootloader"] == bootloader


def test_amd64_gets_no_bootloader() -> None:
    assert "bootloader" not in admit_vmi()["spec"]["domain"]["firmware"]


# --- features ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "features", "expected"),
    [
        ("amd64", None, {"acpi": {"enabled": True}}),
        ("amd64", {"acpi": {"enabled": False}}, {"acpi": {"enabled": False}}),
        ("s390x", None, {"acpi": {"enabled": False}}),
        ("s390x", {"acpi": {"enabled": True}}, {"acpi": {"enabled": True}}),
        (
            "amd64",
            {"apic": {}, "smm": {}, "pvspinlock": {"enabled": False}},
            {
                "acpi": {"enabled": True},
                "apic": {"enabled": True},
                "smm": {"enabled": True},
                "pvspinlock": {"enabled": False},
            },
        ),
        ("amd64", {"kvm": {"hidden": True}}, {"acpi": {"enabled": True}, "kvm": {"hidden": True}}),
        (
            "amd64",
            {"hyperv": {"relaxed": {}, "spinlocks": {}, "vendorid": {"vendorid": "x"}}},
            {
                "acpi": {"enabled": True},
                "hyperv": {
                    "relaxed": {"enabled": True},
                    "spinlocks": {"enabled": True, "spinlocks": 4096},
                    "vendorid": {"vendorid": "x", "enabled": True},
                },
            },
        ),
        (
            "amd64",
            {"hyperv": {"spinlocks": {"enabled": False}}},
            {"acpi": {"enabled": True}, "hyperv": {"spinlocks": {"enabled": False}}},
        ),
        (
            "amd64",
            {"hyperv": {"spinlocks": {"spinlocks": 8191}}},
            {"acpi": {"enabled": True}, "hyperv": {"spinlocks": {"enabled": True, "spinlocks": 8191}}},
        ),
    ],
)
def test_feature_defaults(arch: str, features: Any, expected: dict[str, Any]) -> None:
    spec_domain = {"features": copy.deepcopy(features)} if features else {}
    assert admit_vmi(domain(spec_domain, arch))["spec"]["domain"]["features"] == expected


def test_timers_enabled() -> None:
    clock = {
        "utc": {},
        "timer": {"hpet": {"present": False}, "pit": {"tickPolicy": "delay"}, "rtc": {"enabled": False}, "hyperv": {}},
    }
    vmi = admit_vmi(domain({"clock": clock}))
    assert vmi["spec"]["domain"]["clock"]["timer"] == {
        "hpet": {"present": False, "enabled": True},
        "pit": {"tickPolicy": "delay", "enabled": True},
        "rtc": {"enabled": False},
        "hyperv": {"enabled": True},
    }


def test_hyperv_dependencies_through_mutator() -> None:
    vmi = admit_vmi(domain({"features": {"hyperv": {"synictimer": {"enabled": True}}}}))
    hyperv = vmi["spec"]["domain"]["features"]["hyperv"]
    assert hyperv == {"synictimer": {"enabled": True}, "synic": {"enabled": True}, "vpindex": {"enabled": True}}


@pytest.mark.parametrize(
    ("hyperv", "expected", "conflict"),
    [
        ({}, {}, None),
        (
            {"relaxed": {"enabled": True}, "runtime": {"enabled": True}},
            {"relaxed": {"enabled": True}, "runtime": {"enabled": True}},
            None,
        ),
        (
            {"relaxed": {"enabled": True}, "synictimer": {"enabled": True}},
            {
                "relaxed": {"enabled": True},
                "synictimer": {"enabled": True},
                "synic": {"enabled": True},
                "vpindex": {"enabled": True},
            },
            None,
        ),
        (
            {"vpindex": {"enabled": False}, "synictimer": {"enabled": True}, "evmcs": {"enabled": True}},
            {
                "vpindex": {"enabled": False},
                "synictimer": {"enabled": True},
                "evmcs": {"enabled": True},
                "vapic": {"enabled": True},
                "synic": {"enabled": True},
            },
            "'spec.domain.features.hyperv.synic' requires 'spec.domain.features.hyperv.vpindex', which was disabled.",
        ),
        ({"tlbflush": {"enabled": True}}, {"tlbflush": {"enabled": True}, "vpindex": {"enabled": True}}, None),
        ({"ipi": {"enabled": False}}, {"ipi": {"enabled": False}}, None),
    ],
)
def test_hyperv_dependencies(hyperv: dict[str, Any], expected: dict[str, Any], conflict: str | None) -> None:
    spec = {"domain": {"features": {"hyperv": copy.deepcopy(hyperv)}}}
    assert set_hyperv_dependencies(spec) == conflict
    assert spec["domain"]["features"]["hyperv"] == expected


VMX = {"name": "vmx", "policy": "require"}


@pytest.mark.parametrize(
    ("cpu", "evmcs", "expected_cpu"),
    [
        (None, {"enabled": False}, None),
        (None, {}, {"features": [VMX]}),
        (None, {"enabled": True}, {"features": [VMX]}),
        ({"sockets": 2}, {}, {"sockets": 2, "features": [VMX]}),
        ({"features": []}, {}, {"features": [VMX]}),
        (
            {"features": [{"name": "monitor", "policy": "require"}]},
            {},
            {"features": [{"name": "monitor", "policy": "require"}, VMX]},
        ),
        ({"features": [{"name": "vmx", "policy": "disabled"}]}, {}, {"features": [VMX]}),
        ({"features": [VMX]}, {}, {"features": [VMX]}),
    ],
)
def test_evmcs_requires_vmx(cpu: Any, evmcs: dict[str, Any], expected_cpu: Any) -> None:
    spec: dict[str, Any] = {"domain": {"features": {"hyperv": {"evmcs": evmcs, "vapic": {"enabled": True}}}}}
    if cpu is not None:
        spec["domain"]["cpu"] = copy.deepcopy(cpu)
    set_hyperv_dependencies(spec)
    assert spec["domain"].get("cpu") == expected_cpu


# --- hotplug -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "cpu", "config", "max_sockets"),
    [
        ("amd64", None, {"max_cpu_sockets": 10}, 10),
        ("amd64", {"sockets": 2}, {"max_cpu_sockets": 10, "max_hotplug_ratio": 2}, 10),
        ("amd64", {"sockets": 2, "maxSockets": 16}, {}, 16),
        ("amd64", None, {"max_hotplug_ratio": 2}, 2),
        ("amd64", {"sockets": 2}, {}, 8),
        ("amd64", {"sockets": 32, "cores": 2, "threads": 3}, {}, 85),
        ("amd64", None, {}, 4),
        ("amd64", {"sockets": 3}, {"max_cpu_sockets": 2}, 3),
        ("s390x", {"sockets": 2}, {}, 8),
        ("arm64", None, {"max_cpu_sockets": 10}, None),
        ("amd64", {"sockets": 2}, {"vm_rollout_strategy": "Stage"}, None),
    ],
)
def test_cpu_hotplug(arch: str, cpu: Any, config: dict[str, Any], max_sockets: int | None) -> None:
    spec_domain = {"cpu": cpu} if cpu else {}
    vmi = admit_vmi(domain(spec_domain, arch), **config)
    assert vmi["spec"]["domain"]["cpu"].get("maxSockets") == max_sockets


@pytest.mark.parametrize(
    ("arch", "spec_domain", "config", "max_guest"),
    [
        ("amd64", {"memory": {"guest": "2Gi", "maxGuest": "6Gi"}}, {}, "6Gi"),
        ("amd64", {"memory": {"guest": "1Gi"}}, {"max_guest": "10Gi"}, "10Gi"),
        ("amd64", {"memory": {"guest": "1Gi"}}, {"max_guest": "10Gi", "max_hotplug_ratio": 2}, "10Gi"),
        ("amd64", {"memory": {"guest": "1Gi"}}, {}, "4Gi"),
        ("amd64", {"memory": {"guest": "1Gi"}}, {"max_hotplug_ratio": 2}, "2Gi"),
        ("amd64", {"resources": {"requests": {"memory": "1024Mi"}}}, {}, "4Gi"),
        ("amd64", {"memory": {"guest": "128Mi"}}, {}, None),
        ("amd64", {"memory": {"guest": "123"}}, {}, None),
        ("amd64", {"memory": {"guest": "512Mi"}}, {}, None),
        ("amd64", {"memory": {}}, {}, None),
        ("amd64", {"memory": {"guest": "2Gi"}, "launchSecurity": {}}, {}, None),
        ("amd64", {"memory": {"guest": "2Gi"}, "cpu": {"dedicatedCpuPlacement": True, "realtime": {}}}, {}, None),
        ("amd64", {"memory": {"guest": "2Gi"}, "cpu": {"numa": {"guestMappingPassthrough": {}}}}, {}, None),
        ("amd64", {"memory": {"guest": "4Gi"}}, {"max_guest": "2Gi"}, None),
        ("amd64", {"memory": {"guest": "2Gi"}}, {"vm_rollout_strategy": "Stage"}, None),
        ("arm64", {"memory": {"guest": "2Gi"}}, {"max_guest": "512Mi"}, None),
        ("s390x", {"memory": {"guest": "2Gi"}}, {}, None),
    ],
)
def test_memory_hotplug(arch: str, spec_domain: dict[str, Any], config: dict[str, Any], max_guest: str | None) -> None:
    vmi = admit_vmi(domain(spec_domain, arch), **config)
    assert vmi["spec"]["domain"]["memory"].get("maxGuest") == max_guest


# --- status, metadata --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "status", "expected"),
    [
        (None, None, {"sockets": 1, "cores": 1, "threads": 1}),
        ({"sockets": 3, "cores": 3, "threads": 2}, None, {"sockets": 3, "cores": 3, "threads": 2}),
        ({"sockets": 1, "cores": 1, "threads": 0}, None, {"sockets": 1, "cores": 1}),
        (
            {"sockets": 2, "cores": 1, "threads": 1},
            {"currentCPUTopology": {"sockets": 1, "cores": 1, "threads": 1}},
            {"sockets": 1, "cores": 1, "threads": 1},
        ),
    ],
)
def test_current_cpu_topology(cpu: Any, status: Any, expected: dict[str, int]) -> None:
    vmi = new_vmi(domain({"cpu": cpu} if cpu else {}))
    if status:
        vmi["status"] = copy.deepcopy(status)
    mutate_vmi(vmi, make_ctx(), operation="CREATE")
    assert vmi["status"]["currentCPUTopology"] == expected


def test_initial_status_and_finalizer() -> None:
    vmi = admit_vmi()
    assert vmi["metadata"]["finalizers"] == ["kubevirt.io/foregroundDeleteVirtualMachine"]
    assert vmi["status"]["phase"] == "Pending"
    assert vmi["status"]["phaseTransitionTimestamps"] == [{"phase": "Pending", "phaseTransitionTimestamp": NOW}]
    assert vmi["status"]["runtimeUser"] == 107
    assert vmi["status"]["guestOSInfo"] == {}


def test_root_gate_keeps_root_user() -> None:
    assert admit_vmi(feature_gates=frozenset({"Root"}))["status"]["runtimeUser"] == 0


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (["foregroundDeleteVirtualMachine"], ["kubevirt.io/foregroundDeleteVirtualMachine"]),
        (["kubevirt.io/foregroundDeleteVirtualMachine"], ["kubevirt.io/foregroundDeleteVirtualMachine"]),
        (["example.com/keep"], ["example.com/keep", "kubevirt.io/foregroundDeleteVirtualMachine"]),
    ],
)
def test_finalizer_migration(given: list[str], expected: list[str]) -> None:
    vmi = new_vmi(finalizers=list(given))
    mutate_vmi(vmi, make_ctx(), operation="CREATE")
    assert vmi["metadata"]["finalizers"] == expected


@pytest.mark.parametrize(
    ("arch", "machine", "annotated"),
    [
        ("amd64", None, True),
        ("arm64", None, True),
        ("s390x", None, False),
        ("ppc64le", None, False),
        ("amd64", "pc-i440fx-2.12", False),
        ("amd64", "pc-q35-3.0", True),
    ],
)
def test_pci_topology_annotation(arch: str, machine: str | None, annotated: bool) -> None:
    spec_domain = {"machine": {"type": machine}} if machine else {}
    annotations = admit_vmi(domain(spec_domain, arch))["metadata"].get("annotations") or {}
    assert (annotations.get("kubevirt.io/pci-topology-version") == "v3") is annotated


def test_pci_topology_annotation_kept() -> None:
    vmi = new_vmi(annotations={"kubevirt.io/pci-topology-version": "v2"})
    mutate_vmi(vmi, make_ctx(), operation="CREATE")
    assert vmi["metadata"]["annotations"]["kubevirt.io/pci-topology-version"] == "v2"


@pytest.mark.parametrize(
    ("arch", "machine", "expected"),
    [
        ("amd64", "pc-q35-3.0", True),
        ("amd64", None, True),
        ("amd64", "pc-i440fx-2.12", False),
        ("arm64", "virt", True),
        ("arm64", "virt-6.2", True),
        ("", "pc-q35-3.0", True),
        ("", None, True),
        ("s390x", None, False),
        ("ppc64le", None, False),
    ],
)
def test_supports_pcie_hotplug(arch: str, machine: str | None, expected: bool) -> None:
    spec: dict[str, Any] = {"architecture": arch, "domain": {}}
    if machine:
        spec["domain"]["machine"] = {"type": machine}
    assert supports_pcie_hotplug(spec) is expected


@pytest.mark.parametrize(
    ("user", "reverted"),
    [
        ("system:serviceaccount:kubevirt:kubevirt-apiserver", False),
        ("system:serviceaccount:kubevirt:kubevirt-controller", False),
        ("system:serviceaccount:kubevirt:kubevirt-handler", False),
        ("unknown", True),
    ],
)
def test_update_reverts_foreign_status_edits(user: str, reverted: bool) -> None:
    old = new_vmi()
    old["status"] = {"phase": "Running"}
    vmi = copy.deepcopy(old)
    vmi["status"] = {"phase": "Failed"}
    mutate_vmi(vmi, make_ctx(username=user), operation="UPDATE", old=old)
    assert vmi["status"] == ({"phase": "Running"} if reverted else {"phase": "Failed"})
    assert vmi["spec"] == old["spec"]


# --- presets -----------------------------------------------------------------------------------------------


def _preset(name: str, selector: dict[str, Any], preset_domain: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    return (
        "VirtualMachineInstancePreset",
        "default",
        {"metadata": {"name": name}, "spec": {"selector": selector, "domain": preset_domain}},
    )


def test_presets_applied_and_annotated() -> None:
    lookup = lookup_of(
        _preset("small", {"matchLabels": {"flavor": "small"}}, {"resources": {"requests": {"memory": "64M"}}}),
        _preset("other", {"matchLabels": {"flavor": "big"}}, {"cpu": {"cores": 4}}),
    )
    vmi = new_vmi(labels={"flavor": "small"})
    mutate_vmi(vmi, make_ctx(lookup), operation="CREATE")
    assert vmi["spec"]["domain"]["resources"]["requests"]["memory"] == "64M"
    assert vmi["spec"]["domain"]["memory"]["guest"] == "64M"
    assert vmi["metadata"]["annotations"]["virtualmachinepreset.kubevirt.io/small"] == "kubevirt.io/v1"
    assert "virtualmachinepreset.kubevirt.io/other" not in vmi["metadata"]["annotations"]
    assert preset_warnings(vmi) == [PRESET_DEPRECATION_WARNING]


@pytest.mark.parametrize(
    ("selector", "applied"),
    [
        ({"matchExpressions": [{"key": "flavor", "operator": "In", "values": ["small", "tiny"]}]}, True),
        ({"matchExpressions": [{"key": "flavor", "operator": "NotIn", "values": ["small"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchLabels": {"flavor": "small"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        # An operator metav1.LabelSelector does not know: the preset applies to nothing.
        ({"matchExpressions": [{"key": "flavor", "operator": "Gt", "values": ["1"]}]}, False),
    ],
)
def test_preset_selector_expressions(selector: dict[str, Any], applied: bool) -> None:
    lookup = lookup_of(_preset("p", selector, {"cpu": {"cores": 3}}))
    vmi = new_vmi(labels={"flavor": "small"})
    mutate_vmi(vmi, make_ctx(lookup), operation="CREATE")
    assert ("virtualmachinepreset.kubevirt.io/p" in vmi["metadata"]["annotations"]) is applied
    assert (vmi["spec"]["domain"].get("cpu", {}).get("cores") == 3) is applied


def test_presets_excluded_and_conflicting() -> None:
    lookup = lookup_of(_preset("a", {}, {"cpu": {"cores": 2}}), _preset("b", {}, {"cpu": {"cores": 4}}))
    excluded = new_vmi(annotations={"virtualmachineinstancepresets.admission.kubevirt.io/exclude": "true"})
    mutate_vmi(excluded, make_ctx(lookup), operation="CREATE")
    assert preset_warnings(excluded) == []
    with pytest.raises(MutationDenied) as denied:
        mutate_vmi(new_vmi(), make_ctx(lookup), operation="CREATE")
    assert denied.value.code == 422
    assert denied.value.message.startswith(
        "VirtualMachinePresets cannot be applied due to conflicts: presets 'b' and 'a' conflict"
    )


# --- VM mutator ----------------------------------------------------------------------------------------------


def new_vm(template_spec: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "testvm", "namespace": "default"},
        "spec": {"runStrategy": "Halted", "template": {"spec": copy.deepcopy(template_spec or {"domain": {}})}, **spec},
    }


@pytest.mark.parametrize(
    ("arch", "machine", "annotated"),
    [("arm64", "virt", True), ("s390x", "s390-ccw-virtio", False), ("amd64", "q35", True)],
)
def test_vm_create_defaults(arch: str, machine: str, annotated: bool) -> None:
    vm = new_vm({"architecture": arch, "domain": {}})
    mutate_vm(vm, make_ctx(), operation="CREATE")
    template = vm["spec"]["template"]
    assert template["spec"]["domain"]["machine"] == {"type": machine}
    assert template["spec"]["domain"]["firmware"] == {
        "uuid": "00000000-0000-0000-0000-000000000001",
        "serial": "00000000-0000-0000-0000-000000000002",
    }
    assert ("kubevirt.io/pci-topology-version" in (template.get("metadata") or {}).get("annotations", {})) is annotated
    # Only arch and machine type: the VMI-level defaults are left to the VMI mutator.
    assert "cpu" not in template["spec"]["domain"] and "networks" not in template["spec"]


def test_vm_create_keeps_user_values() -> None:
    vm = new_vm(
        {
            "architecture": "amd64",
            "domain": {"machine": {"type": "pc-q35-2.0"}, "firmware": {"uuid": "u", "serial": "s"}},
        }
    )
    vm["spec"]["template"]["metadata"] = {"annotations": {"kubevirt.io/pci-topology-version": "v2"}}
    mutate_vm(vm, make_ctx(architecture="arm64"), operation="CREATE")
    template = vm["spec"]["template"]
    assert template["spec"]["architecture"] == "amd64"
    assert template["spec"]["domain"]["machine"] == {"type": "pc-q35-2.0"}
    assert template["spec"]["domain"]["firmware"] == {"uuid": "u", "serial": "s"}
    assert template["metadata"]["annotations"]["kubevirt.io/pci-topology-version"] == "v2"


def test_vm_update_assigns_no_firmware_ids_or_annotation() -> None:
    vm = new_vm()
    old = copy.deepcopy(vm)
    mutate_vm(vm, make_ctx(), operation="UPDATE", old=old)
    template = vm["spec"]["template"]
    assert "firmware" not in template["spec"]["domain"]
    assert "metadata" not in template
    assert template["spec"]["architecture"] == "amd64"
    assert template["spec"]["domain"]["machine"] == {"type": "q35"}


def test_vm_being_deleted_is_untouched() -> None:
    vm = new_vm()
    vm["metadata"]["deletionTimestamp"] = NOW
    before = copy.deepcopy(vm)
    mutate_vm(vm, make_ctx(), operation="UPDATE", old=before)
    assert vm == before


def test_vm_quantities_canonical() -> None:
    template = {
        "domain": {
            "resources": {"requests": {"memory": 22436758, "cpu": "2"}, "limits": {"memory": 22436758, "cpu": 2.5}},
            "memory": {"guest": 2048234},
            "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
        }
    }
    vm = new_vm(template)
    mutate_vm(vm, make_ctx(), operation="CREATE")
    d = vm["spec"]["template"]["spec"]["domain"]
    assert d["resources"] == {
        "requests": {"memory": "22436758", "cpu": "2"},
        "limits": {"memory": "22436758", "cpu": "2500m"},
    }
    assert d["memory"]["guest"] == "2048234"


def _preference(kind: str, namespace: str | None, spec: dict[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    return (kind, namespace, {"metadata": {"name": "pref"}, "spec": spec})


@pytest.mark.parametrize(
    ("matcher_kind", "lookup_kind", "namespace"),
    [
        ("", "VirtualMachineClusterPreference", None),
        ("VirtualMachineClusterPreference", "VirtualMachineClusterPreference", None),
        ("virtualmachinepreference", "VirtualMachinePreference", "default"),
    ],
)
def test_vm_preferred_machine_type_and_arch(matcher_kind: str, lookup_kind: str, namespace: str | None) -> None:
    spec = {
        "preferredArchitecture": "arm64",
        "machine": {"preferredMachineType": "virt-7.0"},
        "volumes": {"preferredStorageClassName": "fast"},
    }
    lookup = lookup_of(_preference(lookup_kind, namespace, spec))
    matcher = {"name": "pref", **({"kind": matcher_kind} if matcher_kind else {})}
    vm = new_vm(
        preference=matcher,
        dataVolumeTemplates=[
            {"metadata": {"name": "dv"}, "spec": {"storage": {}, "pvc": {"storageClassName": "slow"}}}
        ],
    )
    mutate_vm(vm, make_ctx(lookup), operation="CREATE")
    template_spec = vm["spec"]["template"]["spec"]
    assert template_spec["architecture"] == "arm64"
    assert template_spec["domain"]["machine"] == {"type": "virt-7.0"}
    assert vm["spec"]["dataVolumeTemplates"][0]["spec"] == {
        "storage": {"storageClassName": "fast"},
        "pvc": {"storageClassName": "slow"},
    }


def test_vm_preference_lookup_failure_uses_cluster_defaults() -> None:
    vm = new_vm({"domain": {"machine": {"type": "pc-q35-2.0"}}}, preference={"name": "missing"})
    mutate_vm(vm, make_ctx(), operation="CREATE")
    assert vm["spec"]["template"]["spec"]["domain"]["machine"]["type"] == "pc-q35-2.0"
    assert vm["spec"]["template"]["spec"]["architecture"] == "amd64"


def test_vm_preference_from_revision() -> None:
    revision = {
        "metadata": {"name": "rev-1"},
        "data": {
            "kind": "VirtualMachineClusterPreference",
            "spec": {"machine": {"preferredMachineType": "pc-q35-9.0"}},
        },
    }
    vm = new_vm(preference={"name": "pref", "revisionName": "rev-1"})
    mutate_vm(vm, make_ctx(lookup_of(("ControllerRevision", "default", revision))), operation="CREATE")
    assert vm["spec"]["template"]["spec"]["domain"]["machine"] == {"type": "pc-q35-9.0"}


@pytest.mark.parametrize(
    ("labels", "arch"),
    [
        ({"template.kubevirt.io/architecture": "arm64"}, "arm64"),
        ({"template.kubevirt.io/architecture": "foobar"}, "amd64"),
        ({}, "amd64"),
    ],
)
def test_vm_architecture_from_data_source(labels: dict[str, str], arch: str) -> None:
    source = {"metadata": {"name": "ds", "namespace": "ds-namespace", "labels": labels}, "spec": {}}
    template = {
        "metadata": {"name": "dv"},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "ds", "namespace": "ds-namespace"}},
    }
    vm = new_vm(dataVolumeTemplates=[template])
    mutate_vm(vm, make_ctx(lookup_of(("DataSource", "ds-namespace", source))), operation="CREATE")
    assert vm["spec"]["template"]["spec"]["architecture"] == arch


def test_vm_architecture_from_nested_data_source() -> None:
    nested = {"metadata": {"name": "nested", "labels": {"template.kubevirt.io/architecture": "s390x"}}, "spec": {}}
    outer = {"metadata": {"name": "ds"}, "spec": {"source": {"dataSource": {"name": "nested", "namespace": "other"}}}}
    template = {"metadata": {"name": "dv"}, "spec": {"sourceRef": {"kind": "DataSource", "name": "ds"}}}
    vm = new_vm(dataVolumeTemplates=[template])
    mutate_vm(
        vm, make_ctx(lookup_of(("DataSource", "default", outer), ("DataSource", "other", nested))), operation="CREATE"
    )
    assert vm["spec"]["template"]["spec"]["architecture"] == "s390x"
    assert vm["spec"]["template"]["spec"]["domain"]["machine"]["type"] == "s390-ccw-virtio"


@pytest.mark.parametrize(
    ("which", "matcher", "field", "message"),
    [
        (
            "instancetype",
            {},
            "spec.instancetype",
            "Either Name or InferFromVolume should be provided within the InstancetypeMatcher",
        ),
        (
            "instancetype",
            {"name": "foo", "inferFromVolume": "bar"},
            "spec.instancetype.name",
            "Name already set, should be cleared before setting inferFromVolume",
        ),
        (
            "instancetype",
            {"kind": "foo", "inferFromVolume": "bar"},
            "spec.instancetype.kind",
            "Kind already set, should be cleared before setting inferFromVolume",
        ),
        (
            "instancetype",
            {"inferFromVolume": "bar", "inferFromVolumeFailurePolicy": "not-valid"},
            "spec.instancetype.inferFromVolumeFailurePolicy",
            "Invalid value 'not-valid' for InferFromVolumeFailurePolicy",
        ),
        (
            "preference",
            {},
            "spec.preference",
            "Either Name or InferFromVolume should be provided within the PreferenceMatcher",
        ),
        (
            "preference",
            {"name": "foo", "inferFromVolume": "bar"},
            "spec.preference.name",
            "Name already set, should be cleared before setting inferFromVolume",
        ),
    ],
)
def test_vm_invalid_matchers(which: str, matcher: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(AdmissionRejected) as rejected:
        mutate_vm(new_vm(**{which: matcher}), make_ctx(), operation="CREATE")
    assert [(c.field, c.message) for c in rejected.value.causes] == [(field, message)]
    assert rejected.value.status()["code"] == 422


@pytest.mark.parametrize(
    ("old_matcher", "new_matcher", "rejected"),
    [
        ({"name": "a", "revisionName": "r"}, {"name": "a", "revisionName": "r"}, False),
        ({"name": "a", "revisionName": "r"}, {"name": "b"}, False),
        ({"name": "a", "revisionName": "r"}, {"name": "b", "revisionName": "r2"}, False),
        ({"name": "a", "revisionName": "r"}, {"name": "a", "revisionName": "r2"}, False),
        (None, {"name": "a"}, False),
        ({"name": "a", "revisionName": "r"}, None, False),
        ({"name": "a", "revisionName": "r"}, {"name": "b", "revisionName": "r"}, True),
    ],
)
def test_vm_matcher_update(old_matcher: Any, new_matcher: Any, rejected: bool) -> None:
    for which in ("instancetype", "preference"):
        old = new_vm(**({which: old_matcher} if old_matcher else {}))
        vm = new_vm(**({which: new_matcher} if new_matcher else {}))
        if rejected:
            with pytest.raises(AdmissionRejected) as err:
                mutate_vm(vm, make_ctx(), operation="UPDATE", old=old)
            assert err.value.causes[0].field == f"spec.{which}.revisionName"
            assert err.value.causes[0].message == "the Matcher Name has been updated without updating the RevisionName"
        else:
            mutate_vm(vm, make_ctx(), operation="UPDATE", old=old)


def _pvc(labels: dict[str, str]) -> tuple[str, str, dict[str, Any]]:
    return ("PersistentVolumeClaim", "default", {"metadata": {"name": "root", "labels": labels}})


INFER_LABELS = {
    "instancetype.kubevirt.io/default-instancetype": "u1.medium",
    "instancetype.kubevirt.io/default-instancetype-kind": "VirtualMachineClusterInstancetype",
    "instancetype.kubevirt.io/default-preference": "fedora",
}


def test_vm_infer_matchers_from_pvc() -> None:
    template = {
        "domain": {"memory": {"guest": "1Gi"}},
        "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}],
    }
    vm = new_vm(
        template,
        instancetype={"inferFromVolume": "root", "inferFromVolumeFailurePolicy": "Ignore"},
        preference={"inferFromVolume": "root"},
    )
    mutate_vm(vm, make_ctx(lookup_of(_pvc(INFER_LABELS))), operation="CREATE")
    assert vm["spec"]["instancetype"] == {"name": "u1.medium", "kind": "VirtualMachineClusterInstancetype"}
    assert vm["spec"]["preference"] == {"name": "fedora"}
    assert "memory" not in vm["spec"]["template"]["spec"]["domain"]


def test_vm_infer_from_data_volume_template_data_source() -> None:
    source = {"metadata": {"name": "fedora", "labels": INFER_LABELS}, "spec": {}}
    dvt = {
        "metadata": {"name": "root"},
        "spec": {"sourceRef": {"kind": "DataSource", "name": "fedora", "namespace": "images"}},
    }
    template = {"domain": {}, "volumes": [{"name": "root", "dataVolume": {"name": "root"}}]}
    vm = new_vm(template, instancetype={"inferFromVolume": "root"}, dataVolumeTemplates=[dvt])
    mutate_vm(vm, make_ctx(lookup_of(("DataSource", "images", source))), operation="CREATE")
    assert vm["spec"]["instancetype"]["name"] == "u1.medium"


@pytest.mark.parametrize(
    ("policy", "lookup", "outcome"),
    [
        (
            None,
            lookup_of(_pvc({})),
            "unable to find required instancetype.kubevirt.io/default-instancetype label on the volume",
        ),
        ("Ignore", lookup_of(_pvc({})), None),
        ("Ignore", lookup_of(), 'persistentvolumeclaims "root" not found'),
    ],
)
def test_vm_infer_failures(policy: str | None, lookup: DictLookup, outcome: str | None) -> None:
    matcher: dict[str, Any] = {"inferFromVolume": "root"}
    if policy:
        matcher["inferFromVolumeFailurePolicy"] = policy
    vm = new_vm(
        {"domain": {}, "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}]},
        instancetype=matcher,
    )
    if outcome is None:
        mutate_vm(vm, make_ctx(lookup), operation="CREATE")
        assert "instancetype" not in vm["spec"]
        return
    with pytest.raises(MutationDenied) as denied:
        mutate_vm(vm, make_ctx(lookup), operation="CREATE")
    assert denied.value.message == outcome
    assert denied.value.status()["code"] == 400


# --- migration mutator ---------------------------------------------------------------------------------------


def test_migration_mutator() -> None:
    vmim = {
        "kind": "VirtualMachineInstanceMigration",
        "metadata": {"name": "m", "labels": {"kubevirt.io/vmi-name": "x"}},
        "spec": {"vmiName": "testvmi"},
    }
    mutate_migration(vmim, make_ctx(), operation="CREATE")
    assert vmim["metadata"]["labels"] == {"kubevirt.io/vmi-name": "testvmi"}
    assert vmim["metadata"]["finalizers"] == ["kubevirt.io/migrationJobFinalize"]
    mutate_migration(vmim, make_ctx(), operation="CREATE")
    assert vmim["metadata"]["finalizers"] == ["kubevirt.io/migrationJobFinalize"]
    updated = {"metadata": {"name": "m"}, "spec": {"vmiName": "other"}}
    mutate_migration(updated, make_ctx(), operation="UPDATE")
    assert updated == {"metadata": {"name": "m"}, "spec": {"vmiName": "other"}}


# --- every example manifest ----------------------------------------------------------------------------------


def _same(user: Any, result: Any) -> bool:
    if user == result:
        return True
    # Quantities come back canonical ("1024Mi" → "1Gi", 2 → "2"), as Go re-serialises them.
    if isinstance(user, str | int | float) and isinstance(result, str) and not isinstance(user, bool):
        try:
            return Quantity.parse(user) == Quantity.parse(result)
        except QuantityError:
            return False
    return False


def assert_subset(user: Any, result: Any, path: str = "") -> None:
    """Every value the user set is still there (lists item by item, dicts key by key)."""
    if isinstance(user, dict):
        assert isinstance(result, dict), path
        for key, value in user.items():
            if value is None:
                continue
            assert key in result, f"{path}.{key} dropped"
            assert_subset(value, result[key], f"{path}.{key}")
    elif isinstance(user, list):
        assert isinstance(result, list) and len(result) >= len(user), path
        for i, item in enumerate(user):
            assert_subset(item, result[i], f"{path}[{i}]")
    else:
        assert _same(user, result), f"{path}: {user!r} became {result!r}"


def _example_documents() -> list[tuple[str, dict[str, Any]]]:
    docs: list[tuple[str, dict[str, Any]]] = []
    for file in sorted(EXAMPLES.glob("*/*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(file.read_text())):
            if isinstance(doc, dict) and doc.get("kind") in ("VirtualMachine", "VirtualMachineInstance"):
                docs.append((f"{file.parent.name}/{file.name}#{i}", doc))
    return docs


EXAMPLE_DOCS = _example_documents()


@pytest.mark.parametrize(("name", "doc"), EXAMPLE_DOCS, ids=[n for n, _ in EXAMPLE_DOCS])
def test_examples_keep_user_values(name: str, doc: dict[str, Any]) -> None:
    ctx = make_ctx()
    mutated = copy.deepcopy(doc)
    if doc["kind"] == "VirtualMachineInstance":
        mutate_vmi(mutated, ctx, operation="CREATE")
        assert mutated["status"]["phase"] == "Pending"
        assert_subset(doc, mutated)
        return
    mutate_vm(mutated, ctx, operation="CREATE")
    assert_subset(doc, mutated)
    template = mutated["spec"].get("template")
    if not isinstance(template, dict):
        return
    assert template["spec"]["domain"]["machine"]["type"]
    # The template copy the VM validator defaults, and the VMI the controller would create from it.
    spec_copy = copy.deepcopy(template["spec"])
    set_vmi_spec_defaults(spec_copy, ctx)
    assert_subset(template["spec"], spec_copy)
    vmi = {
        "kind": "VirtualMachineInstance",
        "metadata": {**copy.deepcopy(template.get("metadata") or {}), "name": "x"},
        "spec": copy.deepcopy(template["spec"]),
    }
    expected = copy.deepcopy(vmi)
    mutate_vmi(vmi, ctx, operation="CREATE")
    assert_subset(expected, vmi)
    assert vmi["spec"]["domain"]["cpu"]["model"]
