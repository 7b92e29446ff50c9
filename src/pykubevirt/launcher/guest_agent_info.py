"""What the guest agent says, in KubeVirt's shapes. Pure: libvirt's typed guest info and raw agent replies in, the
`guestosinfo`/`userlist`/`filesystemlist` bodies and the launcher's status fields out.

Upstream: pkg/virt-launcher/virtwrap/agent-poller (agent_poller.go converters, agent_parser.go) and
manager.go GetGuestInfo/GetUsers/GetFilesystems.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

AGENT_CHANNEL: Final = "org.qemu.guest_agent.0"
# GetGuestInfo lists at most this many filesystems and users (GetFS(10), GetUsers(10)).
GUEST_INFO_LIMIT: Final = 10

# libvirt guestInfo "os.*" keys → VirtualMachineInstanceGuestOSInfo fields.
_OS_FIELDS: Final = (
    ("name", "name"),
    ("kernel-release", "kernelRelease"),
    ("version", "version"),
    ("pretty-name", "prettyName"),
    ("version-id", "versionId"),
    ("kernel-version", "kernelVersion"),
    ("machine", "machine"),
    ("id", "id"),
)


@dataclass
class AgentData:
    """The launcher's store of the agent's answers (KubeVirt's AsyncAgentStore)."""

    version: str = ""
    supported_commands: list[dict[str, Any]] = field(default_factory=list)
    os_info: dict[str, str] = field(default_factory=dict)
    hostname: str = ""
    timezone: tuple[str, int] = ("", 0)
    users: list[dict[str, Any]] = field(default_factory=list)
    interfaces: list[dict[str, Any]] = field(default_factory=list)
    filesystems: list[dict[str, Any]] = field(default_factory=list)
    # "frozen" while the guest's filesystems are frozen (guest-fsfreeze-status), else "".
    fs_freeze_status: str = ""


def channel_connected(domain_xml: str) -> bool:
    """Whether the domain's guest agent channel is `connected` (libvirt tracks the guest opening its port)."""
    if not domain_xml:
        return False
    root = ET.fromstring(domain_xml)
    for target in root.iterfind("./devices/channel/target"):
        if target.get("name") == AGENT_CHANNEL:
            return target.get("state") == "connected"
    return False


def _return_value(reply: str) -> Any:
    """The `return` member of an agent reply (agent_parser's stripAgentResponse)."""
    parsed = json.loads(reply)
    if not isinstance(parsed, dict) or "return" not in parsed:
        raise ValueError(f"not a guest agent reply: {reply[:200]}")
    return parsed["return"]


def parse_agent_info(reply: str) -> tuple[str, list[dict[str, Any]]]:
    """guest-info: the agent's version and its commands as GuestAgentCommandInfo{name, enabled}."""
    value = _return_value(reply)
    commands = []
    for command in value.get("supported_commands") or []:
        entry: dict[str, Any] = {"name": str(command.get("name", ""))}
        if command.get("enabled"):
            entry["enabled"] = True
        commands.append(entry)
    return str(value.get("version") or ""), commands


def parse_filesystems(reply: str) -> list[dict[str, Any]]:
    """guest-get-fsinfo as api.Filesystem entries (name, mountpoint, type, used/total bytes, disks)."""
    filesystems = []
    for fs in _return_value(reply) or []:
        disks = [
            {"serial": str(d.get("serial") or ""), "busType": str(d.get("bus-type") or "")}
            for d in fs.get("disk") or []
        ]
        filesystems.append(
            {
                "name": str(fs.get("name") or ""),
                "mountpoint": str(fs.get("mountpoint") or ""),
                "type": str(fs.get("type") or ""),
                "usedBytes": int(fs.get("used-bytes") or 0),
                "totalBytes": int(fs.get("total-bytes") or 0),
                "disk": disks,
            }
        )
    return filesystems


def _count(info: Mapping[str, Any], key: str) -> int:
    try:
        return int(info.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def os_info(info: Mapping[str, Any]) -> dict[str, str]:
    """libvirt's `os.*` typed parameters as VirtualMachineInstanceGuestOSInfo (empty fields left out)."""
    result = {}
    for key, name in _OS_FIELDS:
        value = info.get(f"os.{key}")
        if value:
            result[name] = str(value)
    return result


def users(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """libvirt's `user.N.*` as api.User {name, domain, loginTime (seconds, a float as upstream keeps it)}."""
    result = []
    for index in range(_count(info, "user.count")):
        prefix = f"user.{index}."
        entry: dict[str, Any] = {"name": str(info.get(prefix + "name") or "")}
        if info.get(prefix + "domain"):
            entry["domain"] = str(info[prefix + "domain"])
        # libvirt reports milliseconds since the epoch; KubeVirt passes the number through as LoginTime.
        entry["loginTime"] = float(info.get(prefix + "login-time") or 0)
        result.append(entry)
    return result


def interfaces(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """libvirt's `if.N.*` as api.InterfaceStatus without loopback; IPv4 preferred as the main address."""
    result = []
    for index in range(_count(info, "if.count")):
        prefix = f"if.{index}."
        name = str(info.get(prefix + "name") or "")
        if name == "lo":
            continue
        ips: list[str] = []
        main = ""
        for addr in range(_count(info, prefix + "addr.count")):
            ip = str(info.get(f"{prefix}addr.{addr}.addr") or "")
            if not ip:
                continue
            if info.get(f"{prefix}addr.{addr}.type") == "ipv4" and not main:
                main = ip
            ips.append(ip)
        entry: dict[str, Any] = {"interfaceName": name, "mac": str(info.get(prefix + "hwaddr") or "")}
        if ips:
            entry["ipAddress"] = main or ips[0]
            entry["ipAddresses"] = ips
        result.append(entry)
    return result


def apply_guest_info(data: AgentData, info: Mapping[str, Any]) -> None:
    """Store one libvirt guestInfo answer (interfaces, OS, hostname, timezone, users) as fetchAndStoreGuestInfo."""
    data.interfaces = interfaces(info)
    data.os_info = os_info(info)
    data.hostname = str(info.get("hostname") or "")
    data.timezone = (str(info.get("timezone.name") or ""), int(info.get("timezone.offset") or 0))
    data.users = users(info)


def guest_agent_info(data: AgentData) -> dict[str, Any]:
    """The guestosinfo body: VirtualMachineInstanceGuestAgentInfo (Go's omitempty on every field but os/fsInfo)."""
    body: dict[str, Any] = {}
    if data.version:
        body["guestAgentVersion"] = data.version
    if data.supported_commands:
        body["supportedCommands"] = data.supported_commands
    if data.hostname:
        body["hostname"] = data.hostname
    body["os"] = dict(data.os_info)
    body["timezone"] = f"{data.timezone[0]}, {data.timezone[1]}"
    user_list = [_guest_user(u) for u in data.users[:GUEST_INFO_LIMIT]]
    if user_list:
        body["userList"] = user_list
    disks = [_guest_filesystem(fs) for fs in data.filesystems[:GUEST_INFO_LIMIT]]
    body["fsInfo"] = {"disks": disks} if disks else {}
    return body


def _guest_user(user: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"userName": user["name"]}
    if user.get("domain"):
        entry["domain"] = user["domain"]
    if user.get("loginTime"):
        entry["loginTime"] = user["loginTime"]
    return entry


def _guest_filesystem(fs: Mapping[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "diskName": fs["name"],
        "mountPoint": fs["mountpoint"],
        "fileSystemType": fs["type"],
        "usedBytes": fs["usedBytes"],
        "totalBytes": fs["totalBytes"],
    }
    disks = [{k: v for k, v in d.items() if v or k == "busType"} for d in fs.get("disk") or []]
    if disks:
        entry["disk"] = disks
    return entry


def user_list(data: AgentData) -> dict[str, Any]:
    """The userlist body: VirtualMachineInstanceGuestOSUserList, every user."""
    return {"metadata": {}, "items": [_guest_user(u) for u in data.users]}


def filesystem_list(data: AgentData) -> dict[str, Any]:
    """The filesystemlist body: VirtualMachineInstanceFileSystemList, every filesystem."""
    return {"metadata": {}, "items": [_guest_filesystem(fs) for fs in data.filesystems]}


def status_fields(connected: bool, data: AgentData) -> dict[str, Any]:
    """What a launcher status carries for virt-handler: the channel state, the agent's commands and OS (its NICs go
    into the launcher's status.interfaces, launcher/interface_status.py)."""
    fields: dict[str, Any] = {"connected": connected}
    if data.supported_commands:
        fields["supportedCommands"] = data.supported_commands
    if data.version:
        fields["version"] = data.version
    if data.os_info:
        fields["osInfo"] = dict(data.os_info)
    if data.fs_freeze_status:
        fields["fsFreezeStatus"] = data.fs_freeze_status
    return fields


def parse_fsfreeze_status(reply: str) -> str:
    """ "frozen" or "thawed" from the agent's guest-fsfreeze-status reply."""
    status = _return_value(reply)
    if status not in ("frozen", "thawed"):
        raise ValueError(f"unexpected fsfreeze status {status!r}")
    return str(status)
