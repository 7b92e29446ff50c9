"""First-run errors that say why: a taken API port stops `apiserver`, `supervise` and `up` with one line and exit 1,
no traceback in any log; `pykubevirt doctor` prints its table and FAILs that port with the fix.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pykubevirt.cli.cluster_layout import pykubevirt_argv
from tests.paths import REPO
from tests.support.ports import free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port a listening socket of this test holds."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def _run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pykubevirt_argv(*args), capture_output=True, text=True, timeout=timeout, check=False)


def _expected(port: int) -> str:
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    return f"error: 127.0.0.1:{port} is in use (pid {os.getpid()}, {comm}); pass --listen HOST:PORT or stop it"


def _no_traceback_under(directory: Path) -> None:
    for path in directory.rglob("*.log"):
        assert "Traceback" not in path.read_text(errors="replace"), path


def test_apiserver_with_its_port_taken_says_who_holds_it(tmp_path: Path, taken_port: int) -> None:
    result = _run("apiserver", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == _expected(taken_port)
    assert "Traceback" not in result.stderr


def test_supervise_passes_the_api_servers_cause_on(tmp_path: Path, taken_port: int) -> None:
    result = _run("supervise", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == _expected(taken_port)
    assert "Traceback" not in result.stderr
    _no_traceback_under(tmp_path)


def test_up_with_the_port_taken_prints_one_line_and_starts_nothing(tmp_path: Path, taken_port: int) -> None:
    result = _run("up", "--no-pod-network", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert result.stderr == _expected(taken_port) + "\n"
    assert not (tmp_path / "run" / "supervisor.pid").exists()
    _no_traceback_under(tmp_path)


def test_up_with_an_unwritable_data_dir_says_so(tmp_path: Path) -> None:
    # A file where the data dir's parent should be: nothing can be created under it, whoever runs the test.
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = _run("up", "--no-pod-network", "--data-dir", str(blocker / "data"), "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: cannot write the data dir {blocker / 'data'} (")
    assert line.endswith("; run as root, fix its permissions or pass --data-dir DIR")


def test_doctor_prints_its_table_and_fails_a_taken_port(tmp_path: Path, taken_port: int) -> None:
    result = _run("doctor", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{taken_port}", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL", "FIX"]
    rows = {line.split()[0]: line for line in lines[1:] if line and not line.startswith(("OK", "WARN", "FAIL"))}
    expected = ["qemu", "kvm", "libvirt", "netns", "tun", "cni", "nftables", "ovmf", "swtpm", "qemu-img", "skopeo"]
    assert list(rows) == [*expected, "data-dir", "disk", "port"]
    assert all(row.split()[1] in ("OK", "WARN", "FAIL") for row in rows.values())
    # Columns are separated by three or more spaces: CHECK, STATUS, DETAIL, FIX.
    port_row = re.split(r"\s{3,}", rows["port"])
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().strip()
    assert port_row == [
        "port",
        "FAIL",
        f"127.0.0.1:{taken_port} is in use (pid {os.getpid()}, {comm})",
        "pass --listen HOST:PORT or stop it",
    ]
    assert lines[-1].startswith("FAIL: ")


def test_doctor_passes_with_a_free_port(tmp_path: Path) -> None:
    free = free_port()
    result = _run("doctor", "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{free}", timeout=120)
    port_row = next(line for line in result.stdout.splitlines() if line.startswith("port "))
    assert port_row.split()[1] == "OK"
    # This host is set up (`make setup`): nothing FAILs, so `make up` goes on.
    assert result.returncode == 0, result.stdout


def test_doctor_fails_a_missing_cni_plugin_directory_with_its_fix(tmp_path: Path) -> None:
    free = free_port()
    empty = tmp_path / "no-cni"
    empty.mkdir()
    env = {**os.environ, "PYKUBEVIRT_CNI_PATH": str(empty)}
    argv = pykubevirt_argv("doctor", "--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{free}")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    cni_row = re.split(r"\s{3,}", next(line for line in result.stdout.splitlines() if line.startswith("cni ")))
    assert cni_row[:2] == ["cni", "FAIL"]
    assert cni_row[2].startswith(f"CNI plugins missing from {empty}: bridge")
    assert cni_row[3] == "apt-get install containernetworking-plugins, or `pykubevirt up --no-pod-network`"
    assert "Traceback" not in result.stderr


def test_make_up_stops_at_the_doctors_fail(tmp_path: Path, taken_port: int) -> None:
    env = {**os.environ, "PYKUBEVIRT_DATA_DIR": str(tmp_path / "data"), "PYKUBEVIRT_LISTEN": f"127.0.0.1:{taken_port}"}
    result = subprocess.run(
        [str(REPO / "scripts" / "demo-up.sh")], capture_output=True, text=True, env=env, timeout=180, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(rf"^port +FAIL +127\.0\.0\.1:{taken_port} is in use", result.stdout, re.MULTILINE)
    assert result.stderr.strip().splitlines()[-1].startswith("make up: fix the FAIL rows above")
    # It stopped before importing the image or starting anything.
    assert not (tmp_path / "data").exists()
