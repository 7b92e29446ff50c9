"""QEMU's log followed through inotify on a real loop: lines reach the launcher's log as another process writes them,
before the file exists, after it is cut short or replaced, and the last line when the launcher ends."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.launcher.qemu_log import QemuLogRelay, qemu_log_path, relayed
from pykubevirt.log import JSONFormatter
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="function")


@pytest.fixture
def relayed_lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JSONFormatter("virt-launcher"))
    relayed.addHandler(handler)
    yield out
    relayed.removeHandler(handler)


def messages(out: io.StringIO) -> list[str]:
    return [json.loads(line)["msg"] for line in out.getvalue().splitlines()]


async def relayed_last(out: io.StringIO, wanted: str) -> list[str]:
    """The relayed messages once the last one is `wanted` (the loop runs meanwhile: nothing but inotify wakes it)."""
    return await eventually(lambda: (found := messages(out)) and found[-1] == wanted and found, timeout=5.0)


def append(path: Path, text: str) -> None:
    """Written by another process, as QEMU and libvirt write it."""
    code = "import sys; f = open(sys.argv[1], 'a'); f.write(sys.argv[2]); f.close()"
    subprocess.run([sys.executable, "-c", code, str(path), text], check=True)


async def test_the_log_is_followed_as_it_grows_from_before_it_exists(
    tmp_path: Path, relayed_lines: io.StringIO
) -> None:
    path = qemu_log_path(tmp_path / "log", "default_demo")
    relay = QemuLogRelay(path)
    relay.start()
    try:
        append(path, "2026-12-05 19:52:01.825+0000: starting up libvirt version: 9.0.0\nLC_ALL=C \\\n")
        await relayed_last(relayed_lines, "2026-12-05 19:52:01.825+0000: starting up libvirt version: 9.0.0")
        append(path, "/usr/bin/qemu-system-x86_64 \\\n-name guest=default_demo\n")
        await relayed_last(relayed_lines, "LC_ALL=C /usr/bin/qemu-system-x86_64 -name guest=default_demo")
        # libvirt's log rotation, or someone emptying the file: it is read again from its start.
        path.write_text("")
        append(path, "after the truncation\n")
        await relayed_last(relayed_lines, "after the truncation")
        # A new file in its place: what the old one still held, then the new one from its start.
        replacement = path.with_suffix(".new")
        replacement.write_text("a new file\n")
        os.rename(replacement, path)
        await relayed_last(relayed_lines, "a new file")
        append(path, "2026-12-05 19:55:00.000+0000: shutting down, reason=destroyed")
    finally:
        relay.stop()
    # The last line had no newline: the launcher's end relays it.
    assert messages(relayed_lines)[-1] == "2026-12-05 19:55:00.000+0000: shutting down, reason=destroyed"
    assert messages(relayed_lines).count("a new file") == 1
    records = [json.loads(line) for line in relayed_lines.getvalue().splitlines()]
    assert {(r["level"], r["subcomponent"], r["component"], "pos" in r) for r in records} == {
        ("info", "qemu", "virt-launcher", False)
    }


async def test_a_log_written_before_the_relay_started_is_relayed_whole(
    tmp_path: Path, relayed_lines: io.StringIO
) -> None:
    path = qemu_log_path(tmp_path, "default_early")
    path.parent.mkdir(parents=True)
    path.write_text("one\ntwo\n")
    relay = QemuLogRelay(path)
    relay.start()
    relay.stop()
    assert messages(relayed_lines) == ["one", "two"]


async def test_an_idle_log_wakes_nothing(tmp_path: Path, relayed_lines: io.StringIO) -> None:
    path = qemu_log_path(tmp_path, "default_idle")
    relay = QemuLogRelay(path)
    relay.start()
    try:
        append(path, "first\n")
        assert await relayed_last(relayed_lines, "first") == ["first"]
        reads = 0
        original = relay._relay_new

        def counted() -> None:
            nonlocal reads
            reads += 1
            original()

        relay._relay_new = counted  # type: ignore[method-assign]
        await asyncio.sleep(0.5)
        # A writer elsewhere in the directory's parent does not wake the relay either.
        (tmp_path / "elsewhere.log").write_text("not QEMU's\n")
        await asyncio.sleep(0.2)
        assert reads == 0
    finally:
        relay.stop()


async def test_the_last_panic_libvirt_noted_is_known_as_soon_as_asked(
    tmp_path: Path, relayed_lines: io.StringIO
) -> None:
    path = qemu_log_path(tmp_path, "default_windows")
    relay = QemuLogRelay(path)
    relay.start()
    try:
        assert relay.catch_up() is None
        append(path, "2026-12-05 16:30:49.506+0000: panic hyper-v: arg1='0x7e', arg2='0x1'\n")
        # Asked at once, as the launcher does on libvirt's Crashed event: the line is read then, not on inotify's turn.
        assert relay.catch_up() == {"type": "hyper-v", "arg1": 0x7E, "arg2": 1}
        assert messages(relayed_lines) == ["2026-12-05 16:30:49.506+0000: panic hyper-v: arg1='0x7e', arg2='0x1'"]
    finally:
        relay.stop()
