"""virt-launcher as a real process on libvirt's test driver: the command socket, domain lifecycle and SIGTERM grace.

The test driver keeps domains in the launcher's own process, so these tests exercise everything the launcher does
(disk preparation, conversion, define/start, events, commands, exit) except running QEMU.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.handler.launcher_client import CommandFailed, connectable
from pykubevirt.launcher.protocol import PROTOCOL_VERSION
from tests.support.launcher_process import LauncherProcess, Obj, defaulted_vmi, start_launcher
from tests.support.waiting import eventually


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[LauncherProcess]:
    proc = start_launcher(tmp_path, "testvmi", str(uuid.uuid4()), "--grace-period-seconds", "2")
    yield proc
    proc.stop()
    # However it ended, nothing it left running failed unseen (a state read racing the exit, say).
    assert "never retrieved" not in proc.log() and "Traceback" not in proc.log(), proc.log()


async def next_status(stream: AsyncIterator[Obj], predicate: Any, within: float = 10.0) -> Obj:
    async def scan() -> Obj:
        async for status in stream:
            if predicate(status):
                return status
        raise AssertionError("the watch stream ended")

    return await asyncio.wait_for(scan(), within)


async def test_sync_defines_and_starts_the_domain_with_prepared_disks(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    status = await launcher.client().request("status")
    assert status["domain"]["defined"] is False
    vmi = defaulted_vmi("testvmi", launcher.vmi_uid)
    answer = await launcher.client().request("sync", vmi=vmi)
    assert answer["domain"]["state"] == "Running"
    assert answer["domain"]["name"] == "default_testvmi"
    # This launcher runs in the host's network namespace: the bridge interface falls back, saying so, to QEMU user
    # networking, and status still names the domain NIC libvirt gave a MAC.
    assert answer["interfaces"][0]["ipAddress"] == "10.0.2.15"
    assert "instead of its bridge binding" in answer["networkFallback"]
    primary = answer["interfaces"][0]
    assert primary["mac"].startswith("52:54:00:") and primary["linkState"] == "up"
    assert primary["infoSource"] == "domain" and primary["podInterfaceName"] == "eth0"
    volumes = launcher.pod_dir / "volumes"
    iso = volumes / "ephemeral-disks" / "cloud-init-data" / "default" / "testvmi" / "noCloud.iso"
    assert iso.stat().st_size > 0
    empty = volumes / "libvirt-runtime" / "empty-disks" / "scratch.qcow2"
    qemu_img = ["qemu-img", "info", "--output=json", str(empty)]
    info = json.loads(await asyncio.to_thread(subprocess.check_output, qemu_img))
    assert info["format"] == "qcow2" and info["virtual-size"] == 10 * 1024 * 1024
    # A second sync with the same VMI leaves the running domain alone.
    again = await launcher.client().request("sync", vmi=vmi)
    assert again["domain"]["state"] == "Running"


async def test_sync_rejects_another_vmi(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    with pytest.raises(CommandFailed, match="sync needs this launcher's VMI"):
        await launcher.client().request("sync", vmi=defaulted_vmi("testvmi", str(uuid.uuid4())))


async def test_unknown_command_and_garbage_get_errors_not_a_crash(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    with pytest.raises(CommandFailed, match="unknown command 'explode'"):
        await launcher.client().request("explode")
    reader, writer = await asyncio.open_unix_connection(connectable(str(launcher.socket)))
    writer.write(b"not json\n")
    await writer.drain()
    answer = json.loads(await reader.readline())
    writer.close()
    assert answer == {"ok": False, "error": "the request is not JSON", "protocolVersion": PROTOCOL_VERSION}
    assert (await launcher.client().request("ping"))["pid"] == launcher.process.pid


async def test_a_request_of_another_protocol_version_is_refused_by_name(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    reader, writer = await asyncio.open_unix_connection(connectable(str(launcher.socket)))
    for request, shown in (
        (b'{"id":7,"cmd":"status"}', "no protocol version"),
        (b'{"cmd":"sync","protocolVersion":99}', "protocol version 99"),
    ):
        writer.write(request + b"\n")
        await writer.drain()
        answer = json.loads(await reader.readline())
        assert answer["ok"] is False and answer["protocolVersion"] == PROTOCOL_VERSION
        assert answer["error"].startswith(f"virt-handler speaks {shown}, this side speaks version {PROTOCOL_VERSION}")
    writer.close()
    # The launcher keeps serving handlers of its own version, and started nothing for the refused sync.
    status = await launcher.client().status()
    assert status["protocolVersion"] == PROTOCOL_VERSION and status["domain"]["defined"] is False


async def test_watch_streams_pause_unpause_and_shutdown(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    await launcher.client().request("sync", vmi=defaulted_vmi("testvmi", launcher.vmi_uid))
    stream = launcher.client().watch()
    first = await next_status(stream, lambda s: True)
    assert first["domain"]["state"] == "Running"
    await launcher.client().request("pause")
    paused = await next_status(stream, lambda s: s["domain"]["state"] == "Paused")
    assert paused["domain"]["reason"] == "User"
    await launcher.client().request("unpause")
    await next_status(stream, lambda s: s["domain"]["state"] == "Running")
    await launcher.client().request("shutdown")
    stopped = await next_status(stream, lambda s: s["domain"]["state"] == "Shutoff")
    assert stopped["domain"]["defined"] is True
    await stream.aclose()
    # Delete undefines the stopped domain; the launcher then exits cleanly, so its pod completes.
    deleted = await launcher.client().request("delete")
    assert deleted["domain"]["defined"] is False
    assert await launcher.wait_exit() == 0


async def test_sigterm_before_sync_exits_at_once(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    launcher.process.send_signal(signal.SIGTERM)
    assert await launcher.wait_exit(within=5) == 0


async def test_sigterm_marks_graceful_shutdown_and_destroys_after_grace(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    await launcher.client().request("sync", vmi=defaulted_vmi("testvmi", launcher.vmi_uid))
    stream = launcher.client().watch()
    await next_status(stream, lambda s: True)
    started = time.monotonic()
    launcher.process.send_signal(signal.SIGTERM)
    marked = await next_status(stream, lambda s: s.get("markedForGracefulShutdown"))
    assert marked["event"] == "GracefulShutdownRequested"
    assert marked["domain"]["state"] == "Running"
    # A late sync must never start or change anything once the pod is going away.
    with pytest.raises(CommandFailed, match="shutting down"):
        await launcher.client().request("sync", vmi=defaulted_vmi("testvmi", launcher.vmi_uid))
    # Nobody asks the guest to power off here, so the launcher destroys it once --grace-period-seconds (2) pass.
    destroyed = await next_status(stream, lambda s: s["domain"]["state"] == "Shutoff")
    assert destroyed["domain"]["reason"] == "Destroyed"
    assert time.monotonic() - started >= 1.5
    assert await launcher.wait_exit() == 0


def wakeups(pid: int) -> int:
    """Every time a thread of the process went to sleep and woke again (its voluntary context switches)."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


async def test_a_launcher_with_its_guest_running_sleeps_until_something_happens(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    await launcher.client().request("sync", vmi=defaulted_vmi("testvmi", launcher.vmi_uid))

    async def settled() -> bool:
        # The sync's own follow-ups (network status, the agent poller's first round) are over: half a second quiet.
        first = wakeups(launcher.process.pid)
        await asyncio.sleep(0.5)
        return wakeups(launcher.process.pid) == first

    await eventually(settled, timeout=15)
    before = wakeups(launcher.process.pid)
    await asyncio.sleep(3.0)
    # A loop polling every half second would wake six times; 1,000 idle launchers are then a fifth of a core.
    assert wakeups(launcher.process.pid) - before <= 1
    # It still answers at once, and SIGTERM still starts the grace period.
    assert (await launcher.client().request("ping"))["pid"] == launcher.process.pid
    launcher.process.send_signal(signal.SIGTERM)
    assert await launcher.wait_exit(within=10) == 0


async def test_simulated_crash_exits_non_zero(tmp_path: Path) -> None:
    proc = start_launcher(tmp_path, "crashy", str(uuid.uuid4()), "--simulate-crash")
    assert await proc.wait_exit() == 1
    assert "simulating a crash" in proc.log()


async def test_missing_ovmf_fails_the_sync_by_name_and_the_launcher_gives_up_after_qemu_timeout(tmp_path: Path) -> None:
    empty = tmp_path / "no-ovmf"
    empty.mkdir()
    uid = str(uuid.uuid4())
    proc = start_launcher(tmp_path, "efi", uid, "--ovmf-path", str(empty), "--qemu-timeout", "3s")
    try:
        await proc.wait_ready()
        efi = {"firmware": {"bootloader": {"efi": {"secureBoot": False}}}, "memory": {"guest": "64Mi"}}
        vmi = defaulted_vmi("efi", uid)
        vmi["spec"]["domain"].update(efi)
        started = time.monotonic()
        with pytest.raises(CommandFailed, match=r"EFI OVMF rom missing .* install the ovmf package on the node"):
            await proc.client().request("sync", vmi=vmi)
        # No guest ever ran: like virt-launcher's process monitor, the launcher exits non-zero so its pod fails.
        assert await proc.wait_exit() == 1
        assert time.monotonic() - started < 10
        assert "timed out waiting for the domain to start (qemu-timeout 3s)" in proc.log()
    finally:
        proc.stop()
