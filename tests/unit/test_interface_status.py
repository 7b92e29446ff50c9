"""`status.interfaces` joined as KubeVirt's virt-handler does: pod-interface cache, domain NICs, guest agent and
Multus network-status. Plain data in, plain data out."""

from __future__ import annotations

from typing import Any

from pykubevirt.launcher.interface_status import (
    DomainInterface,
    GuestInterface,
    domain_interfaces,
    guest_interfaces,
    interface_statuses,
)

VMI: dict[str, Any] = {
    "spec": {
        "domain": {
            "devices": {
                "interfaces": [
                    {"name": "blue", "bridge": {}},
                    {"name": "default", "bridge": {}},
                    {"name": "masq", "masquerade": {}},
                ]
            }
        },
        "networks": [
            {"name": "blue", "multus": {"networkName": "blue-net"}},
            {"name": "default", "pod": {}},
            {"name": "masq", "multus": {"networkName": "m"}},
        ],
    }
}

XML = """<domain><devices>
  <interface type="ethernet"><mac address="0A:58:0A:F4:00:05"/><alias name="ua-default"/></interface>
  <interface type="ethernet"><mac address="02:00:00:00:00:0b"/><link state="down"/><driver name="vhost" queues="2"/>
    <alias name="ua-blue"/></interface>
  <interface type="ethernet"><mac address="02:00:00:00:00:0c"/><alias name="ua-masq"/></interface>
  <interface type="user"><mac address="52:54:00:00:00:01"/></interface>
</devices></domain>"""


def test_domain_nics_are_read_by_alias_with_mac_link_state_and_queues() -> None:
    assert domain_interfaces(XML) == [
        DomainInterface("default", "0a:58:0a:f4:00:05"),
        DomainInterface("blue", "02:00:00:00:00:0b", "down", 2),
        DomainInterface("masq", "02:00:00:00:00:0c"),
    ]


def test_the_pod_network_comes_first_with_the_pod_ip_and_guest_agent_data_joins_by_mac() -> None:
    guest = [
        GuestInterface("eth0", "0a:58:0a:f4:00:05", ("10.244.0.5", "fe80::1")),
        GuestInterface("eth1", "02:00:00:00:00:0b", ("192.168.1.7", "fd00::7")),
        GuestInterface("eth2", "02:00:00:00:00:0c", ("10.0.2.2",)),
        GuestInterface("lo", "00:00:00:00:00:00", ("127.0.0.1",)),
        GuestInterface("docker0", "02:42:00:00:00:01", ("172.17.0.1",)),
    ]
    statuses = interface_statuses(
        VMI,
        domain_interfaces(XML),
        {"default": ["10.244.0.5"], "masq": ["10.244.0.9"]},
        guest,
        {"blue": "pod16477688c0e"},
    )
    assert statuses == [
        {
            "name": "default", "mac": "0a:58:0a:f4:00:05", "linkState": "up", "queueCount": 1,
            "interfaceName": "eth0", "ipAddress": "10.244.0.5", "ipAddresses": ["10.244.0.5"],
            "podInterfaceName": "eth0", "infoSource": "domain, guest-agent",
        },
        {
            "name": "blue", "mac": "02:00:00:00:00:0b", "linkState": "down", "queueCount": 2,
            "interfaceName": "eth1", "ipAddress": "192.168.1.7", "ipAddresses": ["192.168.1.7", "fd00::7"],
            "podInterfaceName": "pod16477688c0e", "infoSource": "domain, guest-agent, multus-status",
        },
        {
            "name": "masq", "mac": "02:00:00:00:00:0c", "linkState": "up", "queueCount": 1,
            "interfaceName": "eth2", "ipAddress": "10.244.0.9", "ipAddresses": ["10.244.0.9"],
            "infoSource": "domain, guest-agent",
        },
        {
            "interfaceName": "docker0", "mac": "02:42:00:00:00:01", "infoSource": "guest-agent",
            "ipAddress": "172.17.0.1", "ipAddresses": ["172.17.0.1"],
        },
    ]  # fmt: skip


def test_without_domain_or_agent_only_the_cache_speaks() -> None:
    statuses = interface_statuses(VMI, [], {"default": ["10.0.2.15"]})
    assert statuses[0] == {
        "name": "default",
        "ipAddress": "10.0.2.15",
        "ipAddresses": ["10.0.2.15"],
        "podInterfaceName": "eth0",
    }
    assert statuses[1] == {"name": "blue"}


def test_the_guest_agent_answer_libvirt_gives_becomes_guest_interfaces() -> None:
    answer = {
        "lo": {"hwaddr": "00:00:00:00:00:00", "addrs": [{"addr": "127.0.0.1", "prefix": 8, "type": 0}]},
        "eth0": {
            "hwaddr": "0A:58:0A:F4:00:05",
            "addrs": [{"addr": "10.244.0.5", "prefix": 24, "type": 0}, {"addr": "fe80::1", "prefix": 64, "type": 1}],
        },
    }
    assert guest_interfaces(answer) == [
        GuestInterface("eth0", "0a:58:0a:f4:00:05", ("10.244.0.5", "fe80::1")),
        GuestInterface("lo", "00:00:00:00:00:00", ("127.0.0.1",)),
    ]


def test_a_dual_stack_masquerade_interface_reports_both_pod_ips_never_the_guests_private_ones() -> None:
    vmi: dict[str, Any] = {
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}],
        }
    }
    domain = [DomainInterface("default", "0a:58:0a:f4:00:05")]
    guest = [GuestInterface("eth0", "0a:58:0a:f4:00:05", ("10.0.2.2", "fd10:0:2::2", "fe80::858:aff:fef4:5"))]
    (status,) = interface_statuses(vmi, domain, {"default": ["10.244.0.5", "fd70:6b76:80::5"]}, guest)
    # ipAddress stays the IPv4 pod IP; ipAddresses lists the pod's IPv6 too, as KubeVirt reports a dual-stack pod.
    assert status["ipAddress"] == "10.244.0.5"
    assert status["ipAddresses"] == ["10.244.0.5", "fd70:6b76:80::5"]
    assert status["infoSource"] == "domain, guest-agent"
