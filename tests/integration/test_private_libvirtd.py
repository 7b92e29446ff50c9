"""A migration target's private libvirtd: what it warns about or fails at reaches the launcher's own log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pykubevirt.launcher.libvirt_daemon import PrivateLibvirtd
from pykubevirt.launcher.migration_target import MIGRATION_PORTS
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="function")

# The launchers' qemu.conf sets security_driver "none", and libvirt warns about it as its QEMU driver starts.
RPC_FUNCTIONS = ("virNet", "virKeepAlive")
SECURITY_WARNING = 'Configured security driver "none" disables default policy'


async def test_the_daemons_warnings_reach_the_launchers_log_as_libvirt_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pykubevirt.launcher.libvirt")
    daemon = PrivateLibvirtd(tmp_path / "daemon", migration_address="", ports=MIGRATION_PORTS)
    await daemon.start()
    try:

        def forwarded() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if getattr(r, "subcomponent", None) == "libvirt" and r.getMessage().startswith(SECURITY_WARNING)
            ]

        (record,) = await eventually(forwarded)
        # libvirt's level, function and thread become the line's; its timestamp is dropped for the launcher's own.
        assert record.levelno == logging.WARNING
        assert record.__dict__["position"].startswith("virSecurityManagerNew:"), record.__dict__["position"]
        assert record.__dict__["libvirt_thread"].isdigit()
        raw = (tmp_path / "daemon" / "log" / "stderr.log").read_text()
        assert ": warning : virSecurityManagerNew:" in raw and SECURITY_WARNING in raw
    finally:
        await daemon.stop()
        daemon.remove()


async def test_debug_log_filters_turn_on_the_daemons_debug_lines_for_their_categories_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The launcher logs at info (log.configure); the debug lines asked for must come through all the same.
    caplog.set_level(logging.INFO)
    caplog.handler.setLevel(logging.DEBUG)
    daemon = PrivateLibvirtd(tmp_path / "daemon", migration_address="", ports=MIGRATION_PORTS, log_filters="1:rpc 3:*")
    await daemon.start()
    try:

        def debug_lines() -> list[logging.LogRecord]:
            return [r for r in caplog.records if getattr(r, "subcomponent", None) == "libvirt" and r.levelno == 10]

        lines = await eventually(debug_lines)
        # The start's own connection (the readiness probe) is RPC work. Only the category asked for speaks at debug:
        # libvirt's src/rpc is its virNet* and virKeepAlive* functions.
        outside = [r.__dict__["position"] for r in lines if not r.__dict__["position"].startswith(RPC_FUNCTIONS)]
        assert not outside, outside
    finally:
        await daemon.stop()
        daemon.remove()
