"""virt-handler's KSM handling against a real API server of the module's own (the KubeVirt CR is cluster-wide): the
KubeVirt CR's ksmConfiguration selects the node, the node's label and annotation say what the handler did, and the
kernel's knobs are a directory of the test's own, so the host's KSM is never touched."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from pykubevirt.client.api import KubeClient
from pykubevirt.client.resources import KUBEVIRTS, NODES
from pykubevirt.handler.app import HandlerOptions, VirtHandler
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

NODE = "ksm-node"


@dataclass
class Env:
    admin: KubeClient
    ksm_dir: Path
    handler: VirtHandler


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[APIServerProcess]:
    process = APIServerProcess(tmp_path_factory.mktemp("ksm") / "data").start()
    yield process
    process.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(server: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    root = tmp_path_factory.mktemp("ksm-node")
    ksm_dir = root / "sys-kernel-mm-ksm"
    ksm_dir.mkdir()
    for name, value in (("run", "0"), ("pages_to_scan", "100"), ("sleep_millisecs", "20")):
        (ksm_dir / name).write_text(f"{value}\n")
    admin = client_for(server)
    # Free memory counts as pressure on this node (all of it would have to be free not to be), so KSM starts.
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {"ksm": "on"},
            "annotations": {"kubevirt.io/ksm-free-percent-override": "1.0"},
        },
    }
    await admin.create(NODES, node)
    kubevirt = {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"ksmConfiguration": {"nodeLabelSelector": {"matchLabels": {"ksm": "on"}}}}},
    }
    await admin.create(KUBEVIRTS, kubevirt, "kubevirt")
    options = HandlerOptions(
        node=NODE, pods_dir=root / "pods", state_dir=root / "state", node_ip="127.0.0.7", ksm_dir=ksm_dir
    )
    handler = VirtHandler(client_for(server, "virt-handler"), options)
    task = asyncio.create_task(handler.run())
    try:
        yield Env(admin, ksm_dir, handler)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await handler.client.close()
        await admin.close()


async def node_says(env: Env, enabled: str, managed: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        node = await env.admin.get(NODES, NODE)
        meta = node["metadata"]
        said = (
            (meta.get("labels") or {}).get("kubevirt.io/ksm-enabled"),
            (meta.get("annotations") or {}).get("kubevirt.io/ksm-handler-managed"),
        )
        return node if said == (enabled, managed) else None

    result: dict[str, Any] = await eventually(probe, timeout=20, interval=0.2)
    return result


def knob(env: Env, name: str) -> str:
    return (env.ksm_dir / name).read_text().strip()


async def select(env: Env, value: str) -> None:
    patch = {"spec": {"configuration": {"ksmConfiguration": {"nodeLabelSelector": {"matchLabels": {"ksm": value}}}}}}
    await env.admin.patch(KUBEVIRTS, "kubevirt", patch, "kubevirt")


async def test_a_selected_node_under_pressure_gets_ksm_started_and_stopped_when_it_leaves_the_selection(
    env: Env,
) -> None:
    await node_says(env, "true", "true")
    assert knob(env, "run") == "1"
    assert knob(env, "pages_to_scan") == "100"  # upstream's first scan size
    assert int(knob(env, "sleep_millisecs")) >= 10

    # The selection moves away: the handler stops the KSM it started, and says so.
    await select(env, "elsewhere")
    await node_says(env, "false", "false")
    assert knob(env, "run") == "0"


async def test_ksm_started_by_someone_else_is_left_running_outside_the_selection(env: Env) -> None:
    await select(env, "elsewhere")
    await node_says(env, "false", "false")
    (env.ksm_dir / "run").write_text("1\n")  # the administrator's own KSM
    assert env.handler.ksm is not None
    assert await env.handler.ksm.spin() is False  # a pass of the loop, awaited: the node is not selected
    assert knob(env, "run") == "1"
    await node_says(env, "false", "false")
    (env.ksm_dir / "run").write_text("0\n")
