"""The in-process libvirt's log in a real process: libvirt's lines on fd 2 become the launcher's JSON lines, its
errors are logged, debug filters reach the embedded driver, and Python's own stderr (a crash's traceback) still goes
straight out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, subprocess, sys
import libvirt
from pykubevirt import log
from pykubevirt.launcher.embedded_libvirt_log import EmbeddedLibvirtLog, configure_embedded_log

libvirt.registerErrorHandler(lambda _ctx, _error: None, None)  # as the launcher's DomainManager does
log.configure("virt-launcher")
relay = EmbeddedLibvirtLog()
relay.start()
try:
    assert configure_embedded_log(None)
    try:
        libvirt.open("test://{missing}")
    except libvirt.libvirtError:
        pass
    assert configure_embedded_log("1:libvirt 3:*")
    libvirt.open("test:///default").close()
    subprocess.run(["sh", "-c", "echo a child process wrote this >&2"], check=True)
    print("python wrote this", file=sys.stderr)
    raise RuntimeError("boom")
finally:
    relay.stop()
"""


def test_libvirts_lines_become_json_lines_and_python_keeps_its_own_stderr(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-driver-file.xml"
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("{missing}", str(missing))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    relayed = [json.loads(line) for line in lines if line.startswith("{")]
    raw = [line for line in lines if not line.startswith("{")]

    # Python's writes are not relayed: the traceback of the crash is there as Python printed it.
    assert "python wrote this" in raw and raw[-1] == "RuntimeError: boom", raw
    assert all(line.startswith(("python wrote", "Traceback", "  ", "RuntimeError")) for line in raw), raw

    libvirt_lines = [x for x in relayed if x.get("subcomponent") == "libvirt"]
    assert all(x["component"] == "virt-launcher" and x["thread"].isdigit() for x in libvirt_lines)
    # Warnings and errors from the start, even one no caller would have seen (the default prints none of them).
    errors = [x for x in libvirt_lines if x["level"] == "error"]
    assert any(str(missing) in x["msg"] for x in errors), errors
    # Its debug lines of the "libvirt" category once the filters asked for them, and not before.
    debug = [x for x in libvirt_lines if x["level"] == "debug"]
    assert any(x["pos"].startswith("virConnectOpen") and x["msg"] == "name=test:///default" for x in debug), debug
    assert not [x for x in debug if str(missing) in x["msg"]], "a debug line before the filters"
    # Lines of others on fd 2 (a child process, libxml2 failing on the missing file) are relayed as they stand.
    others = {x["msg"] for x in relayed if "subcomponent" not in x}
    assert "a child process wrote this" in others and any(str(missing) in x for x in others), others
