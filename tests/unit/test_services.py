"""Services without a server: kube's defaults, validation and allocators; the Endpoints and EndpointSlice a Service's
pods give; the nft script of the host's Service proxy (checked by `nft -c`, which applies nothing)."""

from __future__ import annotations

import ipaddress
import subprocess
from typing import Any

import pytest

from pykubevirt.api import service_validation as sv
from pykubevirt.controller.endpoints_controller import desired_endpoints, desired_slice, endpoint_pods, target_port
from pykubevirt.controller.node_ipam import CIDRSetFull, free_subnet
from pykubevirt.node.pod_network import ClusterNetwork
from pykubevirt.node.service_rules import ServicePort, node_ips, render_pod_table, render_table, service_ports


def svc(**spec: Any) -> dict[str, Any]:
    body = {"ports": [{"port": 80}], **spec}
    return {"metadata": {"name": "web", "namespace": "ns", "uid": "u1"}, "spec": body}


def messages(obj: dict[str, Any]) -> list[str]:
    return [f"{c.field}: {c.message}" for c in sv.validate_service(obj)]


def test_defaults() -> None:
    service = svc()
    sv.default_service(service)
    assert service["spec"] == {
        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
        "type": "ClusterIP",
        "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster",
    }
    assert service["status"] == {"loadBalancer": {}}
    lb = svc(type="LoadBalancer", clusterIP="10.0.0.9")
    sv.default_service(lb)
    assert lb["spec"]["externalTrafficPolicy"] == "Cluster" and lb["spec"]["allocateLoadBalancerNodePorts"] is True
    assert lb["spec"]["clusterIPs"] == ["10.0.0.9"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"ports": []}, "spec.ports: Required value"),
        ({"ports": [{"port": 70000, "protocol": "TCP"}]}, "spec.ports[0].port: Invalid value: 70000: must be between"),
        (
            {"ports": [{"port": 1, "protocol": "TCP"}, {"port": 2, "protocol": "TCP"}]},
            "spec.ports[0].name: Required value",
        ),
        (
            {"ports": [{"name": "a", "port": 1, "protocol": "TCP"}, {"name": "a", "port": 2, "protocol": "TCP"}]},
            'spec.ports[1].name: Duplicate value: "a"',
        ),
        (
            {"ports": [{"port": 1, "protocol": "TCP", "targetPort": 70000}]},
            "spec.ports[0].targetPort: Invalid value: 70000",
        ),
        ({"ports": [{"port": 1, "protocol": "TCP", "targetPort": "80"}]}, "must contain at least one letter"),
        ({"type": "ExternalName", "ports": []}, "spec.externalName: Required value"),
        (
            {"clusterIPs": ["nope"], "clusterIP": "nope"},
            'spec.clusterIPs[0]: Invalid value: "nope": must be a valid IP',
        ),
        ({"clusterIP": "None", "type": "NodePort"}, "may not be set to 'None' for NodePort services"),
    ],
)
def test_validation_messages(spec: dict[str, Any], expected: str) -> None:
    service = svc(**spec)
    sv.default_service(service)
    assert any(expected in m for m in messages(service)), messages(service)


def test_a_headless_service_needs_no_ports_and_a_valid_one_passes() -> None:
    headless = svc(clusterIP="None", ports=[])
    sv.default_service(headless)
    assert messages(headless) == []
    assert sv.allocate_cluster_ip(headless["spec"], "10.0.0.0/24", set()) == ""
    assert headless["spec"]["clusterIPs"] == ["None"]


def test_cluster_ip_allocation() -> None:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    # The first address is the `kubernetes` Service's; then the lowest free one.
    assert sv.allocate_cluster_ip(spec, "10.0.0.0/29", {"10.0.0.2"}) == "10.0.0.3"
    assert (spec["clusterIPs"], spec["ipFamilies"], spec["ipFamilyPolicy"]) == (["10.0.0.3"], ["IPv4"], "SingleStack")
    with pytest.raises(sv.AllocationError) as full:
        sv.allocate_cluster_ip({}, "10.0.0.0/30", {"10.0.0.2"})
    assert full.value.cause is None and "range is full" in str(full.value)
    with pytest.raises(sv.AllocationError) as taken:
        sv.allocate_cluster_ip({"clusterIP": "10.0.0.5"}, "10.0.0.0/24", {"10.0.0.5"})
    assert taken.value.cause is not None
    assert taken.value.cause.message.endswith("failed to allocate IP 10.0.0.5: provided IP is already allocated")
    assert taken.value.cause.message.startswith('Invalid value: ["10.0.0.5"]')
    with pytest.raises(sv.AllocationError, match="provided IP is not in the valid range"):
        sv.allocate_cluster_ip({"clusterIP": "10.9.0.5"}, "10.0.0.0/24", set())
    assert sv.allocate_cluster_ip({"type": "ExternalName"}, "10.0.0.0/24", set()) == ""


def test_node_ports_and_updates_that_leave_allocations_out() -> None:
    spec: dict[str, Any] = {
        "type": "NodePort",
        "ports": [{"port": 80, "protocol": "TCP"}, {"port": 81, "nodePort": 30001}],
    }
    # Asked-for ports are reserved first; the others get the lowest free ones.
    assert sv.allocate_node_ports(spec, {30000}) == [30002, 30001]
    with pytest.raises(sv.AllocationError, match="provided port is already allocated"):
        sv.allocate_node_ports({"type": "NodePort", "ports": [{"port": 1, "nodePort": 30005}]}, {30005})
    old = {"spec": {**spec, "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"], "ipFamilies": ["IPv4"]}}
    new: dict[str, Any] = {"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}}
    sv.keep_allocated(new, old)
    assert new["spec"]["clusterIP"] == "10.0.0.7" and new["spec"]["ports"][0]["nodePort"] == 30002
    moved = svc(clusterIP="10.0.0.8", clusterIPs=["10.0.0.8"])
    sv.default_service(moved)
    found = [c.message for c in sv.validate_service_update(moved, old)]
    assert found == ['Invalid value: ["10.0.0.8"]: may not change once set']
    assert sv.validate_service_update(moved, {"spec": {"type": "ExternalName", "externalName": "x"}}) == []


def pod(name: str, ip: str, *, ready: bool = True, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels or {"app": "web"}},
        "spec": {"nodeName": "node01", **spec},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_endpoints_of_the_selected_pods() -> None:
    service = svc(selector={"app": "web"}, ports=[{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}])
    pods = [
        pod("b", "10.1.0.5"),
        pod("a", "10.1.0.4", ready=False),
        pod("other", "10.1.0.6", labels={"app": "db"}),
        {**pod("done", "10.1.0.7"), "status": {"phase": "Succeeded", "podIP": "10.1.0.7"}},
        {**pod("noip", ""), "status": {"phase": "Pending"}},
    ]
    assert [p["metadata"]["name"] for p in endpoint_pods(service, pods)] == ["a", "b"]
    endpoints = desired_endpoints(service, pods)
    (subset,) = endpoints["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["10.1.0.5"]
    assert [a["ip"] for a in subset["notReadyAddresses"]] == ["10.1.0.4"]
    assert subset["addresses"][0]["targetRef"] == {"kind": "Pod", "namespace": "ns", "name": "b", "uid": "uid-b"}
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    endpoint_slice = desired_slice(service, pods)
    assert endpoint_slice["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert endpoint_slice["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert [(e["addresses"], e["conditions"]["ready"]) for e in endpoint_slice["endpoints"]] == [
        (["10.1.0.4"], False),
        (["10.1.0.5"], True),
    ]


def test_named_target_ports_resolve_through_container_ports() -> None:
    named = pod("n", "10.1.0.9", containers=[{"name": "c", "ports": [{"name": "web", "containerPort": 8081}]}])
    assert target_port(named, {"port": 80, "targetPort": "web"}) == 8081
    assert target_port(named, {"port": 80, "targetPort": "web", "protocol": "UDP"}) is None
    assert target_port(named, {"port": 80}) == 80


ENDPOINTS = {
    "ns/web": {
        "subsets": [
            {
                "addresses": [{"ip": "10.1.0.5"}, {"ip": "10.1.0.4"}],
                "notReadyAddresses": [{"ip": "10.1.0.9"}],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
        ]
    }
}


def test_proxy_ports_take_ready_endpoints_only() -> None:
    services = [
        {
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": "10.0.0.5", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        },
        {"metadata": {"name": "headless", "namespace": "ns"}, "spec": {"clusterIP": "None", "ports": [{"port": 1}]}},
    ]
    assert service_ports(services, ENDPOINTS) == [
        ServicePort("ns/web:http", "10.0.0.5", 80, "tcp", (("10.1.0.4", 8080), ("10.1.0.5", 8080)))
    ]


def test_the_proxy_script_is_one_transaction_nft_accepts() -> None:
    network = ClusterNetwork("10.250.0.0/16")
    ports = [
        ServicePort("ns/web:http", "10.250.255.2", 80, "tcp", (("10.250.0.4", 8080), ("10.250.0.5", 8080))),
        ServicePort("ns/dns:", "10.250.255.3", 53, "udp", (("10.250.0.6", 53),)),
        ServicePort("ns/empty:", "10.250.255.4", 80, "tcp", ()),
    ]
    script = render_table(network.nft_table, network.service_cidr, ports)
    lines = script.splitlines()
    assert lines[:3] == [
        f"table ip {network.nft_table}",
        f"delete table ip {network.nft_table}",
        f"table ip {network.nft_table} {{",
    ]
    assert "\t\tip daddr 10.250.255.0/25 jump services" in lines
    assert any("numgen random mod 2 vmap" in line for line in lines)
    assert "\t\tmeta l4proto tcp dnat to 10.250.0.4:8080" in lines
    assert "\t\tmeta l4proto udp dnat to 10.250.0.6:53" in lines
    # A Service without endpoints has no rule: the filter chain's reject answers it on the host.
    assert "10.250.255.4" not in script
    assert "\t\tip daddr 10.250.255.0/25 meta l4proto tcp reject with tcp reset" in lines
    check = subprocess.run(["nft", "-c", "-f", "-"], input=script, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_the_service_range_is_never_a_nodes_pod_cidr() -> None:
    network = ClusterNetwork("10.130.0.0/16")
    assert network.service_cidr == "10.130.255.0/25"
    assert network.nft_table.startswith("pykubevirt-")
    assert not ipaddress.IPv4Network(network.service_cidr).overlaps(network.host_link)
    with pytest.raises(CIDRSetFull):
        free_subnet(network.cidr, {f"10.130.{i}.0/24" for i in range(255)})


def test_cluster_ips_outside_the_proxys_range_are_still_kept_on_the_host() -> None:
    # An API server started with another range must not send anything off the host: such ClusterIPs are handled
    # (and, without endpoints, rejected) like the range's own.
    ports = [
        ServicePort("ns/in:", "10.250.255.2", 80, "tcp", (("10.250.0.4", 80),)),
        ServicePort("ns/out:", "10.0.0.7", 80, "tcp", ()),
    ]
    script = render_table("pykubevirt-test", "10.250.255.0/25", ports)
    assert "\t\tip daddr { 10.250.255.0/25, 10.0.0.7 } jump services" in script.splitlines()
    assert "\t\tip daddr { 10.250.255.0/25, 10.0.0.7 } reject" in script.splitlines()
    check = subprocess.run(["nft", "-c", "-f", "-"], input=script, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def nft_accepts(script: str) -> None:
    check = subprocess.run(["nft", "-c", "-f", "-"], input=script, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr


def test_node_ports_are_taken_only_from_node_port_services() -> None:
    port = {"port": 80, "protocol": "TCP", "nodePort": 30080}
    services = [
        {
            "metadata": {"name": "np", "namespace": "ns"},
            "spec": {"type": "NodePort", "clusterIP": "10.0.0.5", "ports": [port]},
        },
        # A nodePort left on a ClusterIP Service (as after a type change) is not served.
        {
            "metadata": {"name": "ci", "namespace": "ns"},
            "spec": {"type": "ClusterIP", "clusterIP": "10.0.0.6", "ports": [port]},
        },
    ]
    assert [(p.name, p.node_port) for p in service_ports(services, {})] == [("ns/np:", 30080), ("ns/ci:", 0)]


def test_node_ips_are_the_nodes_loopback_internal_ips() -> None:
    def node(*addresses: tuple[str, str]) -> dict[str, Any]:
        return {"status": {"addresses": [{"type": t, "address": a} for t, a in addresses]}}

    nodes = [
        node(("InternalIP", "127.9.8.2"), ("Hostname", "n2")),
        node(("InternalIP", "127.9.8.1")),
        node(("InternalIP", "192.0.2.4")),
        node(("ExternalIP", "127.9.8.3")),
        {"metadata": {"name": "no-status"}},
    ]
    assert node_ips(nodes) == ["127.9.8.1", "127.9.8.2"]


def test_node_ports_are_dnated_on_the_node_ips_and_masqueraded() -> None:
    ports = [
        ServicePort("ns/web:", "10.250.255.2", 80, "tcp", (("10.250.0.4", 8080),), 30080),
        ServicePort("ns/idle:", "10.250.255.3", 80, "tcp", (), 30081),
    ]
    lines = render_table("pykubevirt-test", "10.250.255.0/25", ports, ["127.9.8.1", "127.9.8.2"]).splitlines()
    assert "\t\tip daddr { 127.9.8.1, 127.9.8.2 } jump node-ports" in lines
    assert f'\t\ttcp dport 30080 goto {ports[0].chain} comment "ns/web:"' in lines
    # A 127/8 source cannot be answered from a pod: the host link's address stands in for it.
    assert "\t\tct status dnat ct original ip daddr { 127.9.8.1, 127.9.8.2 } masquerade" in lines
    # No endpoints: refused at once on the host, as kube-proxy does.
    assert "\t\tip daddr { 127.9.8.1, 127.9.8.2 } tcp dport 30081 reject with tcp reset" in lines
    nft_accepts("\n".join(lines) + "\n")
    # Without nodes (or node ports) there is nothing of the kind.
    assert "node-ports" not in render_table("pykubevirt-test", "10.250.255.0/25", ports)


def test_pods_get_the_same_service_chains_at_prerouting_with_masquerade() -> None:
    ports = [
        ServicePort("ns/web:http", "10.250.255.2", 80, "tcp", (("10.250.0.4", 8080), ("10.250.1.5", 8080))),
        ServicePort("ns/empty:", "10.250.255.4", 80, "tcp", ()),
    ]
    script = render_pod_table("pykubevirt-test", "10.250.255.0/25", ports)
    lines = script.splitlines()
    assert lines[:3] == ["table ip pykubevirt-test", "delete table ip pykubevirt-test", "table ip pykubevirt-test {"]
    assert "\t\ttype nat hook prerouting priority -100; policy accept;" in lines
    assert "\t\tip daddr 10.250.255.0/25 jump services" in lines
    assert "\t\tct original ip daddr 10.250.255.0/25 masquerade" in lines
    assert "\t\tmeta l4proto tcp dnat to 10.250.1.5:8080" in lines
    assert "output" not in script and "10.250.255.4" not in script
    # The host's table balances over the very same chains.
    host = render_table("pykubevirt-test", "10.250.255.0/25", ports)
    assert [line for line in lines if "dnat" in line] == [line for line in host.splitlines() if "dnat" in line]
    nft_accepts(script)
