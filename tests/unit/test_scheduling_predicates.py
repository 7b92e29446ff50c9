"""kube-scheduler's filters, effective requests, least-allocated score and FitError message, as pure tables."""

from __future__ import annotations

from typing import Any

import pytest

from pykubevirt.admission.context import AdmissionContext
from pykubevirt.admission.defaults import mutate_vmi
from pykubevirt.api.quantity import MI
from pykubevirt.controller.launcher_pod import LauncherSettings, render_launcher_pod
from pykubevirt.node.scheduling_predicates import (
    NodeInfo,
    PodUsage,
    container_requests,
    filter_node,
    is_terminal,
    least_allocated_score,
    matches_node_affinity,
    pod_requests,
    ports_conflict,
    select_node,
    tolerates,
    unschedulable_message,
    untolerated_taint,
)

GI = 1024 * MI
KUBEVIRT_DEVICES: dict[str, Any] = {"devices.kubevirt.io/kvm": "110", "devices.kubevirt.io/tun": "110"}
KUBEVIRT_DEVICES["devices.kubevirt.io/vhost-net"] = "110"


def node(
    name: str = "node01",
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    ready: str | None = "True",
    unschedulable: bool = False,
    **extra: str,
) -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "50Gi", **extra}
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": allocatable, "conditions": []},
    }
    if ready is not None:
        body["status"]["conditions"].append({"type": "Ready", "status": ready})
    if taints:
        body["spec"]["taints"] = taints
    if unschedulable:
        body["spec"]["unschedulable"] = True
    return body


def container(
    name: str = "c", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "p-uid"},
        "spec": {"containers": list(containers) or [container()], **spec},
    }


def info(n: dict[str, Any], *pods: dict[str, Any]) -> NodeInfo:
    """The node with its pods counted as the scheduler counts them: terminal pods take nothing."""
    node_info = NodeInfo(n)
    for bound in pods:
        if not is_terminal(bound):
            node_info.add(PodUsage.of(bound))
    return node_info


class TestRequests:
    def test_limits_default_missing_requests(self) -> None:
        assert container_requests(container(limits={"cpu": "2", "memory": "1Gi"})) == {"cpu": 2000, "memory": GI}
        assert container_requests(container(requests={"cpu": "500m"}, limits={"cpu": "2"})) == {"cpu": 500}

    def test_extended_resource_only_in_limits_is_requested(self) -> None:
        c = container(requests={"memory": "1Gi"}, limits={"devices.kubevirt.io/kvm": "1"})
        assert pod_requests(pod(c)) == {"memory": GI, "devices.kubevirt.io/kvm": 1}

    def test_containers_summed_and_init_containers_maxed(self) -> None:
        p = pod(
            container("a", {"cpu": "100m", "memory": "100Mi"}),
            container("b", {"cpu": "200m", "memory": "100Mi"}),
            initContainers=[container("i1", {"cpu": "500m"}), container("i2", {"memory": "50Mi"})],
        )
        assert pod_requests(p) == {"cpu": 500, "memory": 200 * MI}

    def test_sidecar_init_containers_run_alongside(self) -> None:
        sidecar = {**container("sidecar", {"cpu": "100m"}), "restartPolicy": "Always"}
        p = pod(container("app", {"cpu": "300m"}), initContainers=[sidecar, container("setup", {"cpu": "350m"})])
        # setup runs next to the sidecar (450m); the app runs next to it afterwards (400m).
        assert pod_requests(p) == {"cpu": 450}

    def test_a_sidecar_is_summed_even_when_it_is_the_only_init_container(self) -> None:
        sidecar = {**container("log", {"cpu": "5m", "memory": "35M"}), "restartPolicy": "Always"}
        app = container("app", {"cpu": "100m", "memory": "1Gi"})
        assert pod_requests(pod(app, initContainers=[sidecar])) == {"cpu": 105, "memory": GI + 35_000_000}
        plain = pod(app, initContainers=[{**sidecar, "restartPolicy": ""}])
        assert pod_requests(plain) == {"cpu": 100, "memory": GI}, "a regular init container is only max'ed"

    def test_overhead_is_added(self) -> None:
        p = pod(container(requests={"memory": "1Gi"}), overhead={"memory": "256Mi", "cpu": "250m"})
        assert pod_requests(p) == {"memory": GI + 256 * MI, "cpu": 250}

    def test_non_zero_defaults_for_scoring(self) -> None:
        assert pod_requests(pod(container()), non_zero=True) == {"cpu": 100, "memory": 200 * MI}
        assert pod_requests(pod(container()), non_zero=False) == {}


class TestTaints:
    @pytest.mark.parametrize(
        ("toleration", "taint", "expected"),
        [
            ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, ("k", "v", "NoSchedule"), True),
            ({"key": "k", "value": "v"}, ("k", "v", "NoExecute"), True),
            ({"key": "k", "operator": "Equal", "value": "w"}, ("k", "v", "NoSchedule"), False),
            ({"key": "k", "operator": "Exists"}, ("k", "anything", "NoSchedule"), True),
            ({"key": "other", "operator": "Exists"}, ("k", "v", "NoSchedule"), False),
            ({"operator": "Exists"}, ("any-key", "v", "NoExecute"), True),
            ({"operator": "Exists", "effect": "NoSchedule"}, ("any-key", "v", "NoExecute"), False),
            ({"key": "k", "operator": "Equal"}, ("k", "", "NoSchedule"), True),
            ({"key": "k", "operator": "Gt", "value": "1"}, ("k", "2", "NoSchedule"), False),
        ],
    )
    def test_tolerates(self, toleration: dict[str, str], taint: tuple[str, str, str], expected: bool) -> None:
        key, value, effect = taint
        assert tolerates(toleration, {"key": key, "value": value, "effect": effect}) is expected

    def test_first_untolerated_no_schedule_or_no_execute_taint(self) -> None:
        taints = [
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "a", "value": "1", "effect": "NoSchedule"},
            {"key": "b", "effect": "NoExecute"},
        ]
        n = node(taints=taints)
        assert untolerated_taint(pod(), n) == taints[1]
        assert untolerated_taint(pod(tolerations=[{"key": "a", "operator": "Exists"}]), n) == taints[2]
        assert untolerated_taint(pod(tolerations=[{"operator": "Exists"}]), n) is None


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return expression


class TestNodeAffinity:
    LABELS = {"zone": "a", "cores": "8", "gpu": "yes"}

    @pytest.mark.parametrize(
        ("expressions", "expected"),
        [
            ([_expr("zone", "In", "a", "b")], True),
            ([_expr("zone", "In", "b")], False),
            ([_expr("zone", "NotIn", "b")], True),
            ([_expr("missing", "NotIn", "b")], True),
            ([_expr("gpu", "Exists")], True),
            ([_expr("gpu", "DoesNotExist")], False),
            ([_expr("node-labeller.kubevirt.io/obsolete-host-model", "DoesNotExist")], True),
            ([_expr("cores", "Gt", "4")], True),
            ([_expr("cores", "Gt", "8")], False),
            ([_expr("cores", "Lt", "16")], True),
            ([_expr("zone", "Gt", "1")], False),  # not an integer label
            ([_expr("cores", "Gt", "x")], False),  # invalid term: matches nothing
            ([_expr("zone", "In", "a"), _expr("gpu", "DoesNotExist")], False),  # ANDed
            ([_expr("zone", "In", "a"), _expr("cores", "Lt", "9")], True),
        ],
    )
    def test_match_expressions(self, expressions: list[dict[str, Any]], expected: bool) -> None:
        p = pod(affinity=_affinity({"matchExpressions": expressions}))
        assert matches_node_affinity(p, node(labels=self.LABELS)) is expected

    def test_terms_are_ored_and_an_empty_term_matches_nothing(self) -> None:
        n = node(labels=self.LABELS)
        assert (
            matches_node_affinity(pod(affinity=_affinity({"matchExpressions": [_expr("zone", "In", "z")]})), n) is False
        )
        either = _affinity(
            {"matchExpressions": [_expr("zone", "In", "z")]}, {"matchExpressions": [_expr("gpu", "Exists")]}
        )
        assert matches_node_affinity(pod(affinity=either), n) is True
        assert matches_node_affinity(pod(affinity=_affinity({})), n) is False
        assert matches_node_affinity(pod(affinity=_affinity()), n) is False

    def test_match_fields_on_the_node_name(self) -> None:
        n = node("node07")
        assert matches_node_affinity(
            pod(affinity=_affinity({"matchFields": [_expr("metadata.name", "In", "node07")]})), n
        )
        assert not matches_node_affinity(
            pod(affinity=_affinity({"matchFields": [_expr("metadata.name", "NotIn", "node07")]})), n
        )
        assert not matches_node_affinity(pod(affinity=_affinity({"matchFields": [_expr("spec.x", "In", "node07")]})), n)

    def test_node_selector(self) -> None:
        n = node(labels=self.LABELS)
        assert matches_node_affinity(pod(nodeSelector={"zone": "a", "gpu": "yes"}), n)
        assert not matches_node_affinity(pod(nodeSelector={"zone": "a", "ssd": "true"}), n)

    def test_preferred_affinity_does_not_filter(self) -> None:
        preferred = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]}
        assert matches_node_affinity(pod(affinity={"nodeAffinity": preferred}), node())


class TestFilter:
    def test_resource_fit_counts_bound_pods(self) -> None:
        bound = pod(container(requests={"cpu": "3", "memory": "6Gi"}))
        wanted = pod(container(requests={"cpu": "2", "memory": "4Gi"}))
        assert filter_node(wanted, info(node(), bound)) == ["Insufficient cpu", "Insufficient memory"]
        assert filter_node(wanted, info(node())) == []

    def test_terminal_pods_free_their_resources(self) -> None:
        done = {**pod(container(requests={"memory": "8Gi"})), "status": {"phase": "Succeeded"}}
        assert filter_node(pod(container(requests={"memory": "1Gi"})), info(node(), done)) == []

    def test_pod_count_and_extended_resources(self) -> None:
        wanted = pod(container(limits={"devices.kubevirt.io/kvm": "1"}))
        assert filter_node(wanted, info(node(pods="1"), pod())) == [
            "Too many pods",
            "Insufficient devices.kubevirt.io/kvm",
        ]
        kvm: dict[str, Any] = {"devices.kubevirt.io/kvm": "1"}
        assert filter_node(wanted, info(node(**kvm))) == []
        assert filter_node(pod(container(requests={"ephemeral-storage": "60Gi"})), info(node())) == [
            "Insufficient ephemeral-storage"
        ]

    def test_filters_stop_at_the_first_rejection(self) -> None:
        greedy = pod(container(requests={"memory": "100Gi"}), nodeSelector={"x": "y"})
        cordoned = node(unschedulable=True, taints=[{"key": "t", "effect": "NoSchedule"}], ready="False")
        assert filter_node(greedy, info(cordoned)) == ["node(s) were unschedulable"]
        tainted = node(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}], ready="Unknown")
        assert filter_node(greedy, info(tainted)) == [
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
        ]
        assert filter_node(greedy, info(node(ready="False"))) == ["node(s) were not ready"]
        assert filter_node(greedy, info(node(ready=None))) == ["node(s) were not ready"]
        assert filter_node(greedy, info(node())) == ["node(s) didn't match Pod's node affinity/selector"]
        assert filter_node(greedy, info(node(labels={"x": "y"}))) == ["Insufficient memory"]

    def test_cordon_is_tolerated_by_its_taint(self) -> None:
        tolerant = pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
        assert filter_node(tolerant, info(node(unschedulable=True))) == []

    def test_host_ports(self) -> None:
        web = container()
        web["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        assert filter_node(pod(web), info(node(), pod(web))) == [
            "node(s) didn't have free ports for the requested pod ports"
        ]
        assert ports_conflict({("127.0.0.1", "TCP", 1)}, {("0.0.0.0", "TCP", 1)})
        assert not ports_conflict({("127.0.0.1", "TCP", 1)}, {("127.0.0.2", "TCP", 1)})
        assert not ports_conflict({("0.0.0.0", "UDP", 1)}, {("0.0.0.0", "TCP", 1)})


class TestScore:
    def test_least_allocated(self) -> None:
        usage = PodUsage.of(pod(container(requests={"cpu": "1", "memory": "2Gi"})))
        # cpu (4000-1000)/4000 → 75, memory (8-2)/8 → 75.
        assert least_allocated_score(usage, info(node())) == 75
        busy = info(node(), pod(container(requests={"cpu": "2", "memory": "4Gi"})))
        assert least_allocated_score(usage, busy) == 25
        # Containers without requests count as 100m / 200Mi when scoring.
        assert least_allocated_score(PodUsage.of(pod()), info(node(cpu="1", memory="1000Mi"))) == (90 + 80) // 2

    def test_select_prefers_the_emptiest_node_and_ties_by_name(self) -> None:
        wanted = pod(container(requests={"cpu": "1", "memory": "1Gi"}))
        infos = [info(node("c")), info(node("b")), info(node("a"), pod(container(requests={"cpu": "1"})))]
        assert select_node(wanted, infos).node == "b"
        decision = select_node(wanted, [info(node("big", cpu="8", memory="16Gi")), info(node("small"))])
        assert decision.node == "big" and decision.scores == {"big": (87 + 93) // 2, "small": (75 + 87) // 2}

    def test_nothing_fits(self) -> None:
        decision = select_node(pod(container(requests={"memory": "9Gi"})), [info(node("a")), info(node("b"))])
        assert decision.node is None
        assert decision.reasons == {"a": ["Insufficient memory"], "b": ["Insufficient memory"]}


class TestMessage:
    def test_format_and_order(self) -> None:
        reasons = {
            "n1": ["Insufficient memory"],
            "n2": ["node(s) didn't match Pod's node affinity/selector"],
            "n3": ["Insufficient cpu", "Insufficient memory"],
            "n4": ["node(s) had untolerated taint {node.kubernetes.io/unreachable: }"],
        }
        assert unschedulable_message(4, reasons) == (
            "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector, "
            "1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 Insufficient memory."
        )

    def test_counts_sort_as_strings_like_kube_scheduler(self) -> None:
        reasons = {f"n{i}": ["Insufficient memory"] for i in range(10)}
        reasons["x"] = ["node(s) were unschedulable"]
        reasons["y"] = ["node(s) were unschedulable"]
        assert unschedulable_message(12, reasons) == (
            "0/12 nodes are available: 10 Insufficient memory, 2 node(s) were unschedulable."
        )

    def test_example_from_the_brief(self) -> None:
        reasons = {"a": ["Insufficient memory"], "b": ["node(s) didn't match Pod's node affinity/selector"]}
        assert unschedulable_message(2, reasons) == (
            "0/2 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector."
        )

    def test_no_nodes(self) -> None:
        assert unschedulable_message(0, {}) == "no nodes available to schedule pods"


def _launcher_pod(*, emulation: bool = False, **domain: Any) -> dict[str, Any]:
    vmi: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "default", "uid": "6f3c0e5e-0000-4000-8000-000000000001"},
        "spec": {
            "domain": {
                "memory": {"guest": "1Gi"},
                "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                **domain,
            },
            "volumes": [{"name": "root", "containerDisk": {"image": "pykubevirt.local/demo-guest:1.0"}}],
        },
    }
    mutate_vmi(vmi, AdmissionContext(now=lambda: "2026-08-01T12:00:00Z"), operation="CREATE")
    return render_launcher_pod(vmi, LauncherSettings(use_emulation=emulation, random=lambda n: 0))


def _kubevirt_node(name: str, **kwargs: Any) -> dict[str, Any]:
    labels = {"kubevirt.io/schedulable": "true", "kubernetes.io/arch": "amd64", **kwargs.pop("labels", {})}
    return node(name, labels=labels, **{**KUBEVIRT_DEVICES, **kwargs})


class TestLauncherPod:
    def test_requests_of_a_rendered_launcher_pod(self) -> None:
        launcher = _launcher_pod()
        # compute 1312Mi (1Gi + 288Mi overhead) + the containerDisk container's 1M + the guest-console-log
        # sidecar's 35M (it runs alongside, so it is summed); 100m + 1m + 5m; 50M + 50M.
        assert pod_requests(launcher) == {
            "cpu": 106,
            "memory": 1312 * MI + 1_000_000 + 35_000_000,
            "ephemeral-storage": 100_000_000,
            "devices.kubevirt.io/kvm": 1,
            "devices.kubevirt.io/tun": 1,
            "devices.kubevirt.io/vhost-net": 1,
        }

    def test_where_a_launcher_pod_goes(self) -> None:
        launcher = _launcher_pod()
        candidates = [
            info(_kubevirt_node("no-kvm", **{"devices.kubevirt.io/kvm": "0"})),
            info(_kubevirt_node("obsolete", labels={"node-labeller.kubevirt.io/obsolete-host-model": "true"})),
            info(node("plain", **KUBEVIRT_DEVICES)),  # no kubevirt.io/schedulable=true label (virt-handler absent)
            info(_kubevirt_node("arm", labels={"kubernetes.io/arch": "arm64"})),
            info(_kubevirt_node("tiny", memory="1Gi")),
            info(_kubevirt_node("good")),
        ]
        decision = select_node(launcher, candidates)
        assert decision.node == "good"
        assert decision.reasons == {
            "no-kvm": ["Insufficient devices.kubevirt.io/kvm"],
            "obsolete": ["node(s) didn't match Pod's node affinity/selector"],
            "plain": ["node(s) didn't match Pod's node affinity/selector"],
            "arm": ["node(s) didn't match Pod's node affinity/selector"],
            "tiny": ["Insufficient memory"],
        }
        assert unschedulable_message(5, decision.reasons) == (
            "0/5 nodes are available: 1 Insufficient devices.kubevirt.io/kvm, 1 Insufficient memory, "
            "3 node(s) didn't match Pod's node affinity/selector."
        )

    def test_host_passthrough_has_no_affinity(self) -> None:
        launcher = _launcher_pod(emulation=True, cpu={"model": "host-passthrough"})
        assert "affinity" not in launcher["spec"]
        obsolete = _kubevirt_node("obsolete", labels={"node-labeller.kubevirt.io/obsolete-host-model": "true"})
        assert filter_node(launcher, info(obsolete)) == []
        assert "devices.kubevirt.io/kvm" not in pod_requests(launcher)
