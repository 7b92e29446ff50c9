"""`virtctl adm log-verbosity` against the API server's KubeVirt object, and virt-controller following the level it
sets (its process's log level)."""

from __future__ import annotations

import logging
from pathlib import Path

from pykubevirt.client.resources import KUBEVIRTS
from tests.integration.test_subresources import virtctl
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import start_control_plane
from tests.support.waiting import eventually

KUBEVIRT = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"}, "spec": {}}


async def test_virtctl_shows_sets_and_resets_the_levels_virt_controller_follows(
    fresh_apiserver: APIServerProcess, tmp_path: Path
) -> None:
    async def run(*args: str) -> tuple[int, str, str]:
        return await virtctl(fresh_apiserver, tmp_path, "adm", "log-verbosity", *args)

    assert await run("--all") == (1, "", "could not detect a KubeVirt installation\n")
    plane = await start_control_plane(fresh_apiserver)
    before = logging.getLogger().level
    try:
        await plane.admin.create(KUBEVIRTS, KUBEVIRT, "kubevirt")
        assert await run("--virt-handler", "--virt-launcher") == (0, "virt-handler=2\nvirt-launcher=2\n", "")
        assert await run("--virt-controller=5", "--virt-launcher=3") == (
            0,
            "successfully set/reset the log verbosity\n",
            "",
        )
        stored = await plane.admin.get(KUBEVIRTS, "kubevirt", "kubevirt")
        levels = stored["spec"]["configuration"]["developerConfiguration"]["logVerbosity"]
        assert levels == {"virtController": 5, "virtLauncher": 3}
        code, out, _ = await run("--all")
        assert code == 0 and out.splitlines() == [
            "virt-api=2",
            "virt-controller=5",
            "virt-handler=2",
            "virt-launcher=3",
            "virt-operator=2",
        ]
        # virt-controller writes its debug lines from verbosity 3 on.
        await eventually(lambda: logging.getLogger().level == logging.DEBUG)
        assert plane.controller.config.verbosity("virtLauncher") == 3

        assert await run("--reset") == (0, "successfully set/reset the log verbosity\n", "")
        await eventually(lambda: logging.getLogger().level == logging.INFO)
        code, _, err = await run("--virt-api", "--virt-handler=4")
        assert (code, err) == (1, "only show or set is allowed\n")
        code, out, err = await run()
        assert code == 1 and err == "no flag specified - expecting at least one flag\n" and "--virt-api" in out
    finally:
        logging.getLogger().setLevel(before)
        await plane.stop()
