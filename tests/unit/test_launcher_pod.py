"""The virt-launcher pod, mirrored from upstream's template_test.go, rendervolumes_test.go and
nodeselectorrenderer_test.go, plus the seed VMIs after admission defaulting."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
import yaml

from pykubevirt import __version__
from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.api.pod_qos import qos_class
from pykubevirt.config.cluster_config import ClusterConfig
from pykubevirt.controller.launcher_pod import (
    LauncherSettings,
    is_launcher_pod,
    launcher_pod_selector,
    render_launcher_pod,
    vmi_id,
)
from pykubevirt.controller.launcher_volumes import LaunchManifestError, PVCNotFoundError
from tests import paths

SETTINGS = LauncherSettings(random=lambda n: 7)
BASE_VOLUMES = ["private", "public", "sockets", "virt-bin-share-dir", "libvirt-runtime", "ephemeral-disks"]
BASE_VOLUMES += ["container-disks"]


def new_vmi(name: str = "testvmi", namespace: str = "testns", **spec: Any) -> dict[str, Any]:
    spec.setdefault("domain", {"devices": {"disableHotplug": True}})
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace, "uid": "1234"},
        "spec": spec,
    }


def render(vmi: dict[str, Any], settings: LauncherSettings = SETTINGS, **kwargs: Any) -> dict[str, Any]:
    original = copy.deepcopy(vmi)
    pod = render_launcher_pod(vmi, settings, **kwargs)
    assert vmi == original, "rendering must not change the VMI"
    return pod


def compute(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    assert container["name"] == "compute"
    return container


def volume_names(pod: dict[str, Any]) -> list[str]:
    return [volume["name"] for volume in pod["spec"]["volumes"]]


def mounts(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {mount["mountPath"]: mount for mount in compute(pod)["volumeMounts"]}


class TestMetadata:
    def test_renders_upstreams_launch_manifest(self) -> None:
        vmi = new_vmi(architecture="amd64")
        vmi["metadata"]["annotations"] = {"test": "shouldBeInPod"}
        pod = render(vmi)
        meta = pod["metadata"]
        assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
        assert meta["generateName"] == "virt-launcher-testvmi-"
        assert meta["namespace"] == "testns"
        assert meta["labels"] == {
            "kubevirt.io": "virt-launcher",
            "kubevirt.io/created-by": "1234",
            "vm.kubevirt.io/name": "testvmi",
            "vmi.kubevirt.io/id": "testvmi",
        }
        annotations = meta["annotations"]
        assert annotations["kubevirt.io/domain"] == "testvmi"
        assert annotations["test"] == "shouldBeInPod"
        assert annotations["kubevirt.io/migrationTransportUnix"] == "true"
        assert annotations["kubectl.kubernetes.io/default-container"] == "compute"
        assert annotations["descheduler.alpha.kubernetes.io/request-evict-only"] == ""
        assert annotations["kubevirt.io/memory-overhead-bytes"] == str((240 + 8 + 8 + 32) * 1024 * 1024)
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": "testvmi",
                "uid": "1234",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        spec = pod["spec"]
        assert spec["nodeSelector"] == {"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64"}
        assert spec["terminationGracePeriodSeconds"] == 60
        assert spec["restartPolicy"] == "Never"
        assert spec["readinessGates"] == [{"conditionType": "kubevirt.io/virtual-machine-unpaused"}]
        assert spec["enableServiceLinks"] is False
        assert spec["automountServiceAccountToken"] is False
        assert spec["hostname"] == "testvmi"
        assert "subdomain" not in spec
        assert [c["name"] for c in spec["initContainers"]] == ["guest-console-log"]
        assert [c["name"] for c in spec["containers"]] == ["compute"]

    def test_compute_container_command(self) -> None:
        pod = render(new_vmi())
        container = compute(pod)
        assert container["image"] == f"pykubevirt/virt-launcher:{__version__}"
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert container["command"] == ["pykubevirt", "virt-launcher"]
        assert container["args"] == [
            *("--qemu-timeout", "247s", "--name", "testvmi", "--uid", "1234", "--namespace", "testns"),
            *("--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks"),
            *("--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45"),
            *("--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000"),
            *("--hypervisor", "kvm", "--allow-emulation"),
        ]
        assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"

    def test_arm64_ovmf_path_and_custom_command(self) -> None:
        settings = replace(SETTINGS, command_prefix=("/usr/bin/virt-launcher-monitor",), image="kubevirt/virt-launcher")
        pod = render(new_vmi(architecture="arm64"), settings)
        container = compute(pod)
        assert container["command"] == ["/usr/bin/virt-launcher-monitor"]
        assert container["image"] == "kubevirt/virt-launcher"
        assert container["args"][container["args"].index("--ovmf-path") + 1] == "/usr/share/AAVMF"
        assert pod["spec"]["nodeSelector"]["kubernetes.io/arch"] == "arm64"

    def test_qemu_timeout_jitter(self) -> None:
        asked: list[int] = []

        def jitter(n: int) -> int:
            asked.append(n)
            return 119

        pod = render(new_vmi(), replace(SETTINGS, random=jitter, qemu_timeout_seconds=100))
        assert asked == [120]
        assert compute(pod)["args"][1] == "219s"
        for _ in range(20):
            timeout = compute(render(new_vmi(), LauncherSettings()))["args"][1]
            assert 240 <= int(timeout.removesuffix("s")) <= 359

    @pytest.mark.parametrize(
        ("grace", "pod_grace", "launcher_grace"), [(None, 60, "45"), (0, 30, "15"), (180, 210, "195")]
    )
    def test_grace_periods(self, grace: int | None, pod_grace: int, launcher_grace: str) -> None:
        vmi = new_vmi()
        if grace is not None:
            vmi["spec"]["terminationGracePeriodSeconds"] = grace
        pod = render(vmi)
        args = compute(pod)["args"]
        assert pod["spec"]["terminationGracePeriodSeconds"] == pod_grace
        assert args[args.index("--grace-period-seconds") + 1] == launcher_grace

    def test_filtered_annotations(self) -> None:
        vmi = new_vmi()
        vmi["metadata"]["annotations"] = {
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "kubevirt.io/latest-observed-api-version": "source",
            "kubevirt.io/storage-observed-api-version": ".com",
            "kubevirt.io/ignitiondata": "data",
        }
        annotations = render(vmi)["metadata"]["annotations"]
        assert "kubectl.kubernetes.io/last-applied-configuration" not in annotations
        assert "kubevirt.io/latest-observed-api-version" not in annotations
        assert "kubevirt.io/storage-observed-api-version" not in annotations
        assert annotations["kubevirt.io/ignitiondata"] == "data"

    def test_vmi_labels_are_copied(self) -> None:
        vmi = new_vmi(namespace="default")
        vmi["metadata"]["labels"] = {"key1": "val1", "key2": "val2"}
        assert render(vmi)["metadata"]["labels"] == {
            "key1": "val1",
            "key2": "val2",
            "kubevirt.io": "virt-launcher",
            "kubevirt.io/created-by": "1234",
            "vm.kubevirt.io/name": "testvmi",
            "vmi.kubevirt.io/id": "testvmi",
        }

    def test_long_names_get_a_stable_hashed_id(self) -> None:
        name = "a-very-very-long-virtual-machine-instance-name-used-for-testing-this-logic"
        expected = "a-very-very-long-virtual-machine-instance-name-used-fo-88ed080c"
        assert vmi_id(name) == expected
        assert vmi_id("x" * 63) == "x" * 63
        labels = render(new_vmi(name=name))["metadata"]["labels"]
        assert labels["vmi.kubevirt.io/id"] == expected
        assert labels["vm.kubevirt.io/name"] == name[:63]

    def test_hostname_and_subdomain(self) -> None:
        vmi = new_vmi(name="testvm", hostname="myhost", subdomain="mydomain")
        pod = render(vmi)
        assert pod["spec"]["hostname"] == "myhost"
        assert pod["spec"]["subdomain"] == "mydomain"
        assert pod["metadata"]["labels"]["vm.kubevirt.io/name"] == "myhost"
        assert render(new_vmi(name="web.example"))["spec"]["hostname"] == "web"

    def test_launcher_pod_helpers(self) -> None:
        pod = render(new_vmi())
        assert is_launcher_pod(pod)
        assert not is_launcher_pod({"metadata": {"labels": {"kubevirt.io": "virt-handler"}}})
        assert launcher_pod_selector(new_vmi()) == "kubevirt.io=virt-launcher,kubevirt.io/created-by=1234"


class TestScheduling:
    def test_node_selectors_merge_settings_and_vmi(self) -> None:
        vmi = new_vmi(architecture="amd64", nodeSelector={"kubernetes.io/hostname": "master"})
        settings = replace(SETTINGS, node_selectors=(("disk", "ssd"), ("kubernetes.io/hostname", "other")))
        assert render(vmi, settings)["spec"]["nodeSelector"] == {
            "kubevirt.io/schedulable": "true",
            "kubernetes.io/arch": "amd64",
            "disk": "ssd",
            "kubernetes.io/hostname": "master",
        }

    def test_dedicated_cpu_needs_the_cpu_manager(self) -> None:
        domain = {"cpu": {"cores": 2, "dedicatedCpuPlacement": True}, "memory": {"guest": "1Gi"}}
        pod = render(new_vmi(domain=domain))
        assert pod["spec"]["nodeSelector"]["kubevirt.io/cpumanager"] == "true"
        assert qos_class(pod["spec"]) == "Guaranteed"

    def test_node_labeller_labels(self) -> None:
        cpu = {
            "model": "Conroe",
            "features": [
                {"name": "lahf_lm", "policy": "require"},
                {"name": "mmx"},
                {"name": "vmx", "policy": "forbid"},
            ],
            "realtime": {},
        }
        vmi = new_vmi(domain={"cpu": cpu, "machine": {"type": "q35"}})
        assert set(render(vmi)["spec"]["nodeSelector"]) == {"kubevirt.io/schedulable"}
        selector = render(vmi, replace(SETTINGS, node_labeller=True))["spec"]["nodeSelector"]
        assert selector == {
            "kubevirt.io/schedulable": "true",
            "cpu-model.node.kubevirt.io/Conroe": "true",
            "machine-type.node.kubevirt.io/q35": "true",
            "cpu-feature.node.kubevirt.io/lahf_lm": "true",
            "cpu-feature.node.kubevirt.io/mmx": "true",
            "kubevirt.io/realtime": "true",
        }
        vmi["status"] = {"machine": {"type": "pc-q35-rhel9.6.0"}}
        selector = render(vmi, replace(SETTINGS, node_labeller=True))["spec"]["nodeSelector"]
        assert "machine-type.node.kubevirt.io/pc-q35-rhel9.6.0" in selector
        for model in ("host-model", "host-passthrough"):
            passthrough = new_vmi(domain={"cpu": {"model": model}})
            labels = render(passthrough, replace(SETTINGS, node_labeller=True))["spec"]["nodeSelector"]
            assert not any(key.startswith("cpu-model.") for key in labels)

    @pytest.mark.parametrize("cpu", [{"model": "host-model"}, {"model": ""}, None])
    def test_host_model_avoids_obsolete_host_model_nodes(self, cpu: dict[str, Any] | None) -> None:
        vmi = new_vmi(domain={"cpu": cpu} if cpu is not None else {})
        terms = render(vmi)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms == {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}
                    ]
                }
            ]
        }

    def test_named_model_adds_no_affinity(self) -> None:
        assert "affinity" not in render(new_vmi(domain={"cpu": {"model": "Conroe"}}))["spec"]

    def test_vmi_affinity_is_kept_and_every_term_gets_the_requirements(self) -> None:
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
        affinity = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term, term]}},
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        }
        cpu = {"model": "Conroe", "features": [{"name": "vmx", "policy": "forbid"}]}
        pod = render(new_vmi(domain={"cpu": cpu}, affinity=affinity))
        rendered = pod["spec"]["affinity"]
        assert rendered["podAffinity"] == affinity["podAffinity"]
        for rendered_term in rendered["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]:
            assert rendered_term["matchExpressions"] == [
                *term["matchExpressions"],
                {"key": "cpu-feature.node.kubevirt.io/vmx", "operator": "DoesNotExist"},
            ]

    def test_scheduling_and_dns_fields_are_copied(self) -> None:
        fields: dict[str, Any] = {
            "tolerations": [{"key": "test", "operator": "Equal", "value": "x", "effect": "NoSchedule"}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            "schedulerName": "my-scheduler",
            "priorityClassName": "high",
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": ["1.1.1.1"]},
        }
        spec = render(new_vmi(**fields))["spec"]
        for key, value in fields.items():
            assert spec[key] == value


class TestComputeContainer:
    def test_non_root_security(self) -> None:
        vmi = new_vmi()
        vmi["status"] = {"runtimeUser": 107}
        pod = render(vmi)
        assert pod["spec"]["securityContext"] == {
            "fsGroup": 107,
            "runAsUser": 107,
            "runAsGroup": 107,
            "runAsNonRoot": True,
        }
        assert compute(pod)["securityContext"] == {
            "runAsUser": 107,
            "runAsGroup": 107,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
        }
        assert [e["name"] for e in compute(pod)["env"]] == [
            "XDG_CACHE_HOME",
            "XDG_CONFIG_HOME",
            "XDG_RUNTIME_DIR",
            "POD_NAME",
            "POD_UID",
        ]
        assert "--run-as-nonroot" in compute(pod)["args"]

    def test_root_security(self) -> None:
        pod = render(new_vmi())
        assert pod["spec"]["securityContext"] == {"fsGroup": 107, "runAsUser": 0}
        assert compute(pod)["securityContext"] == {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_NICE"]},
        }
        assert "--run-as-nonroot" not in compute(pod)["args"]
        nonroot_annotation = new_vmi()
        nonroot_annotation["metadata"]["annotations"] = {"kubevirt.io/nonroot": ""}
        assert render(nonroot_annotation)["spec"]["securityContext"]["runAsUser"] == 107

    def test_resources_and_emulation(self) -> None:
        domain = {"resources": {"requests": {"memory": "1Gi"}}, "devices": {"disableHotplug": True}}
        container = compute(render(new_vmi(domain=domain)))
        assert container["resources"] == {
            "requests": {"cpu": "100m", "ephemeral-storage": "50M", "memory": "1314Mi"},
            "limits": {"devices.kubevirt.io/tun": "1"},
        }
        kvm = compute(render(new_vmi(domain=domain), replace(SETTINGS, use_emulation=False)))
        assert kvm["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"
        assert "--allow-emulation" not in kvm["args"]
        assert "--libvirt-uri" not in kvm["args"]
        on_test_driver = compute(render(new_vmi(domain=domain), replace(SETTINGS, libvirt_uri="test:///default")))
        assert on_test_driver["args"][-2:] == ["--libvirt-uri", "test:///default"]

    def test_probes_move_to_compute(self) -> None:
        readiness = {
            "initialDelaySeconds": 2,
            "timeoutSeconds": 3,
            "periodSeconds": 4,
            "successThreshold": 5,
            "failureThreshold": 6,
            "tcpSocket": {"port": 80, "host": "123"},
            "httpGet": {"path": "test"},
        }
        liveness = {"initialDelaySeconds": 12, "tcpSocket": {"port": 82}}
        container = compute(render(new_vmi(readinessProbe=readiness, livenessProbe=liveness)))
        assert container["readinessProbe"] == {**readiness, "initialDelaySeconds": 12}
        assert container["livenessProbe"] == {
            "initialDelaySeconds": 22,
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
            "tcpSocket": {"port": 82},
        }
        assert "readinessProbe" not in compute(render(new_vmi(livenessProbe=liveness)))

    def test_exec_and_guest_agent_probes_run_through_virt_probe(self) -> None:
        readiness = {"exec": {"command": ["cat", "/tmp/healthy"]}, "timeoutSeconds": 5}
        liveness: dict[str, Any] = {"guestAgentPing": {}}
        container = compute(render(new_vmi(readinessProbe=readiness, livenessProbe=liveness)))
        assert container["readinessProbe"]["exec"]["command"] == [
            *("virt-probe", "--domainName", "testns_testvmi", "--timeoutSeconds", "5"),
            *("--command", "cat", "--", "/tmp/healthy"),
        ]
        assert container["readinessProbe"]["timeoutSeconds"] == 6
        assert container["livenessProbe"]["exec"]["command"] == [
            *("virt-probe", "--domainName", "testns_testvmi", "--timeoutSeconds", "1", "--guestAgentPing"),
        ]
        assert container["livenessProbe"]["timeoutSeconds"] == 2

    def test_ports(self) -> None:
        assert "ports" not in compute(render(new_vmi()))
        interfaces = [
            {
                "name": "default",
                "masquerade": {},
                "ports": [{"name": "http", "port": 80}, {"port": 53, "protocol": "UDP"}],
            },
            {"name": "other", "masquerade": {}, "ports": [{"port": 443}]},
        ]
        container = compute(render(new_vmi(domain={"devices": {"interfaces": interfaces}})))
        assert container["ports"] == [
            {"name": "http", "containerPort": 80, "protocol": "TCP"},
            {"containerPort": 53, "protocol": "UDP"},
            {"containerPort": 443, "protocol": "TCP"},
        ]

    def test_launcher_flags_from_annotations_and_labels(self) -> None:
        vmi = new_vmi()
        vmi["metadata"]["annotations"] = {
            "kubevirt.io/keep-launcher-alive-after-failure": "true",
            "kubevirt.io/libvirt-log-filters": "3:remote 4:event",
        }
        vmi["metadata"]["labels"] = {"logVerbosity": "6"}
        container = compute(render(vmi))
        args = container["args"]
        assert args[args.index("--libvirt-log-filters") + 1] == "3:remote 4:event"
        assert args[-2:] == ["--allow-emulation", "--keep-after-failure"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["VIRT_LAUNCHER_LOG_VERBOSITY"] == "6"
        assert env["LIBVIRT_DEBUG_LOGS"] == "1"
        vmi["metadata"]["labels"] = {"logVerbosity": "loud"}
        with pytest.raises(LaunchManifestError, match="verbosity loud cannot cast to int"):
            render_launcher_pod(vmi, SETTINGS)

    @pytest.mark.parametrize(("value", "debug"), [("true", True), ("TRuE", True), ("false", False)])
    def test_debug_logs_label(self, value: str, debug: bool) -> None:
        vmi = new_vmi()
        vmi["metadata"]["labels"] = {"debugLogs": value}
        names = [e["name"] for e in compute(render(vmi))["env"]]
        assert ("LIBVIRT_DEBUG_LOGS" in names) is debug


class TestContainerDisks:
    def test_one_container_per_container_disk_and_init_containers(self) -> None:
        volumes = [
            {"name": "containerdisk1", "containerDisk": {"image": "my-image-1"}},
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config"}},
            {"name": "containerdisk2", "containerDisk": {"image": "my-image-2", "imagePullPolicy": "Always"}},
        ]
        vmi = new_vmi(namespace="default", volumes=volumes)
        vmi["status"] = {"runtimeUser": 107}
        pod = render(vmi)
        containers = pod["spec"]["containers"]
        assert [c["name"] for c in containers] == ["compute", "volumecontainerdisk1", "volumecontainerdisk2"]
        first, second = containers[1], containers[2]
        assert first["image"] == "my-image-1" and "imagePullPolicy" not in first
        assert second["imagePullPolicy"] == "Always"
        assert first["command"] == ["/usr/bin/container-disk"]
        assert first["args"] == ["--copy-path", "/var/run/kubevirt/container-disks/1234/disk_0"]
        assert second["args"] == ["--copy-path", "/var/run/kubevirt/container-disks/1234/disk_2"]
        assert first["volumeMounts"] == [
            {"name": "container-disks", "mountPath": "/var/run/kubevirt/container-disks/1234"},
            {"name": "virt-bin-share-dir", "mountPath": "/usr/bin"},
        ]
        assert first["resources"]["requests"]["ephemeral-storage"] == "50M"
        assert first["securityContext"] == {
            "runAsUser": 107,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
        console_log, *init = pod["spec"]["initContainers"]
        assert console_log["name"] == "guest-console-log", "the console log comes first"
        assert [c["name"] for c in init] == [
            "container-disk-binary",
            "volumecontainerdisk1-init",
            "volumecontainerdisk2-init",
        ]
        assert init[0]["volumeMounts"] == [{"name": "virt-bin-share-dir", "mountPath": "/init/usr/bin"}]
        assert init[0]["command"] == ["/usr/bin/cp"]
        assert init[0]["args"] == ["--preserve=all", "/usr/bin/container-disk", "/init/usr/bin/container-disk"]
        assert init[0]["image"] == SETTINGS.image
        assert init[1]["args"] == ["--no-op"] and init[1]["image"] == "my-image-1"
        assert init[2]["args"] == ["--no-op"] and init[2]["image"] == "my-image-2"

    def test_kernel_boot_image_is_served_like_a_container_disk_at_kernel_boot(self) -> None:
        kernel_boot = {
            "kernelArgs": "console=ttyS0",
            "container": {
                "image": "kernel-image:1",
                "kernelPath": "/boot/vmlinuz",
                "imagePullPolicy": "Never",
                "imagePullSecret": "kernel-secret",
            },
        }
        vmi = new_vmi(domain={"firmware": {"kernelBoot": kernel_boot}, "devices": {}})
        pod = render(vmi)
        containers = pod["spec"]["containers"]
        assert [c["name"] for c in containers] == ["compute", "volumekernel-boot-volume"]
        kernel = containers[1]
        assert kernel["image"] == "kernel-image:1" and kernel["imagePullPolicy"] == "Never"
        assert kernel["command"] == ["/usr/bin/container-disk"]
        assert kernel["args"] == ["--copy-path", "/var/run/kubevirt/container-disks/1234/kernel-boot"]
        # No containerDisk volume, yet the binary copy and the pre-pull are there (upstream's template.go).
        assert [c["name"] for c in pod["spec"]["initContainers"]][1:] == [
            "container-disk-binary",
            "volumekernel-boot-volume-init",
        ]
        assert pod["spec"]["initContainers"][-1]["args"] == ["--no-op"]
        assert pod["spec"]["imagePullSecrets"] == [{"name": "kernel-secret"}]

    def test_kernel_boot_container_follows_the_container_disks(self) -> None:
        volumes = [{"name": "kernel-boot-volume", "containerDisk": {"image": "x"}}]
        volumes += [{"name": "cd", "containerDisk": {"image": "disk"}}]
        domain = {"firmware": {"kernelBoot": {"container": {"image": "k", "initrdPath": "/initrd"}}}}
        pod = render(new_vmi(domain=domain, volumes=volumes))
        names = [c["name"] for c in pod["spec"]["containers"]]
        # A volume named like upstream's reserved kernel-boot volume gets no container of its own.
        assert names == ["compute", "volumecd", "volumekernel-boot-volume"]
        assert pod["spec"]["containers"][1]["args"][-1].endswith("/1234/disk_1")
        without_image = render(new_vmi(domain={"firmware": {"kernelBoot": {"kernelArgs": "quiet"}}}))
        assert [c["name"] for c in without_image["spec"]["containers"]] == ["compute"]

    def test_image_pull_secrets_are_deduplicated(self) -> None:
        volumes = [
            {"name": "cd1", "containerDisk": {"image": "a", "imagePullSecret": "pull-secret-2"}},
            {"name": "cd2", "containerDisk": {"image": "b", "imagePullSecret": "pull-secret-2"}},
            {"name": "cd3", "containerDisk": {"image": "c", "imagePullSecret": "pull-secret-1"}},
        ]
        pod = render(new_vmi(volumes=volumes), replace(SETTINGS, image_pull_secret="pull-secret-1"))
        assert pod["spec"]["imagePullSecrets"] == [{"name": "pull-secret-2"}, {"name": "pull-secret-1"}]
        assert "imagePullSecrets" not in render(new_vmi())["spec"]


def console_log(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in pod["spec"].get("initContainers") or [] if c["name"] == "guest-console-log"), None)


class TestGuestConsoleLog:
    def test_renders_upstreams_container(self) -> None:
        container = console_log(render(new_vmi()))
        assert container == {
            "name": "guest-console-log",
            "image": SETTINGS.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/usr/bin/virt-tail"],
            "args": ["--logfile", "/var/run/kubevirt-private/1234/virt-serial0-log"],
            "env": [{"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": "2"}],
            "resources": {"requests": {"cpu": "5m", "memory": "35M"}, "limits": {"cpu": "15m", "memory": "60M"}},
            "volumeMounts": [{"name": "private", "mountPath": "/var/run/kubevirt-private", "readOnly": True}],
            "securityContext": {
                "runAsUser": 107,
                "runAsNonRoot": True,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
            "restartPolicy": "Always",
        }

    @pytest.mark.parametrize(
        ("devices", "cluster_disabled", "enabled"),
        [
            ({}, False, True),
            ({}, True, False),
            ({"logSerialConsole": True}, True, True),
            ({"logSerialConsole": False}, False, False),
            ({"autoattachSerialConsole": False}, False, False),
            ({"autoattachSerialConsole": False, "logSerialConsole": True}, False, False),
            ({"autoattachSerialConsole": True}, False, True),
        ],
    )
    def test_enabled_by_the_vmi_else_the_cluster(
        self, devices: dict[str, Any], cluster_disabled: bool, enabled: bool
    ) -> None:
        vmi = new_vmi(domain={"devices": {"disableHotplug": True, **devices}})
        cluster = ClusterConfig(disable_serial_console_log=cluster_disabled)
        pod = render(vmi, replace(SETTINGS, cluster=cluster))
        assert (console_log(pod) is not None) is enabled
        if not enabled:
            assert "initContainers" not in pod["spec"]

    @pytest.mark.parametrize(
        "domain",
        [
            {"cpu": {"cores": 2, "dedicatedCpuPlacement": True}, "memory": {"guest": "1Gi"}},
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
        ],
    )
    def test_dedicated_cpus_and_guaranteed_qos_request_the_limits(self, domain: dict[str, Any]) -> None:
        pod = render(new_vmi(domain=domain))
        container = console_log(pod)
        assert container is not None
        limits = {"cpu": "15m", "memory": "60M"}
        assert container["resources"] == {"requests": limits, "limits": limits}
        assert qos_class(pod["spec"]) == "Guaranteed"

    def test_log_verbosity_label(self) -> None:
        vmi = new_vmi()
        vmi["metadata"]["labels"] = {"logVerbosity": "06"}
        pod = render(vmi)
        container = console_log(pod)
        assert container is not None
        assert container["env"] == [{"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": "6"}]
        assert {"name": "VIRT_LAUNCHER_LOG_VERBOSITY", "value": "06"} in compute(pod)["env"]

    def test_pull_policy_and_image_follow_the_launcher(self) -> None:
        settings = replace(SETTINGS, image="registry.example/virt-launcher:v9", image_pull_policy="Always")
        container = console_log(render(new_vmi(), settings))
        assert container is not None
        assert (container["image"], container["imagePullPolicy"]) == ("registry.example/virt-launcher:v9", "Always")


class TestVolumes:
    def test_base_volumes_and_mounts(self) -> None:
        pod = render(new_vmi())
        assert volume_names(pod) == BASE_VOLUMES
        assert all(volume["emptyDir"] == {} for volume in pod["spec"]["volumes"])
        assert compute(pod)["volumeMounts"] == [
            {"name": "private", "mountPath": "/var/run/kubevirt-private"},
            {"name": "public", "mountPath": "/var/run/kubevirt"},
            {"name": "ephemeral-disks", "mountPath": "/var/run/kubevirt-ephemeral-disks"},
            {"name": "libvirt-runtime", "mountPath": "/var/run/libvirt"},
            {"name": "sockets", "mountPath": "/var/run/kubevirt/sockets"},
            {
                "name": "container-disks",
                "mountPath": "/var/run/kubevirt/container-disks",
                "mountPropagation": "HostToContainer",
            },
        ]

    def test_hotplug_support(self) -> None:
        pod = render(new_vmi(domain={}))
        assert volume_names(pod) == [*BASE_VOLUMES, "hotplug-disks"]
        assert mounts(pod)["/var/run/kubevirt/hotplug-disks"]["mountPropagation"] == "HostToContainer"

    def test_hugepages(self) -> None:
        domain = {
            "devices": {"disableHotplug": True},
            "memory": {"hugepages": {"pageSize": "2Mi"}},
            "resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}},
        }
        pod = render(new_vmi(domain=domain))
        assert len(pod["spec"]["volumes"]) == 9
        assert len(compute(pod)["volumeMounts"]) == 8
        assert {"name": "hugepages", "emptyDir": {"medium": "HugePages"}} in pod["spec"]["volumes"]
        assert {"name": "hugetblfs-dir", "emptyDir": {"medium": "HugePages"}} in pod["spec"]["volumes"]
        assert mounts(pod)["/dev/hugepages"]["name"] == "hugepages"
        assert mounts(pod)["/dev/hugepages/libvirt/qemu"]["name"] == "hugetblfs-dir"

    def test_filesystem_and_block_claims(self) -> None:
        volumes = [
            {"name": "fs", "persistentVolumeClaim": {"claimName": "fs-claim", "readOnly": True}},
            {"name": "block", "persistentVolumeClaim": {"claimName": "block-claim"}},
            {"name": "dv", "dataVolume": {"name": "my-dv"}},
        ]
        pvcs = {
            "fs-claim": {"spec": {"accessModes": ["ReadWriteMany"]}},
            "block-claim": {"spec": {"volumeMode": "Block", "accessModes": ["ReadWriteOnce"]}},
            "my-dv": {"spec": {"volumeMode": "Filesystem"}},
        }
        pod = render(new_vmi(volumes=volumes), pvcs=pvcs)
        container = compute(pod)
        assert pod["spec"]["volumes"][-3:] == [
            {"name": "fs", "persistentVolumeClaim": {"claimName": "fs-claim", "readOnly": True}},
            {"name": "block", "persistentVolumeClaim": {"claimName": "block-claim"}},
            {"name": "dv", "persistentVolumeClaim": {"claimName": "my-dv"}},
        ]
        assert mounts(pod)["/var/run/kubevirt-private/vmi-disks/fs"]["name"] == "fs"
        assert mounts(pod)["/var/run/kubevirt-private/vmi-disks/dv"]["name"] == "dv"
        assert container["volumeDevices"] == [{"name": "block", "devicePath": "/dev/block"}]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SHARED_FILESYSTEM_PATHS"] == "/var/run/kubevirt-private/vmi-disks/fs"
        # Without a PVC lookup every claim is taken for a filesystem claim.
        assert "volumeDevices" not in compute(render(new_vmi(volumes=volumes)))

    def test_missing_claim(self) -> None:
        vmi = new_vmi(volumes=[{"name": "disk", "persistentVolumeClaim": {"claimName": "nope"}}])
        with pytest.raises(PVCNotFoundError, match="didn't find PVC nope"):
            render_launcher_pod(vmi, SETTINGS, pvcs={})

    def test_hotplugged_volumes_are_left_to_attachment_pods(self) -> None:
        volumes = [
            {"name": "existing", "persistentVolumeClaim": {"claimName": "existing"}},
            {"name": "hotplug-dv", "dataVolume": {"name": "hotplug-dv", "hotpluggable": True}},
            {"name": "hotplug-pvc", "persistentVolumeClaim": {"claimName": "hotplug-pvc", "hotpluggable": True}},
            {"name": "attached", "persistentVolumeClaim": {"claimName": "attached"}},
        ]
        vmi = new_vmi(volumes=volumes)
        vmi["status"] = {"volumeStatus": [{"name": "attached", "hotplugVolume": {}}]}
        assert volume_names(render(vmi)) == [*BASE_VOLUMES, "existing"]

    @pytest.mark.parametrize(("disk_type", "path_type"), [("Disk", "Directory"), ("DiskOrCreate", "DirectoryOrCreate")])
    def test_host_disk(self, disk_type: str, path_type: str) -> None:
        volume = {"name": "host", "hostDisk": {"path": "/data/disks/disk.img", "type": disk_type, "capacity": "1Gi"}}
        pod = render(new_vmi(volumes=[volume]))
        assert pod["spec"]["volumes"][-1] == {"name": "host", "hostPath": {"path": "/data/disks", "type": path_type}}
        assert mounts(pod)["/var/run/kubevirt-private/vmi-disks/host"]["name"] == "host"

    def test_config_volumes_mount_only_when_a_disk_uses_them(self) -> None:
        volumes: list[dict[str, Any]] = [
            {"name": "cm", "configMap": {"name": "my-cm", "optional": True}},
            {"name": "sec", "secret": {"secretName": "my-secret"}},
            {
                "name": "dapi",
                "downwardAPI": {"fields": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
            {"name": "unused", "secret": {"secretName": "other"}},
        ]
        disks: list[dict[str, Any]] = [{"name": name, "disk": {}} for name in ("cm", "sec", "dapi")]
        pod = render(new_vmi(domain={"devices": {"disks": disks, "disableHotplug": True}}, volumes=volumes))
        assert pod["spec"]["volumes"][-4:] == [
            {"name": "cm", "configMap": {"name": "my-cm", "optional": True}},
            {"name": "sec", "secret": {"secretName": "my-secret"}},
            {"name": "dapi", "downwardAPI": {"items": volumes[2]["downwardAPI"]["fields"]}},
            {"name": "unused", "secret": {"secretName": "other"}},
        ]
        rendered = mounts(pod)
        assert rendered["/var/run/kubevirt-private/config-map/cm"] == {
            "name": "cm",
            "mountPath": "/var/run/kubevirt-private/config-map/cm",
            "readOnly": True,
        }
        assert rendered["/var/run/kubevirt-private/secret/sec"]["readOnly"] is True
        assert rendered["/var/run/kubevirt-private/downwardapi/dapi"]["name"] == "dapi"
        assert not any(mount["name"] == "unused" for mount in rendered.values())

    def test_service_account_volume_mounts_the_token(self) -> None:
        volumes = [{"name": "sa", "serviceAccount": {"serviceAccountName": "my-sa"}}]
        spec = render(new_vmi(volumes=volumes))["spec"]
        assert spec["automountServiceAccountToken"] is True
        assert spec["serviceAccountName"] == "my-sa"
        assert volume_names({"spec": spec}) == BASE_VOLUMES

    def test_downward_metrics(self) -> None:
        pod = render(new_vmi(volumes=[{"name": "metrics", "downwardMetrics": {}}]))
        assert pod["spec"]["volumes"][-1] == {"name": "metrics", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
        assert mounts(pod)["/var/run/kubevirt-private/downwardmetric-disk"]["name"] == "metrics"

    @pytest.mark.parametrize("source", ["cloudInitNoCloud", "cloudInitConfigDrive"])
    def test_cloud_init_secret_refs(self, source: str) -> None:
        volume = {"name": "ci", source: {"userDataSecretRef": {"name": "ud"}, "networkDataSecretRef": {"name": "nd"}}}
        pod = render(new_vmi(volumes=[volume]))
        assert pod["spec"]["volumes"][-2:] == [
            {"name": "ci-udata", "secret": {"secretName": "ud"}},
            {"name": "ci-ndata", "secret": {"secretName": "nd"}},
        ]
        rendered = mounts(pod)
        for key, volume_name in (("userdata", "ci-udata"), ("userData", "ci-udata"), ("networkData", "ci-ndata")):
            path = f"/var/run/kubevirt-private/secret/ci/{key}"
            assert rendered[path] == {"name": volume_name, "mountPath": path, "subPath": key, "readOnly": True}

    def test_access_credentials(self) -> None:
        credentials = [
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": "my-pkey"}},
                    "propagationMethod": {"qemuGuestAgent": {}},
                }
            },
            {"userPassword": {"source": {"secret": {"secretName": "my-pass"}}}},
        ]
        pod = render(new_vmi(accessCredentials=credentials))
        assert volume_names(pod)[-2:] == ["my-pkey-access-cred", "my-pass-access-cred"]
        assert mounts(pod)["/var/run/kubevirt-private/secret/my-pkey-access-cred"]["readOnly"] is True

    def test_sysprep(self) -> None:
        pod = render(new_vmi(volumes=[{"name": "sysprep", "sysprep": {"configMap": {"name": "unattend"}}}]))
        assert pod["spec"]["volumes"][-1] == {"name": "sysprep", "configMap": {"name": "unattend"}}
        assert mounts(pod)["/var/run/kubevirt-private/sysprep/sysprep"]["readOnly"] is True
        with pytest.raises(LaunchManifestError, match="Sysprep must have Secret or ConfigMap"):
            render_launcher_pod(new_vmi(volumes=[{"name": "sysprep", "sysprep": {}}]), SETTINGS)


def defaulted_seed(filename: str, index: int = 0) -> dict[str, Any]:
    documents = [doc for doc in yaml.safe_load_all((paths.SEEDS / filename).read_text(encoding="utf-8")) if doc]
    vmi: dict[str, Any] = documents[index]
    assert vmi["kind"] == "VirtualMachineInstance"
    vmi["metadata"].setdefault("namespace", "default")
    vmi["metadata"]["uid"] = "6f3c0e5e-0000-4000-8000-000000000001"
    mutate_vmi(vmi, AdmissionContext(now=lambda: "2026-08-01T12:00:00Z"), operation="CREATE")
    return vmi


class TestSeeds:
    def test_centos01(self) -> None:
        vmi = defaulted_seed("001-vmi-centos01.yaml", index=1)
        pvc = next(yaml.safe_load_all((paths.SEEDS / "001-vmi-centos01.yaml").read_text(encoding="utf-8")))
        pvcs = {"pvc-centos01-bootdisk": pvc}
        pod = render(vmi, pvcs=pvcs)
        container = compute(pod)
        # 2Gi request: pagetables 4Mi + 240 + 8 (1 vCPU) + 8 (iothread) + 32 (video) = 292Mi of overhead.
        assert container["resources"] == {
            "requests": {"cpu": "100m", "ephemeral-storage": "50M", "memory": "2340Mi"},
            "limits": {"devices.kubevirt.io/tun": "1"},
        }
        assert pod["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(292 * 1024 * 1024)
        assert pod["spec"]["terminationGracePeriodSeconds"] == 30
        assert container["args"][container["args"].index("--grace-period-seconds") + 1] == "15"
        assert container["volumeDevices"] == [{"name": "root-disk", "devicePath": "/dev/root-disk"}]
        assert container["securityContext"]["runAsUser"] == 107  # runtimeUser 107 from the VMI mutator
        assert [c["name"] for c in pod["spec"]["containers"]] == ["compute"]
        assert "affinity" not in pod["spec"]  # host-passthrough
        assert qos_class(pod["spec"]) == "Burstable"

    def test_my_vmi(self) -> None:
        vmi = defaulted_seed("003-vmi-my-vmi.yaml")
        pod = render(vmi)
        container = compute(pod)
        # No memory request: the guest's 4Gi plus 0 pagetables + 240 + 16 (2 vCPUs) + 8 + 32 = 296Mi.
        assert container["resources"] == {
            "requests": {"cpu": "200m", "ephemeral-storage": "50M", "memory": "4392Mi"},
            "limits": {"devices.kubevirt.io/tun": "1"},
        }
        assert [c["name"] for c in pod["spec"]["containers"]] == ["compute", "volumecontainerdisk"]
        disk = pod["spec"]["containers"][1]
        assert disk["image"] == "quay.io/containerdisks/fedora:latest"
        assert disk["imagePullPolicy"] == "Always"  # the mutator's default for :latest
        assert [c["name"] for c in pod["spec"]["initContainers"]] == [
            "guest-console-log",
            "container-disk-binary",
            "volumecontainerdisk-init",
        ]
        assert pod["spec"]["nodeSelector"] == {"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64"}
        assert "affinity" in pod["spec"]  # host-model by default
        assert volume_names(pod) == [*BASE_VOLUMES, "hotplug-disks"]
        assert qos_class(pod["spec"]) == "Burstable"


def test_the_launcher_pod_asks_multus_for_the_vmis_secondary_networks() -> None:
    vmi = new_vmi(
        networks=[{"name": "default", "pod": {}}, {"name": "blue-net", "multus": {"networkName": "blue"}}],
        domain={
            "devices": {
                "disableHotplug": True,
                "interfaces": [{"name": "default", "masquerade": {}}, {"name": "blue-net", "bridge": {}}],
            }
        },
    )
    annotations = render(vmi)["metadata"]["annotations"]
    assert annotations["k8s.v1.cni.cncf.io/networks"] == (
        '[{"name":"blue","namespace":"testns","interface":"pod0371e81cb4a"}]'
    )
    assert "v1.multus-cni.io/default-network" not in annotations
