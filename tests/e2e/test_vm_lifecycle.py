"""Real guests through the whole stack: VM → virt-controller → scheduler → node agent → virt-launcher (QEMU under
qemu:///embed, TCG here) → virt-handler → VMI status. Every component is its own process."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from pykubevirt.client.resources import VIRTUAL_MACHINES
from tests.paths import REPO
from tests.support.cluster import ClusterView

pytestmark = pytest.mark.e2e

BOOTED = "pykubevirt-guest: booted"
DEMO = yaml.safe_load((REPO / "examples" / "vm-demo.yaml").read_text())


def demo_vm(
    name: str, *, run_strategy: str = "Always", user_data: str | None = None, grace: int = 10
) -> dict[str, Any]:
    """The demo VM renamed, with its own user-data and grace period."""
    vm = copy.deepcopy(DEMO)
    vm["metadata"] = {"name": name}
    vm["spec"]["runStrategy"] = run_strategy
    template = vm["spec"]["template"]
    template["metadata"]["labels"]["kubevirt.io/domain"] = name
    template["spec"]["terminationGracePeriodSeconds"] = grace
    if user_data is not None:
        for volume in template["spec"]["volumes"]:
            if "cloudInitNoCloud" in volume:
                volume["cloudInitNoCloud"]["userData"] = user_data
    return vm


async def test_always_vm_boots_and_cloud_init_reaches_the_guest(kube: ClusterView) -> None:
    ns = await kube.namespace()
    user_data = "#cloud-config\nhostname: e2e-host\nruncmd:\n  - echo marker-from-user-data\n"
    await kube.client.create(VIRTUAL_MACHINES, demo_vm("booter", user_data=user_data), ns)
    vmi = await kube.wait_vmi(ns, "booter", "Running")
    await kube.wait_vm(ns, "booter", "Running")
    assert vmi["status"]["nodeName"] == kube.node.name
    assert vmi["status"]["interfaces"][0]["ipAddress"] == "10.0.2.15"
    pod = await kube.launcher_pod(vmi)
    console = await kube.wait_serial(kube.node, pod, vmi, "marker-from-user-data")
    assert BOOTED in console
    assert "pykubevirt-guest: hostname e2e-host" in console
