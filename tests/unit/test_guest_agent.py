"""The guest agent in plain data: libvirt's guest info and raw agent replies → KubeVirt's bodies and launcher status;
the launcher status → AgentConnected, AgentVersionNotSupported, AccessCredentialsSynchronized, guestOSInfo and the
agent's part of status.interfaces; the qemuGuestAgent credentials read from their mounted Secrets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from pykubevirt.handler.guest_agent_status import REQUIRED_COMMANDS, SSH_COMMANDS, agent_status, unsupported_reason
from pykubevirt.launcher import access_credentials, interface_status
from pykubevirt.launcher import guest_agent_info as info
from pykubevirt.launcher.guest_agent_poller import GuestAgentPoller

NOW = "2026-12-02T03:00:00Z"

# What libvirt's guestInfo(INTERFACES|OS|HOSTNAME|TIMEZONE|USERS) returned for the demo guest.
LIBVIRT_GUEST_INFO: dict[str, Any] = {
    "user.count": 1,
    "user.0.name": "root",
    "user.0.login-time": 1764644400123,
    "os.id": "pykubevirt-guest",
    "os.name": "pykubevirt guest",
    "os.pretty-name": "pykubevirt demo guest 1 (busybox)",
    "os.version": "1 (busybox)",
    "os.version-id": "1",
    "os.kernel-release": "6.1.0-57-amd64",
    "os.kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.192-3 (2026-11-26)",
    "os.machine": "x86_64",
    "timezone.name": "UTC",
    "timezone.offset": 0,
    "hostname": "agenttest",
    "if.count": 2,
    "if.0.name": "lo",
    "if.0.hwaddr": "00:00:00:00:00:00",
    "if.0.addr.count": 1,
    "if.0.addr.0.type": "ipv4",
    "if.0.addr.0.addr": "127.0.0.1",
    "if.0.addr.0.prefix": 8,
    "if.1.name": "eth0",
    "if.1.hwaddr": "52:54:00:12:34:56",
    "if.1.addr.count": 2,
    "if.1.addr.0.type": "ipv6",
    "if.1.addr.0.addr": "fe80::5054:ff:fe12:3456",
    "if.1.addr.0.prefix": 64,
    "if.1.addr.1.type": "ipv4",
    "if.1.addr.1.addr": "10.0.2.2",
    "if.1.addr.1.prefix": 24,
}

GUEST_INFO_REPLY = json.dumps(
    {
        "return": {
            "version": "7.2.22",
            "supported_commands": [
                {"enabled": True, "name": name, "success-response": True}
                for name in (*REQUIRED_COMMANDS, *SSH_COMMANDS)
            ]
            + [{"enabled": False, "name": "guest-exec", "success-response": True}],
        }
    }
)

FSINFO_REPLY = json.dumps(
    {
        "return": [
            {
                "name": "vda1",
                "mountpoint": "/",
                "type": "ext4",
                "used-bytes": 1024,
                "total-bytes": 4096,
                "disk": [{"serial": "abc", "bus-type": "virtio", "bus": 0, "target": 0, "unit": 0}],
            }
        ]
    }
)


def agent_data() -> info.AgentData:
    data = info.AgentData()
    data.version, data.supported_commands = info.parse_agent_info(GUEST_INFO_REPLY)
    data.filesystems = info.parse_filesystems(FSINFO_REPLY)
    info.apply_guest_info(data, LIBVIRT_GUEST_INFO)
    return data


def test_channel_state_from_the_domain_xml() -> None:
    xml = (
        "<domain><devices><channel type='unix'><source mode='bind' path='/x'/>"
        "<target type='virtio' name='org.qemu.guest_agent.0' state='{}'/></channel></devices></domain>"
    )
    assert info.channel_connected(xml.format("connected"))
    assert not info.channel_connected(xml.format("disconnected"))
    assert not info.channel_connected("<domain><devices/></domain>")
    assert not info.channel_connected("")


def test_agent_replies_parse_as_upstream() -> None:
    version, commands = info.parse_agent_info(GUEST_INFO_REPLY)
    assert version == "7.2.22"
    assert commands[0] == {"name": "guest-ping", "enabled": True}
    assert commands[-1] == {"name": "guest-exec"}  # Go's omitempty drops enabled=false
    assert info.parse_filesystems(FSINFO_REPLY) == [
        {
            "name": "vda1",
            "mountpoint": "/",
            "type": "ext4",
            "usedBytes": 1024,
            "totalBytes": 4096,
            "disk": [{"serial": "abc", "busType": "virtio"}],
        }
    ]


def test_libvirt_guest_info_converts_without_loopback() -> None:
    data = agent_data()
    assert data.os_info["prettyName"] == "pykubevirt demo guest 1 (busybox)"
    assert data.os_info["versionId"] == "1" and data.os_info["id"] == "pykubevirt-guest"
    assert data.hostname == "agenttest"
    assert data.timezone == ("UTC", 0)
    assert data.users == [{"name": "root", "loginTime": 1764644400123.0}]
    # IPv4 is the main address even when the guest lists IPv6 first.
    assert data.interfaces == [
        {
            "interfaceName": "eth0",
            "mac": "52:54:00:12:34:56",
            "ipAddress": "10.0.2.2",
            "ipAddresses": ["fe80::5054:ff:fe12:3456", "10.0.2.2"],
        }
    ]


def test_subresource_bodies() -> None:
    data = agent_data()
    body = info.guest_agent_info(data)
    assert list(body) == [
        "guestAgentVersion",
        "supportedCommands",
        "hostname",
        "os",
        "timezone",
        "userList",
        "fsInfo",
    ]
    assert body["timezone"] == "UTC, 0"
    assert body["os"]["name"] == "pykubevirt guest"
    assert body["userList"] == [{"userName": "root", "loginTime": 1764644400123.0}]
    assert body["fsInfo"]["disks"][0]["diskName"] == "vda1"
    assert info.user_list(data) == {"metadata": {}, "items": [{"userName": "root", "loginTime": 1764644400123.0}]}
    fs = info.filesystem_list(data)["items"][0]
    assert fs == {
        "diskName": "vda1",
        "mountPoint": "/",
        "fileSystemType": "ext4",
        "usedBytes": 1024,
        "totalBytes": 4096,
        "disk": [{"serial": "abc", "busType": "virtio"}],
    }
    empty = info.guest_agent_info(info.AgentData())
    assert empty == {"os": {}, "timezone": ", 0", "fsInfo": {}}


def vmi(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "v", "namespace": "ns"},
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            **spec,
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def launcher_status(data: info.AgentData, connected: bool = True, **extra: Any) -> dict[str, Any]:
    return {"guestAgent": info.status_fields(connected, data), **extra}


def test_agent_connected_comes_and_goes_with_the_channel() -> None:
    machine = vmi()
    result = agent_status(machine, {}, launcher_status(agent_data()), NOW)
    conditions = result.changes["conditions"]
    assert conditions[-1] == {
        "type": "AgentConnected",
        "status": "True",
        "lastProbeTime": NOW,
        "lastTransitionTime": None,
    }
    assert result.changes["guestOSInfo"]["name"] == "pykubevirt guest"
    machine["status"]["conditions"] = conditions
    machine["status"]["guestOSInfo"] = result.changes["guestOSInfo"]
    again = agent_status(machine, {}, launcher_status(agent_data()), "later")
    assert again.changes == {} and "conditions" in again.unchanged
    gone = agent_status(machine, {}, launcher_status(agent_data(), connected=False), NOW)
    assert gone.changes["conditions"] == [{"type": "Ready", "status": "True"}]
    # A launcher that could not be asked changes nothing.
    assert agent_status(machine, {}, None, NOW).changes == {}


def test_a_frozen_guest_shows_in_the_vmi_status_until_thawed() -> None:
    data = agent_data()
    data.fs_freeze_status = "frozen"
    assert info.status_fields(True, data)["fsFreezeStatus"] == "frozen"
    machine = vmi()
    frozen = agent_status(machine, {}, launcher_status(data), NOW)
    assert frozen.changes["fsFreezeStatus"] == "frozen"
    machine["status"]["fsFreezeStatus"] = "frozen"
    data.fs_freeze_status = ""
    # Thawed is no field: None asks the status patch to remove it.
    assert agent_status(machine, {}, launcher_status(data), NOW).changes["fsFreezeStatus"] is None
    assert info.parse_fsfreeze_status('{"return": "thawed"}') == "thawed"


def test_an_agent_without_the_required_commands_is_not_supported() -> None:
    data = agent_data()
    data.supported_commands = [c for c in data.supported_commands if c["name"] != "guest-get-osinfo"]
    conditions = agent_status(vmi(), {}, launcher_status(data), NOW).changes["conditions"]
    assert conditions[-1]["type"] == "AgentVersionNotSupported"
    assert conditions[-1]["reason"] == "This guest agent doesn't support required basic commands"
    ssh_vmi = vmi(
        accessCredentials=[
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": "keys"}},
                    "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}},
                }
            }
        ]
    )
    basic_only = [{"name": n, "enabled": True} for n in REQUIRED_COMMANDS]
    assert unsupported_reason(ssh_vmi, basic_only) == "This guest agent doesn't support required public key commands"
    assert unsupported_reason(ssh_vmi, agent_data().supported_commands) == ""
    probe_vmi = vmi(readinessProbe={"exec": {"command": ["true"]}})
    assert unsupported_reason(probe_vmi, agent_data().supported_commands) == (
        "This guest agent doesn't support required exec probe commands"
    )


def test_access_credentials_condition_and_events() -> None:
    machine = vmi()
    failed = agent_status(
        machine,
        {},
        launcher_status(agent_data(), accessCredential={"succeeded": False, "message": "Guest agent is offline"}),
        NOW,
    )
    condition = failed.changes["conditions"][-1]
    assert condition["type"] == "AccessCredentialsSynchronized"
    assert condition["status"] == "False" and condition["message"] == "Guest agent is offline"
    assert failed.events == [
        ("Warning", "AccessCredentialsSyncFailed", "Access credentials sync failed: Guest agent is offline")
    ]
    machine["status"]["conditions"] = failed.changes["conditions"]
    synced = agent_status(
        machine, {}, launcher_status(agent_data(), accessCredential={"succeeded": True, "message": ""}), NOW
    )
    kinds = [c["type"] for c in synced.changes["conditions"]]
    assert kinds.count("AccessCredentialsSynchronized") == 1
    assert synced.changes["conditions"][-1]["status"] == "True"
    assert synced.events == [("Normal", "AccessCredentialsSyncSuccess", "Access credentials sync successful.")]


def test_the_agents_nics_join_status_interfaces_by_mac() -> None:
    spec = {
        "spec": {
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}],
        }
    }
    domain = [interface_status.DomainInterface("default", "52:54:00:12:34:56")]
    data = agent_data()
    guest = [
        interface_status.GuestInterface(i["interfaceName"], i["mac"], tuple(i["ipAddresses"])) for i in data.interfaces
    ]
    guest.append(interface_status.GuestInterface("eth1", "52:54:00:aa:bb:cc", ("192.168.1.5",)))
    entries = interface_status.interface_statuses(spec, domain, {"default": ["10.244.0.7"]}, guest)
    # Masquerade keeps the pod IP; the guest's own 10.0.2.2 behind it does not count.
    assert entries[0]["interfaceName"] == "eth0" and entries[0]["infoSource"] == "domain, guest-agent"
    assert entries[0]["ipAddresses"] == ["10.244.0.7"]
    assert entries[1] == {
        "interfaceName": "eth1",
        "mac": "52:54:00:aa:bb:cc",
        "infoSource": "guest-agent",
        "ipAddress": "192.168.1.5",
        "ipAddresses": ["192.168.1.5"],
    }


def test_agent_credentials_from_mounted_secrets(tmp_path: Path) -> None:
    machine = vmi(
        accessCredentials=[
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": "a"}},
                    "propagationMethod": {"qemuGuestAgent": {"users": ["root", "alice"]}},
                }
            },
            {"sshPublicKey": {"source": {"secret": {"secretName": "b"}}, "propagationMethod": {"noCloud": {}}}},
            {
                "sshPublicKey": {
                    "source": {"secret": {"secretName": "c"}},
                    "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}},
                }
            },
        ]
    )
    credentials = access_credentials.agent_ssh_credentials(machine)
    assert credentials == [("a", ["root", "alice"]), ("c", ["root"])]
    mounted = tmp_path / "a-access-cred"
    (mounted / "..2026_12_02").mkdir(parents=True)
    (mounted / "key1").write_text("ssh-ed25519 AAAA one\n\n  ssh-rsa BBBB two  \n")
    (mounted / "..data").symlink_to("..2026_12_02")
    assert access_credentials.read_keys(mounted) == ["ssh-ed25519 AAAA one", "ssh-rsa BBBB two"]
    users = access_credentials.users_keys(credentials, {"a": ["k1", "k2"], "c": ["k3"]})
    assert users == {"root": ["k1", "k2", "k3"], "alice": ["k1", "k2"]}
    assert access_credentials.secret_dir_name("a") == "/var/run/kubevirt-private/secret/a-access-cred"


def test_agent_passwords_from_mounted_secrets(tmp_path: Path) -> None:
    machine = vmi(
        accessCredentials=[
            {
                "userPassword": {
                    "source": {"secret": {"secretName": "pw"}},
                    "propagationMethod": {"qemuGuestAgent": {}},
                }
            },
            {"sshPublicKey": {"source": {"secret": {"secretName": "a"}}, "propagationMethod": {"noCloud": {}}}},
        ]
    )
    assert access_credentials.agent_password_secrets(machine) == ["pw"]
    assert access_credentials.agent_ssh_credentials(machine) == []
    mounted = tmp_path / "pw-access-cred"
    mounted.mkdir()
    (mounted / "root").write_text("  s3cret\n")
    (mounted / "nobody").write_text("\n")
    assert access_credentials.read_passwords(mounted) == {"root": "s3cret"}
    command = json.loads(access_credentials.set_password_command("root", "s3cret"))
    assert command == {
        "execute": "guest-set-user-password",
        "arguments": {"username": "root", "password": "czNjcmV0", "crypted": False},
    }


class AgentChannel:
    """A domain whose agent channel the test opens; it records what the poller asks of the agent."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.listeners: list[Any] = []

    def add_agent_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    async def xml(self) -> str:
        return "<domain><devices/></domain>"  # no agent channel connected

    async def agent_command(self, command: str) -> str:
        self.asked.append(json.loads(command)["execute"])
        return GUEST_INFO_REPLY if "guest-info" in command else json.dumps({"return": []})

    async def guest_info(self) -> dict[str, Any]:
        self.asked.append("guestInfo")
        return LIBVIRT_GUEST_INFO


async def test_the_poller_asks_nobody_until_the_agents_channel_opens() -> None:
    domain = AgentChannel()
    changes: list[bool] = []
    poller = GuestAgentPoller(domain, lambda: changes.append(poller.connected))  # type: ignore[arg-type]
    poller.start()
    try:
        await asyncio.sleep(0.2)
        assert domain.asked == [] and not poller.connected
        domain.listeners[0](True)  # libvirt's agent lifecycle event
        await asyncio.sleep(0.2)
        assert sorted(domain.asked) == ["guest-get-fsinfo", "guest-info", "guestInfo"]
        assert poller.connected and changes[0] is True
        assert poller.status_fields()["osInfo"]["id"] == "pykubevirt-guest"
    finally:
        await poller.stop()
