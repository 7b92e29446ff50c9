"""The chaos soak, short: `python -m bench.chaos` for two minutes of kills, node stops and VM operations on a
two-node cluster of real guests, then its invariants (bench/chaos.py) must all hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.e2e


# Two minutes of faults plus the cluster's start and settling: more than the suite's 300 s.
@pytest.mark.timeout(960)
def test_a_short_chaos_soak_breaks_no_invariant(guest_image: Path) -> None:
    argv = [sys.executable, "-m", "bench.chaos", "--minutes", "2", "--vms", "4", "--interval", "8", "--seed", "13"]
    argv += ["--image", str(guest_image)]
    soak = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = soak.communicate(timeout=900)
    finally:
        if soak.poll() is None:
            # SIGTERM, not SIGKILL: the soak then takes its cluster down before it exits.
            soak.terminate()
            soak.communicate(timeout=180)
    summary = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    print(f"\nchaos soak: {summary}")
    assert soak.returncode == 0 and summary.get("invariants_broken") == 0, stderr[-6000:]
    assert summary["kills_survived"] >= 5 and summary["vm_operations"] >= 2, summary
