"""Launcher compute resources, mirrored from upstream's hypervisorbackend_test.go, renderresources_test.go and the
resource cases of template_test.go."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any

import pytest

from pykubevirt.api.pod_qos import qos_class
from pykubevirt.api.quantity import MI, Quantity
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.compute_resources import (
    EMULATOR_THREAD_EVEN_PARITY_ANNOTATION,
    KVM_DEVICE,
    PR_HELPER_DEVICE,
    TUN_DEVICE,
    VHOST_NET_DEVICE,
    VHOST_VSOCK_DEVICE,
    launcher_resources,
    memory_overhead,
    multiply_memory,
    support_container_resources,
    vcpus,
)

CONFIG = ClusterConfig()
# Upstream's split of the default case: 7Mi "base" (pagetables 2Mi + iothread 8Mi - 3Mi) + 243Mi "static".
BASE_290 = (7 + 243 + 32 + 8) * MI


def vmi_with(domain: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "testvmi", "namespace": "default", "uid": "1234"},
        "spec": {"domain": domain or {}, **spec},
    }


def one_gi_vmi(**domain: Any) -> dict[str, Any]:
    return vmi_with({"resources": {"requests": {"memory": "1Gi"}, "limits": {}}, **domain})


def mega(value: str) -> int:
    """ScaledValue(Mega) of a quantity string: bytes / 10^6 rounded up."""
    return math.ceil(Quantity.parse(value).value / 10**6)


class TestMemoryOverhead:
    def test_default_is_290mi_for_1gi_and_one_vcpu(self) -> None:
        overhead = memory_overhead(one_gi_vmi(), CONFIG)
        assert overhead.value == BASE_290 == 290 * MI
        assert str(overhead) == "304087040"  # DecimalSI, as upstream's kilo-scaled accumulator

    def test_pagetables_use_the_memory_request_not_the_guest_size(self) -> None:
        guest_only = vmi_with({"memory": {"guest": "4Gi"}, "cpu": {"cores": 2}})
        assert memory_overhead(guest_only, CONFIG).value == (240 + 16 + 8 + 32) * MI
        assert str(memory_overhead(guest_only, CONFIG)) == "296Mi"
        requested = vmi_with({"resources": {"requests": {"memory": "2Gi"}}, "memory": {"guest": "1Gi"}})
        assert memory_overhead(requested, CONFIG).value == (4 + 240 + 8 + 8 + 32) * MI

    def test_pagetables_round_to_kilobytes(self) -> None:
        vmi = vmi_with({"resources": {"requests": {"memory": "1G"}}})
        assert memory_overhead(vmi, CONFIG).value == 1_953_125 + (240 + 8 + 8 + 32) * MI

    def test_cpu_topology(self) -> None:
        vmi = one_gi_vmi(cpu={"cores": 2, "threads": 2, "sockets": 2})
        assert memory_overhead(vmi, CONFIG).value == BASE_290 - 8 * MI + 8 * 8 * MI

    @pytest.mark.parametrize(("requests", "limits", "cores"), [("3", "5", 5), ("3", None, 3)])
    def test_vcpus_from_cpu_resources_when_no_topology(self, requests: str, limits: str | None, cores: int) -> None:
        vmi = one_gi_vmi()
        resources = vmi["spec"]["domain"]["resources"]
        resources["requests"]["cpu"] = requests
        if limits:
            resources["limits"]["cpu"] = limits
        assert memory_overhead(vmi, CONFIG).value == BASE_290 - 8 * MI + cores * 8 * MI

    def test_no_graphics_device(self) -> None:
        vmi = one_gi_vmi(devices={"autoattachGraphicsDevice": False})
        assert memory_overhead(vmi, CONFIG).value == BASE_290 - 32 * MI
        assert memory_overhead(one_gi_vmi(devices={"autoattachGraphicsDevice": True}), CONFIG).value == BASE_290

    def test_arm64_pflash(self) -> None:
        vmi = one_gi_vmi()
        vmi["spec"]["architecture"] = "arm64"
        assert memory_overhead(vmi, CONFIG).value == BASE_290 + 128 * MI
        arm_cluster = replace(CONFIG, architecture="arm64")
        assert memory_overhead(one_gi_vmi(), arm_cluster).value == BASE_290 + 128 * MI

    @pytest.mark.parametrize(
        "devices",
        [
            {"hostDevices": [{"name": "test"}]},
            {"gpus": [{"name": "test"}]},
            {"interfaces": [{"name": "test", "sriov": {}}]},
        ],
        ids=["hostdev", "gpu", "sriov"],
    )
    def test_vfio(self, devices: dict[str, Any]) -> None:
        assert memory_overhead(one_gi_vmi(devices=devices), CONFIG).value == BASE_290 + 1024 * MI

    def test_downward_metrics_volume(self) -> None:
        vmi = one_gi_vmi()
        vmi["spec"]["volumes"] = [{"name": "metrics", "downwardMetrics": {}}]
        assert memory_overhead(vmi, CONFIG).value == BASE_290 + MI

    @pytest.mark.parametrize(
        ("liveness", "readiness", "extra"),
        [(True, False, 110), (False, True, 110), (True, True, 120), (False, False, 0)],
    )
    def test_exec_probes(self, liveness: bool, readiness: bool, extra: int) -> None:
        vmi = one_gi_vmi()
        if liveness:
            vmi["spec"]["livenessProbe"] = {"exec": {}}
        if readiness:
            vmi["spec"]["readinessProbe"] = {"exec": {"command": ["true"]}}
        assert memory_overhead(vmi, CONFIG).value == BASE_290 + extra * MI

    def test_non_exec_probes_add_nothing(self) -> None:
        vmi = one_gi_vmi()
        vmi["spec"]["readinessProbe"] = {"httpGet": {"port": 80}}
        assert memory_overhead(vmi, CONFIG).value == BASE_290

    def test_sev(self) -> None:
        assert memory_overhead(one_gi_vmi(launchSecurity={"sev": {}}), CONFIG).value == BASE_290 + 256 * MI

    def test_tpm(self) -> None:
        assert memory_overhead(one_gi_vmi(devices={"tpm": {}}), CONFIG).value == BASE_290 + 53 * MI
        assert memory_overhead(one_gi_vmi(devices={"tpm": {"enabled": False}}), CONFIG).value == BASE_290

    @pytest.mark.parametrize("dedicated", [True, False])
    def test_dedicated_cpu_or_guaranteed_qos(self, dedicated: bool) -> None:
        vmi = one_gi_vmi(cpu={"cores": 1, "dedicatedCpuPlacement": dedicated})
        if not dedicated:
            vmi["spec"]["domain"]["resources"] = {
                "requests": {"memory": "1Gi", "cpu": "4"},
                "limits": {"memory": "1Gi", "cpu": "4"},
            }
        assert memory_overhead(vmi, CONFIG).value == BASE_290 + 100 * MI

    @pytest.mark.parametrize("added", ["100G", "0"])
    def test_reserved_overhead(self, added: str) -> None:
        vmi = one_gi_vmi(memory={"reservedOverhead": {"addedOverhead": added}})
        assert memory_overhead(vmi, CONFIG).value == BASE_290 + Quantity.parse(added).value

    @pytest.mark.parametrize(("ratio", "parses"), [("3.2", True), ("no_float", False)])
    def test_additional_overhead_ratio(self, ratio: str, parses: bool) -> None:
        overhead = memory_overhead(one_gi_vmi(), CONFIG, additional_ratio=ratio)
        # MultiplyMemory adds int64(kB × (ratio - 1)) kilobytes.
        expected = BASE_290 + int(math.ceil(BASE_290 / 1000) * (3.2 - 1.0)) * 1000 if parses else BASE_290
        assert overhead.value == expected

    @pytest.mark.parametrize("ratio", ["2.332", "1.234", "1.0"])
    def test_guest_to_request_headroom_does_not_change_the_vmi(self, ratio: str) -> None:
        vmi = vmi_with({"resources": {"requests": {"memory": "1G", "cpu": "1"}}})
        original = copy.deepcopy(vmi)
        plain = memory_overhead(vmi, CONFIG)
        assert memory_overhead(vmi, CONFIG, additional_ratio=ratio) == multiply_memory(plain, float(ratio))
        assert vmi == original


class TestVCPUs:
    @pytest.mark.parametrize(
        ("domain", "expected"),
        [
            ({"cpu": {"cores": 2, "sockets": 2, "threads": 2}}, 8),
            ({"cpu": {"cores": 3}}, 3),
            ({"cpu": {"sockets": 3}}, 3),
            ({"cpu": {"sockets": 2, "threads": 2}}, 4),
            ({"cpu": {}}, 1),
            ({"resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "3"}}}, 1),
            ({"resources": {"requests": {"cpu": "3"}}}, 3),
            ({"resources": {"requests": {"cpu": "2500m"}}}, 3),
            ({}, 1),
        ],
    )
    def test_vcpus(self, domain: dict[str, Any], expected: int) -> None:
        assert vcpus(vmi_with(domain)) == expected


class TestLauncherResources:
    def test_one_gi_one_vcpu(self) -> None:
        assert launcher_resources(one_gi_vmi(), CONFIG) == {
            "requests": {"cpu": "100m", "ephemeral-storage": "50M", "memory": "1314Mi"},
            "limits": {TUN_DEVICE: "1"},
        }

    def test_devices_without_emulation(self) -> None:
        vmi = one_gi_vmi(devices={"interfaces": [{"name": "default", "masquerade": {}}]})
        assert launcher_resources(vmi, CONFIG, use_emulation=False)["limits"] == {
            KVM_DEVICE: "1",
            TUN_DEVICE: "1",
            VHOST_NET_DEVICE: "1",
        }
        # Emulation drops both /dev/kvm and /dev/vhost-net (QEMU's userland NIC instead).
        assert launcher_resources(vmi, CONFIG, use_emulation=True)["limits"] == {TUN_DEVICE: "1"}
        e1000 = one_gi_vmi(devices={"interfaces": [{"name": "default", "model": "e1000", "masquerade": {}}]})
        assert VHOST_NET_DEVICE not in launcher_resources(e1000, CONFIG, use_emulation=False)["limits"]

    @pytest.mark.parametrize(
        ("devices", "tun"),
        [({}, True), ({"autoattachPodInterface": True}, True), ({"autoattachPodInterface": False}, False)],
    )
    def test_tun_device(self, devices: dict[str, Any], tun: bool) -> None:
        rendered = launcher_resources(one_gi_vmi(devices=devices), CONFIG)
        assert (TUN_DEVICE in rendered.get("limits", {})) is tun

    def test_vsock(self) -> None:
        rendered = launcher_resources(one_gi_vmi(devices={"autoattachVSOCK": True}), CONFIG)
        assert rendered["limits"][VHOST_VSOCK_DEVICE] == "1"

    @pytest.mark.parametrize(
        ("arch", "memory_request", "limit"),
        [("amd64", "1303943013", "2303943013"), ("arm64", "1438160741", "2438160741")],
    )
    def test_cpu_and_memory_constraints(self, arch: str, memory_request: str, limit: str) -> None:
        vmi = vmi_with(
            {"resources": {"requests": {"cpu": "1m", "memory": "1G"}, "limits": {"cpu": "2m", "memory": "2G"}}},
            architecture=arch,
        )
        rendered = launcher_resources(vmi, CONFIG)
        assert rendered["requests"]["cpu"] == "1m"
        assert rendered["limits"]["cpu"] == "2m"
        assert rendered["requests"]["memory"] == memory_request
        assert rendered["limits"]["memory"] == limit

    @pytest.mark.parametrize(("arch", "limit"), [("amd64", "2303943013"), ("arm64", "2438160741")])
    def test_overcommit_guest_overhead_only_raises_the_limit(self, arch: str, limit: str) -> None:
        resources = {"overcommitGuestOverhead": True, "requests": {"memory": "1G"}, "limits": {"memory": "2G"}}
        rendered = launcher_resources(vmi_with({"resources": resources}, architecture=arch), CONFIG)
        assert rendered["requests"]["memory"] == "1G"
        assert rendered["limits"]["memory"] == limit

    @pytest.mark.parametrize(
        ("arch", "graphics", "megabytes"),
        [
            ("amd64", None, 383),
            ("amd64", True, 383),
            ("amd64", False, 350),
            ("arm64", None, 518),
            ("arm64", True, 518),
            ("arm64", False, 484),
        ],
    )
    def test_unset_resources_and_graphics(self, arch: str, graphics: bool | None, megabytes: int) -> None:
        domain: dict[str, Any] = {"cpu": {"cores": 3}, "resources": {"requests": {"cpu": "1m", "memory": "64M"}}}
        if graphics is not None:
            domain["devices"] = {"autoattachGraphicsDevice": graphics}
        rendered = launcher_resources(vmi_with(domain, architecture=arch), CONFIG)
        assert rendered["requests"]["cpu"] == "1m"
        assert mega(rendered["requests"]["memory"]) == megabytes
        assert "memory" not in rendered["limits"] and "cpu" not in rendered["limits"]

    def test_sockets_and_cores_cost_the_same(self) -> None:
        resources = {"requests": {"cpu": "1m", "memory": "64M"}}
        cores = launcher_resources(vmi_with({"cpu": {"cores": 3}, "resources": resources}), CONFIG)
        sockets = launcher_resources(vmi_with({"cpu": {"sockets": 3}, "resources": resources}), CONFIG)
        assert cores["requests"]["memory"] == sockets["requests"]["memory"]

    @pytest.mark.parametrize(
        ("ratio", "cores", "cpu_request", "expected"),
        [(10, 3, None, "300m"), (1, 3, None, "3"), (16, 5, "150m", "150m"), (10, 5, None, "500m"), (3, 1, None, None)],
    )
    def test_cpu_request_from_allocation_ratio(
        self, ratio: int, cores: int, cpu_request: str | None, expected: str | None
    ) -> None:
        domain: dict[str, Any] = {"cpu": {"cores": cores}, "memory": {"guest": "64Mi"}}
        if cpu_request:
            domain["resources"] = {"requests": {"cpu": cpu_request}}
        rendered = launcher_resources(vmi_with(domain), replace(CONFIG, cpu_allocation_ratio=ratio))
        if expected is None:  # 1/3 of a CPU: fmt's %g digits, then rounded up to nanocores like ParseQuantity
            assert rendered["requests"]["cpu"] == "333333334n"
        else:
            assert rendered["requests"]["cpu"] == expected

    def test_cpu_limits_when_the_namespace_requires_them(self) -> None:
        vmi = vmi_with({"cpu": {"cores": 5}, "memory": {"guest": "64Mi"}})
        rendered = launcher_resources(vmi, CONFIG, auto_cpu_limits=True)
        assert rendered["requests"]["cpu"] == "500m"
        assert rendered["limits"]["cpu"] == "5"

    def test_auto_memory_limits(self) -> None:
        vmi = vmi_with({"resources": {"requests": {"memory": "64M"}}})
        rendered = launcher_resources(vmi, CONFIG, auto_memory_limits_ratio=2.0)
        request = Quantity.parse(rendered["requests"]["memory"])
        assert Quantity.parse(rendered["limits"]["memory"]).value == request.ceil_int() * 2
        limited = vmi_with({"resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}}})
        rendered = launcher_resources(limited, CONFIG, auto_memory_limits_ratio=3.2)
        assert rendered["limits"]["memory"] == rendered["requests"]["memory"]

    @pytest.mark.parametrize(
        ("setters", "overcommitted"),
        [
            ((), False),
            (("requests",), False),
            (("limits",), False),
            (("guest",), True),
            (("hugepages",), True),
            (("requests", "limits"), False),
            (("requests", "guest"), False),
            (("requests", "hugepages"), False),
            (("limits", "guest"), False),
            (("limits", "hugepages"), False),
            (("guest", "hugepages"), True),
            (("requests", "limits", "guest"), False),
            (("requests", "limits", "hugepages"), False),
            (("requests", "guest", "hugepages"), False),
            (("limits", "guest", "hugepages"), False),
            (("requests", "limits", "guest", "hugepages"), False),
        ],
    )
    def test_memory_overcommit(self, setters: tuple[str, ...], overcommitted: bool) -> None:
        domain: dict[str, Any] = {"resources": {}}
        memory: dict[str, Any] = {}
        if "requests" in setters:
            domain["resources"]["requests"] = {"memory": "1Gi"}
        if "limits" in setters:
            domain["resources"]["limits"] = {"memory": "1Gi"}
        if "guest" in setters:
            memory["guest"] = "1Gi"
        if "hugepages" in setters:
            memory["hugepages"] = {"pageSize": "1Gi"}
        if memory:
            domain["memory"] = memory
        vmi = vmi_with(domain)
        mem100 = Quantity.parse(launcher_resources(vmi, CONFIG).get("requests", {}).get("memory", "0"))
        config110 = replace(CONFIG, memory_overcommit=110)
        mem110 = Quantity.parse(launcher_resources(vmi, config110).get("requests", {}).get("memory", "0"))
        if overcommitted:
            overhead = memory_overhead(vmi, CONFIG)
            if "hugepages" in setters:  # the regular-memory request is the overhead; the pages shrink instead
                pages100 = launcher_resources(vmi, CONFIG)["requests"]["hugepages-1Gi"]
                pages110 = launcher_resources(vmi, config110)["requests"]["hugepages-1Gi"]
                assert Quantity.parse(pages100).ceil_int() * 100 // 110 == Quantity.parse(pages110).ceil_int()
                assert mem100 == mem110 == overhead
            else:
                assert (mem100 - overhead).ceil_int() * 100 // 110 == (mem110 - overhead).ceil_int()
        else:
            assert mem100 == mem110

    @pytest.mark.parametrize(
        ("arch", "page_size", "megabytes"),
        [("amd64", "2Mi", 303), ("amd64", "1Gi", 303), ("arm64", "2Mi", 437), ("arm64", "1Gi", 437)],
    )
    def test_hugepages(self, arch: str, page_size: str, megabytes: int) -> None:
        domain = {
            "memory": {"hugepages": {"pageSize": page_size}},
            "resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}},
        }
        rendered = launcher_resources(vmi_with(domain, architecture=arch), CONFIG)
        assert mega(rendered["requests"]["memory"]) == megabytes
        assert mega(rendered["limits"]["memory"]) == megabytes
        assert rendered["requests"][f"hugepages-{page_size}"] == "64M"
        assert rendered["limits"][f"hugepages-{page_size}"] == "64M"

    @pytest.mark.parametrize(("arch", "megabytes"), [("amd64", 303), ("arm64", 437)])
    def test_hugepages_account_for_request_beyond_guest(self, arch: str, megabytes: int) -> None:
        domain = {
            "memory": {"hugepages": {"pageSize": "1Gi"}, "guest": "64M"},
            "resources": {"requests": {"memory": "70M"}, "limits": {"memory": "70M"}},
        }
        rendered = launcher_resources(vmi_with(domain, architecture=arch), CONFIG)
        assert mega(rendered["requests"]["memory"]) == megabytes + 6
        assert mega(rendered["limits"]["memory"]) == megabytes + 6
        assert rendered["requests"]["hugepages-1Gi"] == rendered["limits"]["hugepages-1Gi"] == "64M"

    def test_dedicated_cpu_requests_equal_limits(self) -> None:
        vmi = vmi_with({"cpu": {"cores": 2, "dedicatedCpuPlacement": True}, "memory": {"guest": "1Gi"}})
        rendered = launcher_resources(vmi, CONFIG)
        assert rendered["requests"]["cpu"] == rendered["limits"]["cpu"] == "2"
        assert rendered["requests"]["memory"] == rendered["limits"]["memory"]
        # 100Mi extra for dedicated CPUs; no pagetables because the VMI sets no memory request.
        assert Quantity.parse(rendered["requests"]["memory"]).value == 1024 * MI + (240 + 16 + 8 + 32 + 100) * MI
        pod = {"containers": [{"resources": rendered}]}
        assert qos_class(pod) == "Guaranteed"

    @pytest.mark.parametrize(
        ("annotations", "cores", "expected"),
        [
            ({}, 3, "4"),
            ({}, 2, "3"),
            ({EMULATOR_THREAD_EVEN_PARITY_ANNOTATION: ""}, 3, "4"),
            ({EMULATOR_THREAD_EVEN_PARITY_ANNOTATION: ""}, 4, "6"),
        ],
    )
    def test_isolated_emulator_thread(self, annotations: dict[str, str], cores: int, expected: str) -> None:
        cpu = {"cores": cores, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True}
        vmi = vmi_with({"cpu": cpu, "resources": {"requests": {"memory": "1Gi"}}})
        vmi["metadata"]["annotations"] = annotations
        rendered = launcher_resources(vmi, CONFIG)
        assert rendered["requests"]["cpu"] == rendered["limits"]["cpu"] == expected

    @pytest.mark.parametrize(
        ("cores", "iothreads", "user_cpu", "parity", "expected"),
        [
            (5, 2, None, False, "8"),
            (5, 2, None, True, "8"),
            (6, 2, None, True, "10"),
            (0, 0, "3", False, "4"),
            (0, 2, "5", True, "8"),
        ],
    )
    def test_emulator_thread_with_iothreads(
        self, cores: int, iothreads: int, user_cpu: str | None, parity: bool, expected: str
    ) -> None:
        cpu = {"cores": cores, "dedicatedCpuPlacement": True, "isolateEmulatorThread": True}
        domain: dict[str, Any] = {
            "cpu": cpu,
            "ioThreadsPolicy": "supplementalPool",
            "ioThreads": {"supplementalPoolThreadCount": iothreads},
            "resources": {"requests": {"memory": "1Gi"}},
        }
        if user_cpu:
            domain["resources"] = {"requests": {"memory": "1Gi", "cpu": user_cpu}, "limits": {"cpu": user_cpu}}
        vmi = vmi_with(domain)
        if parity:
            vmi["metadata"]["annotations"] = {EMULATOR_THREAD_EVEN_PARITY_ANNOTATION: ""}
        rendered = launcher_resources(vmi, CONFIG)
        assert rendered["requests"]["cpu"] == rendered["limits"]["cpu"] == expected

    @pytest.mark.parametrize("with_limit", [False, True])
    def test_ephemeral_storage(self, with_limit: bool) -> None:
        resources: dict[str, Any] = {"requests": {"ephemeral-storage": "30M", "memory": "1Gi"}}
        if with_limit:
            resources["limits"] = {"ephemeral-storage": "70M"}
        rendered = launcher_resources(vmi_with({"resources": resources}), CONFIG)
        assert rendered["requests"]["ephemeral-storage"] == "80M"
        if with_limit:
            assert rendered["limits"]["ephemeral-storage"] == "120M"
        else:
            assert "ephemeral-storage" not in rendered["limits"]

    def test_device_plugin_gpus_host_devices_and_pr_helper(self) -> None:
        devices = {
            "gpus": [
                {"name": "gpu1", "deviceName": "nvidia.com/gpu"},
                {"name": "gpu2", "deviceName": "nvidia.com/gpu"},
            ],
            "hostDevices": [
                {"name": "hd1", "deviceName": "discombobulator2000"},
                {"name": "dra", "claimRequest": {"claimName": "c", "requestName": "r"}},
            ],
            "disks": [{"name": "lun", "lun": {"reservation": True}}],
        }
        rendered = launcher_resources(one_gi_vmi(devices=devices), CONFIG)
        for section in ("requests", "limits"):
            assert rendered[section]["nvidia.com/gpu"] == "2"
            assert rendered[section]["discombobulator2000"] == "1"
            assert rendered[section][PR_HELPER_DEVICE] == "1"


def test_support_container_resources() -> None:
    assert support_container_resources(False, container_disk=True) == {
        "requests": {"cpu": "1m", "ephemeral-storage": "50M", "memory": "1M"},
        "limits": {"cpu": "10m", "memory": "40M"},
    }
    assert support_container_resources(True, container_disk=True)["requests"] == {
        "cpu": "10m",
        "ephemeral-storage": "50M",
        "memory": "40M",
    }
    assert support_container_resources(False, container_disk=False) == {
        "requests": {"cpu": "10m", "memory": "1M"},
        "limits": {"cpu": "100m", "memory": "40M"},
    }
    guaranteed = support_container_resources(True, container_disk=False)
    assert guaranteed["requests"] == guaranteed["limits"] == {"cpu": "10m", "memory": "40M"}


class TestQOSClass:
    @staticmethod
    def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if requests is not None:
            resources["requests"] = requests
        if limits is not None:
            resources["limits"] = limits
        return {"name": "c", "resources": resources}

    def test_best_effort(self) -> None:
        assert qos_class({"containers": [self.container(), self.container({"ephemeral-storage": "50M"})]}) == (
            "BestEffort"
        )

    def test_burstable(self) -> None:
        assert qos_class({"containers": [self.container({"memory": "1Gi"})]}) == "Burstable"
        full = self.container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})
        assert qos_class({"containers": [full, self.container()]}) == "Burstable"
        assert qos_class({"containers": [full], "initContainers": [self.container({"cpu": "10m"})]}) == "Burstable"
        unequal = self.container({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})
        assert qos_class({"containers": [unequal]}) == "Burstable"

    def test_guaranteed(self) -> None:
        full = self.container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi", KVM_DEVICE: "1"})
        init = self.container({"cpu": "10m", "memory": "40M"}, {"cpu": "10m", "memory": "40M"})
        assert qos_class({"containers": [full], "initContainers": [init]}) == "Guaranteed"
        # Requests default to limits, as the API server does before QoS is computed.
        assert qos_class({"containers": [self.container(None, {"cpu": "1", "memory": "1Gi"})]}) == "Guaranteed"

    def test_amounts_equal_as_values_but_not_as_amounts_get_their_own_class(self) -> None:
        # Classes are remembered by the amounts asked for: a limit of `true` is no amount, though it equals 1.
        one = {"containers": [{"resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}
        boolean = {"containers": [{"resources": {"limits": {"cpu": True, "memory": "1Gi"}}}]}
        assert qos_class(one) == "Guaranteed"
        assert qos_class(boolean) == "Burstable"
        assert qos_class(one) == "Guaranteed"
        # An amount that cannot be a key still gets a class.
        assert qos_class({"containers": [{"resources": {"limits": {"cpu": {}, "memory": "1Gi"}}}]}) == "Burstable"
