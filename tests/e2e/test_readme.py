"""The README's quick start, run in order by bash from the repository root, as a user would type it.

Only the data directory and the API server's port differ (a cluster of the test's own, through the
PYKUBEVIRT_DATA_DIR / PYKUBEVIRT_LISTEN variables every command honours).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import free_port
from tests.paths import REPO

pytestmark = pytest.mark.e2e

DEFAULT_DATA_DIR = "/var/lib/pykubevirt"


def quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- walkthrough[^>]*-->\s*```sh\n(.*?)```\s*<!-- /walkthrough -->", text, re.DOTALL)
    assert block, "the README lost its quick-start block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    data = tmp_path / "data"
    yield data
    env = {**os.environ, "PYKUBEVIRT_DATA_DIR": str(data)}
    subprocess.run([str(REPO / ".venv" / "bin" / "pykubevirt"), "down", "--all"], env=env, check=False, timeout=120)


def test_quick_start_commands_succeed_in_order(data_dir: Path, tmp_path: Path) -> None:
    commands = quick_start()
    assert commands[0] == "make up"
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '+ {c}'\n{c.replace(DEFAULT_DATA_DIR, str(data_dir))}" for c in commands
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PYKUBEVIRT_"))}
    env.update(
        HOME=str(home),
        PYKUBEVIRT_DATA_DIR=str(data_dir),
        PYKUBEVIRT_LISTEN=f"127.0.0.1:{free_port()}",
        MAKEFLAGS="",
    )
    result = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # What the user is told and shown along the way.
    assert "hello from pykubevirt's demo guest" in result.stdout, output[-4000:]
    # curl to the demo VM's IP (its pod's, by the bridge binding) got the guest's own page.
    assert "pykubevirt-guest demo" in result.stdout, output[-4000:]
    assert f"export KUBECONFIG={data_dir}/apiserver/kubeconfig" in result.stdout
    assert "virtualmachine.kubevirt.io/demo" in result.stdout
    assert "VM demo was scheduled to stop" in result.stdout
    assert "virt-handler starting on node node01" in result.stdout
    assert re.search(r"^node01\s+Ready\s+true\s+1$", result.stdout, re.MULTILINE), result.stdout[-3000:]
