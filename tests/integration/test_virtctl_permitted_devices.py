"""`virtctl permitted-devices` against the API server: the KubeVirt object of the namespace, KubeVirt's lines."""

from __future__ import annotations

from pathlib import Path

from pykubevirt.client.resources import KUBEVIRTS
from tests.integration.test_subresources import virtctl
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for


async def test_the_permitted_host_and_mediated_devices_are_listed(
    fresh_apiserver: APIServerProcess, tmp_path: Path
) -> None:
    assert await virtctl(fresh_apiserver, tmp_path, "-n", "kubevirt", "permitted-devices") == (
        1,
        "",
        'no KubeVirt resource in "kubevirt" namespace\n',
    )
    permitted = {
        "pciHostDevices": [
            {"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4"},
            {"pciVendorSelector": "8086:6F54", "resourceName": "intel.com/qat"},
        ],
        "mediatedDevices": [{"mdevNameSelector": "GRID T4-1Q", "resourceName": "nvidia.com/GRID_T4-1Q"}],
    }
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"permittedHostDevices": permitted}},
    }
    admin = client_for(fresh_apiserver)
    try:
        await admin.create(KUBEVIRTS, kubevirt, "kubevirt")
    finally:
        await admin.close()
    assert await virtctl(fresh_apiserver, tmp_path, "-n", "kubevirt", "permitted-devices") == (
        0,
        "Permitted Devices: \nHost Devices: \nnvidia.com/TU104GL_Tesla_T4, intel.com/qat \n"
        "GPU Devices: \nnvidia.com/GRID_T4-1Q\n",
        "",
    )
