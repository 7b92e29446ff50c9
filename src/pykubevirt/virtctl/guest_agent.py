"""virtctl guestosinfo, userlist and fslist: the guest agent's answers, printed as 2-space-indented JSON.

Upstream: pkg/virtctl/vm/{guestosinfo,user_list,fs_list}.go.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any, Final

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError
from pykubevirt.virtctl.client import VirtctlError, error_message, subresource_path

# command → (subresource, help, what the error says it was doing).
COMMANDS: Final = {
    "guestosinfo": ("guestosinfo", "Return guest agent info about operating system.", "getting guestosinfo of"),
    "userlist": ("userlist", "Return full list of logged in users on a guest machine.", "listing users of"),
    "fslist": (
        "filesystemlist",
        "Return full list of filesystems available on the guest machine.",
        "listing filesystems of",
    ),
}


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    for name, (_, help_text, _) in COMMANDS.items():
        command(name, help_text, "name")


async def run(api: KubeClient, namespace: str, command: str, name: str) -> None:
    subresource, _, doing = COMMANDS[command]
    try:
        body: Any = await api.request("GET", subresource_path(namespace, "virtualmachineinstances", name, subresource))
    except (ApiError, OSError) as exc:
        message = error_message(exc)
        raise VirtctlError(f"Error {doing} VirtualMachineInstance {name}, {message}") from exc
    print(json.dumps(body, indent=2))
