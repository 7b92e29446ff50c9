"""End-to-end fixtures: the demo guest image, and a whole embedded cluster of real processes with it imported."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.paths import REPO
from tests.support.cluster import DEMO_IMAGE, ClusterView, EmbeddedCluster

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
    """A node image store holding the demo guest under its containerDisk reference, imported the way users do it."""
    store = tmp_path_factory.mktemp("images")
    command = [sys.executable, "-m", "pykubevirt.cli.main", "image", "import", DEMO_IMAGE, str(guest_image)]
    subprocess.run([*command, "--images-dir", str(store)], check=True, capture_output=True, timeout=60)
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
