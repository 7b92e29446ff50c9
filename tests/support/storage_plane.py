"""The embedded storage in the caller's event loop: a node agent, the storage controller and the scheduler against a
real API server process, for DataVolume and upload tests and bench/storage.py; what those tests share."""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.client.api import KubeClient
from pykubevirt.client.errors import ApiError, NotFound
from pykubevirt.client.resources import NAMESPACES, NODES, PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES
from pykubevirt.node.agent import NodeAgent
from pykubevirt.node.image_store import ImageStore
from pykubevirt.node.scheduler import Scheduler
from pykubevirt.storage.app import StorageController
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.node_agent_process import kill_leftover_pods


@dataclass
class StoragePlane:
    admin: KubeClient
    images: ImageStore


@contextlib.asynccontextmanager
async def storage_plane(server: APIServerProcess, root: Path, node: str) -> AsyncIterator[StoragePlane]:
    """Node `node` (data under `root/node`, images under `root/images`) and volumes under `root/volumes`."""
    admin = client_for(server)
    images = ImageStore(root / "images")
    agent = NodeAgent(client_for(server), node, root / "node", images, heartbeat_interval=1.0)
    storage = StorageController(client_for(server, "virt-controller"), root / "volumes")
    scheduler = Scheduler(client_for(server, "scheduler"))
    tasks: list[asyncio.Task[None]] = []
    try:
        await agent.start()
        tasks = [asyncio.create_task(storage.run()), asyncio.create_task(scheduler.run())]
        informers = [*storage.informers, *scheduler.controller.informers]
        await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), 30)
        yield StoragePlane(admin, images)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await agent.stop()
        kill_leftover_pods(root / "node")
        with contextlib.suppress(NotFound):
            await admin.delete(NODES, node)
        for client in (storage.client, scheduler.client, agent.client, admin):
            await client.close()


@contextlib.asynccontextmanager
async def storage_on_fake_nodes(
    server: APIServerProcess, volumes: Path, nodes: list[dict[str, Any]], component: str = ""
) -> AsyncIterator[KubeClient]:
    """The storage controller (as `component`, admin when empty) and the scheduler, nodes that only hold pods."""
    admin = client_for(server)
    for node in nodes:
        with contextlib.suppress(ApiError):
            await admin.create(NODES, node)
    storage = StorageController(client_for(server, component), volumes)
    scheduler = Scheduler(client_for(server, "scheduler"))
    tasks = [asyncio.create_task(storage.run()), asyncio.create_task(scheduler.run())]
    informers = [*storage.informers, *scheduler.controller.informers]
    await asyncio.wait_for(asyncio.gather(*(i.synced.wait() for i in informers)), 20)
    try:
        yield admin
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in (storage.client, scheduler.client, admin):
            await client.close()


@dataclass
class Env:
    """A storage test module's API server, its admin client, root directory and node image store."""

    server: APIServerProcess
    admin: KubeClient
    root: Path
    images: ImageStore

    async def namespace(self) -> str:
        name = f"dvi-{uuid.uuid4().hex[:6]}"
        await self.admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        return name


@contextlib.asynccontextmanager
async def storage_env(root: Path, node: str) -> AsyncIterator[Env]:
    """An API server of the test module's own under `root`, with the embedded storage on one node."""
    server = APIServerProcess(root / "apiserver").start()
    try:
        async with storage_plane(server, root, node) as plane:
            yield Env(server, plane.admin, root, plane.images)
    finally:
        server.stop()


async def volume_dir(admin: KubeClient, namespace: str, claim: str) -> Path:
    pvc = await admin.get(PERSISTENT_VOLUME_CLAIMS, claim, namespace)
    pv = await admin.get(PERSISTENT_VOLUMES, pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"])


def pattern(size: int) -> bytes:
    """Data that is not all zeros in every MiB, so a sparse copy still has to carry it."""
    block = bytes(range(256)) * 4096
    return (block * (size // len(block) + 1))[:size]


def tarball(files: dict[str, bytes], mode: str = "w") -> bytes:
    """A tar of `files` (name → data, mode 0640), compressed as `mode` says (`w:gz`, `w:xz`)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode) as archive:  # type: ignore[call-overload]
        for name, data in files.items():
            member = tarfile.TarInfo(name)
            member.size, member.mode = len(data), 0o640
            archive.addfile(member, io.BytesIO(data))
    return out.getvalue()
