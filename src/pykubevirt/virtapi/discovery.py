"""What the subresource group advertises: its versions, its APIResourceList and virt-api's version info."""

from __future__ import annotations

import platform
from typing import Any

from pykubevirt import __version__
from pykubevirt.api import constants as c

GROUP = c.SUBRESOURCES_GROUP
# v1 first: KubeVirt's preferred version; v1alpha3 is still served for old clients.
VERSIONS = ("v1", "v1alpha3")

# (resource/subresource, verbs) of what this virt-api serves.
SUBRESOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("virtualmachines/start", ("update",)),
    ("virtualmachines/stop", ("update",)),
    ("virtualmachines/restart", ("update",)),
    ("virtualmachines/addvolume", ("update",)),
    ("virtualmachines/removevolume", ("update",)),
    ("virtualmachines/memorydump", ("update",)),
    ("virtualmachines/removememorydump", ("update",)),
    ("virtualmachineinstances/addvolume", ("update",)),
    ("virtualmachineinstances/removevolume", ("update",)),
    ("virtualmachineinstances/pause", ("update",)),
    ("virtualmachineinstances/unpause", ("update",)),
    ("virtualmachineinstances/softreboot", ("update",)),
    ("virtualmachineinstances/reset", ("update",)),
    ("virtualmachineinstances/freeze", ("update",)),
    ("virtualmachineinstances/unfreeze", ("update",)),
    ("virtualmachineinstances/guestosinfo", ("get",)),
    ("virtualmachineinstances/userlist", ("get",)),
    ("virtualmachineinstances/filesystemlist", ("get",)),
    ("virtualmachineinstances/console", ("get",)),
    ("virtualmachineinstances/vnc", ("get",)),
    ("virtualmachineinstances/vnc/screenshot", ("get",)),
    ("virtualmachineinstances/usbredir", ("get",)),
    ("virtualmachineinstances/portforward", ("get",)),
    ("virtualmachines/expand-spec", ("get",)),
    ("virtualmachines/evacuate/cancel", ("update",)),
    ("virtualmachineinstances/evacuate/cancel", ("update",)),
    ("virtualmachines/objectgraph", ("get",)),
    ("virtualmachineinstances/objectgraph", ("get",)),
    ("expand-vm-spec", ("update",)),
)


def resource_list(version: str) -> dict[str, Any]:
    """The APIResourceList of /apis/subresources.kubevirt.io/<version> (kubectl's discovery reads it)."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{GROUP}/{version}",
        "resources": [
            {"name": name, "singularName": "", "namespaced": True, "kind": "", "verbs": list(verbs)}
            for name, verbs in SUBRESOURCES
        ],
    }


def api_group() -> dict[str, Any]:
    """The APIGroup of /apis/subresources.kubevirt.io."""
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": versions,
        "preferredVersion": versions[0],
    }


def version_info() -> dict[str, str]:
    """KubeVirt's version.Info (GET …/version); the Go toolchain fields name the Python runtime instead."""
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine or "amd64")
    return {
        "gitVersion": f"v{__version__}",
        "gitCommit": "",
        "gitTreeState": "",
        "buildDate": "",
        "goVersion": f"python{platform.python_version()}",
        "compiler": platform.python_implementation().lower(),
        "platform": f"linux/{arch}",
    }
