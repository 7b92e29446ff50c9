"""The stray sweeper: pods ending together share one scan of /proc, and each pod's strays (only) are killed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid

from pykubevirt.node import processes
from pykubevirt.node.stray_sweeper import StraySweeper


def stray(marker: str) -> subprocess.Popen[bytes]:
    """A process that carries a pod's runtime directory in its environment, as a daemonized QEMU does."""
    env = {**os.environ, "PYKUBEVIRT_TEST_RUNTIME": marker}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)


def markers(count: int) -> list[str]:
    return [f"/run/pkv-test-{uuid.uuid4().hex[:12]}/" for _ in range(count)]


def wait_exit(process: subprocess.Popen[bytes]) -> int:
    return process.wait(timeout=10)


async def test_pods_ending_together_share_one_scan_and_lose_only_their_strays() -> None:
    pods = markers(5)
    strays = {marker: [stray(marker), stray(marker)] for marker in pods}
    bystander = stray(markers(1)[0])
    try:
        # The processes have exec'd once their environment shows the marker.
        deadline = time.monotonic() + 10
        while any(len(found) < 2 for found in processes.strays_of_pods(pods).values()):
            assert time.monotonic() < deadline, "the stray processes never started"
            await asyncio.sleep(0.02)
        sweeper = StraySweeper()
        killed = await asyncio.gather(*(sweeper.kill(marker) for marker in pods))
        assert killed == [2] * len(pods)
        # The first pod's scan starts at once; every pod that ended meanwhile waits for the next and shares it.
        assert sweeper.scans <= 2
        for marker in pods:
            for process in strays[marker]:
                assert wait_exit(process) == -9
        assert bystander.poll() is None
        assert await sweeper.kill(pods[0]) == 0
    finally:
        bystander.kill()
        bystander.wait()
        for group in strays.values():
            for process in group:
                process.kill()
                process.wait()


def test_one_scan_finds_every_pods_strays() -> None:
    pods = markers(3)
    started = {marker: stray(marker) for marker in pods[:2]}
    try:
        deadline = time.monotonic() + 10
        while True:
            found = processes.strays_of_pods(pods)
            if all(found[m] == [started[m].pid] for m in pods[:2]):
                break
            assert time.monotonic() < deadline, f"strays not found: {found}"
            time.sleep(0.02)
        assert found[pods[2]] == []
        assert processes.pod_strays(pods[0]) == [started[pods[0]].pid]
    finally:
        for process in started.values():
            process.kill()
            process.wait()
