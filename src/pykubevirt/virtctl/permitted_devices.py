"""`virtctl permitted-devices` (KubeVirt's pkg/virtctl/configuration): the host and mediated devices the namespace's
KubeVirt object lets VMIs request."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import KUBEVIRTS
from pykubevirt.virtctl.client import VirtctlError


def device_lines(kubevirt: Mapping[str, Any]) -> str:
    """KubeVirt's text: the PCI host devices' and the mediated devices' resource names, comma-separated."""
    configuration = (kubevirt.get("spec") or {}).get("configuration") or {}
    permitted = configuration.get("permittedHostDevices") or {}
    hosts = ", ".join(str(d.get("resourceName", "")) for d in permitted.get("pciHostDevices") or [])
    gpus = ", ".join(str(d.get("resourceName", "")) for d in permitted.get("mediatedDevices") or [])
    return f"Permitted Devices: \nHost Devices: \n{hosts} \nGPU Devices: \n{gpus}\n"


async def run(client: KubeClient, namespace: str, args: argparse.Namespace) -> None:
    found = (await client.list(KUBEVIRTS, namespace)).get("items") or []
    if not found:
        # Go's %q of the namespace.
        raise VirtctlError(f"no KubeVirt resource in {json.dumps(namespace)} namespace")
    print(device_lines(found[0]), end="")
