"""End-to-end fixtures: the demo guest image, and a whole embedded cluster of real processes with it imported."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from tests.paths import REPO
from tests.support.cluster import DEMO_IMAGE, DEMO_KERNEL_IMAGE, ClusterView, EmbeddedCluster
from tests.support.ports import free_port

SCRIPT = REPO / "scripts" / "build-guest-image.sh"
PREBUILT = REPO / "_output" / "guest" / "demo-guest.img"


@pytest.fixture(scope="session")
def guest_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image: `_output/guest/demo-guest.img` (what `make test` builds) if current, else built into a tmp dir."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is not installed: run scripts/setup-host.sh")
    if PREBUILT.exists() and PREBUILT.stat().st_mtime > SCRIPT.stat().st_mtime:
        return PREBUILT
    out = tmp_path_factory.mktemp("guest")
    result = subprocess.run([str(SCRIPT), str(out)], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        pytest.fail(f"build-guest-image.sh failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def images_dir(tmp_path_factory: pytest.TempPathFactory, guest_image: Path) -> Path:
    """A node image store holding the demo guest under its containerDisk reference, and its kernel and initrd as a
    kernel-boot image (DEMO_KERNEL_IMAGE), imported the way users do it."""
    store = tmp_path_factory.mktemp("images")
    command = pykubevirt_argv("image", "import", DEMO_IMAGE, str(guest_image), "--images-dir", str(store))
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    env = {**os.environ, "PYKUBEVIRT": " ".join(pykubevirt_argv()), "KERNEL_IMAGE": DEMO_KERNEL_IMAGE}
    script = [str(REPO / "scripts" / "import-kernel-image.sh"), str(guest_image), "--images-dir", str(store)]
    subprocess.run(script, check=True, capture_output=True, timeout=60, env=env)
    return store


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images_dir: Path) -> Iterator[EmbeddedCluster]:
    """One embedded cluster per test module; tests use their own namespaces."""
    root = tmp_path_factory.mktemp("cluster")
    running = EmbeddedCluster.start(root, images_dir)
    yield running
    running.stop()


@pytest.fixture
async def kube(cluster: EmbeddedCluster) -> AsyncIterator[ClusterView]:
    view = ClusterView(cluster)
    await view.wait_ready()
    yield view
    await view.close()


# ------------------------------------------------------------------------------------------------ `pykubevirt up`


@dataclass
class UpCluster:
    """A cluster started with `pykubevirt up` in a data dir of its own, and the CLIs as users run them."""

    data_dir: Path
    listen: str
    home: Path

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "apiserver" / "kubeconfig"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PYKUBEVIRT_"))}
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            HOME=str(self.home),
            PYKUBEVIRT_DATA_DIR=str(self.data_dir),
            PYKUBEVIRT_LISTEN=self.listen,
            PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        )
        return env

    def run(self, *argv: str, check: bool = True, timeout: float = 120, stdin: str | None = None) -> Completed:
        """A command line (`kubectl …`, `virtctl …`, `pykubevirt …`) as a user types it, with this cluster's env."""
        result = subprocess.run(
            list(argv), env=self.env(), capture_output=True, text=True, timeout=timeout, input=stdin, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result

    def jsonpath(self, kind: str, name: str, path: str) -> str:
        """`kubectl get KIND NAME -o jsonpath=PATH`, or "" while the object does not exist."""
        result = self.run("kubectl", "get", kind, name, "-o", f"jsonpath={path}", check=False)
        return result.stdout if result.returncode == 0 else ""

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads((self.data_dir / "run" / "state.json").read_text())
        return state


def wait_for(probe: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    """Poll `probe` (each poll runs commands, so not too often) until it holds; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


Completed = subprocess.CompletedProcess[str]


@contextlib.contextmanager
def started_up_cluster(
    tmp_path_factory: pytest.TempPathFactory, guest_image: Path, name: str, nodes: int = 1
) -> Iterator[UpCluster]:
    """`pykubevirt up --nodes N` in a data dir of its own with the demo image imported; `down --all` afterwards."""
    root = tmp_path_factory.mktemp(name)
    cluster = UpCluster(root / "data", f"127.0.0.1:{free_port()}", root / "home")
    cluster.home.mkdir()
    cluster.run("pykubevirt", "image", "import", DEMO_IMAGE, str(guest_image))
    try:
        started = cluster.run("pykubevirt", "up", "--nodes", str(nodes), timeout=120 + 60 * (nodes - 1))
        assert f"export KUBECONFIG={cluster.kubeconfig}" in started.stdout
        yield cluster
    finally:
        cluster.run("pykubevirt", "down", "--all", check=False)


@pytest.fixture(scope="module")
def up_cluster(tmp_path_factory: pytest.TempPathFactory, guest_image: Path) -> Iterator[UpCluster]:
    """`pykubevirt up` with the demo image imported, shared by the module."""
    with started_up_cluster(tmp_path_factory, guest_image, "up") as cluster:
        yield cluster
