"""The doctor's verdicts on plain facts, the table it prints, and the one-line causes of expected start-up failures."""

from __future__ import annotations

import errno
import subprocess

from pykubevirt.cli import host_checks
from pykubevirt.cli.doctor_command import table
from pykubevirt.cli.host_checks import FAIL, GIB, OK, WARN, Check
from pykubevirt.cli.port_owner import PortOwner
from pykubevirt.cli.startup_error import StartupError, explain, last_error_line


def test_kvm_missing_is_a_warning_as_guests_fall_back_to_tcg() -> None:
    assert host_checks.kvm(True, "a kernel booted under KVM").status == OK
    check = host_checks.kvm(False, "/dev/kvm cannot be opened: No such file or directory")
    assert check.status == WARN
    assert "TCG" in check.detail and "modprobe" in check.fix


def test_libvirt_needs_binding_driver_and_user() -> None:
    driver = "/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so"
    assert host_checks.libvirt(True, driver, True).status == OK
    assert host_checks.libvirt(False, driver, True).status == FAIL
    assert "libvirt-daemon-driver-qemu" in host_checks.libvirt(True, None, True).fix
    missing_user = host_checks.libvirt(True, driver, False)
    assert missing_user.status == FAIL and "libvirt-qemu" in missing_user.detail


def test_network_checks() -> None:
    assert host_checks.network_namespaces(True, "/usr/sbin/ip").status == OK
    assert "--no-pod-network" in host_checks.network_namespaces(False, "/usr/sbin/ip").fix
    assert host_checks.network_namespaces(True, None).fix == "apt-get install iproute2"
    assert host_checks.tun("").status == OK
    no_tun = host_checks.tun("No such file or directory")
    assert no_tun.status == FAIL and "modprobe tun" in no_tun.fix
    assert host_checks.cni("/usr/lib/cni", ["bridge", "host-local", "loopback", "portmap", "vlan"]).status == OK
    partial = host_checks.cni("/usr/lib/cni", ["bridge", "loopback"])
    assert partial.status == FAIL and partial.detail.endswith("host-local, portmap")
    assert host_checks.nftables("/usr/sbin/nft", "").status == OK
    assert host_checks.nftables(None, "").status == FAIL
    assert host_checks.nftables("/usr/sbin/nft", "Operation not permitted").status == FAIL


def test_optional_features_warn_and_required_tools_fail() -> None:
    assert host_checks.ovmf("/usr/share/OVMF", False).status == WARN
    assert host_checks.swtpm(["swtpm_setup"]).status == WARN
    assert host_checks.swtpm([]).status == OK
    assert host_checks.skopeo(None).status == WARN
    assert host_checks.qemu_img(None).status == FAIL
    assert host_checks.qemu(None).status == FAIL
    assert host_checks.qemu_img("/usr/bin/qemu-img").status == OK


def test_data_dir_and_free_disk() -> None:
    assert host_checks.data_dir("/var/lib/pykubevirt", "").status == OK
    unwritable = host_checks.data_dir("/var/lib/pykubevirt", "Read-only file system")
    assert unwritable.status == FAIL and "--data-dir" in unwritable.fix
    assert host_checks.free_disk("/var", 50 * GIB).status == OK
    assert host_checks.free_disk("/var", 5 * GIB).status == WARN
    full = host_checks.free_disk("/var", GIB // 2)
    assert full.status == FAIL
    assert full.line() == "0.5 GiB free under /var; free some space or pass --data-dir on another disk"


def test_listen_port() -> None:
    assert host_checks.listen_port("127.0.0.1:6443", False, None, False).status == OK
    # The port of this data dir's own running cluster is not a problem: `up` is then a no-op.
    assert host_checks.listen_port("127.0.0.1:6443", True, None, True).status == OK
    taken = host_checks.listen_port("127.0.0.1:6443", True, PortOwner(99, "kube-apiserver"), False)
    assert taken.status == FAIL
    assert taken.line() == "127.0.0.1:6443 is in use (pid 99, kube-apiserver); pass --listen HOST:PORT or stop it"


def test_worst_and_table() -> None:
    checks = [Check("a", OK, "fine"), Check("bb", WARN, "slow", "tune it"), Check("c", FAIL, "broken", "fix it")]
    assert host_checks.worst(checks) == FAIL
    assert host_checks.worst(checks[:2]) == WARN
    assert host_checks.worst(checks[:1]) == OK
    lines = table(checks).splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "DETAIL", "FIX"]
    assert lines[1] == "a       OK       fine"
    assert lines[3] == "c       FAIL     broken   fix it"
    # The columns line up: every STATUS starts where the header's does.
    assert {line.index(status) for line, status in zip(lines, ["STATUS", OK, WARN, FAIL], strict=True)} == {8}


def test_expected_failures_explain_themselves_in_one_line() -> None:
    assert explain(StartupError("127.0.0.1:1 is in use")) == "127.0.0.1:1 is in use"
    missing = ModuleNotFoundError("No module named 'aiohttp'", name="aiohttp")
    assert (
        explain(missing)
        == "the Python package 'aiohttp' is missing; run `make setup` (or pip install it into the venv)"
    )
    full = explain(OSError(errno.ENOSPC, "No space left on device", "/var/lib/pykubevirt/db"))
    assert (
        full == "no space left on device (/var/lib/pykubevirt/db); free some space or pass --data-dir on another disk"
    )
    denied = explain(PermissionError(errno.EACCES, "Permission denied", "/var/lib/pykubevirt"))
    assert denied is not None and denied.startswith("permission denied (/var/lib/pykubevirt)")
    # asyncio's bind error names the address, so the owner is looked up: here nothing holds port 1.
    bind = OSError(
        errno.EADDRINUSE, "error while attempting to bind on address ('127.0.0.1', 1): address already in use"
    )
    assert explain(bind) == "127.0.0.1:1 is in use; stop it or choose another port"
    try:
        subprocess.run(["pykubevirt-no-such-program"], check=False)
    except FileNotFoundError as exc:
        assert explain(exc) == (
            "the program 'pykubevirt-no-such-program' is not installed; run `make setup` "
            "(`pykubevirt doctor` lists what lacks)"
        )
    # A missing file is not a missing program: it keeps its traceback.
    assert explain(FileNotFoundError(errno.ENOENT, "No such file or directory", "/var/lib/x/db")) is None
    # Anything else keeps its traceback.
    assert explain(OSError(errno.EIO, "Input/output error")) is None
    assert explain(ValueError("bug")) is None


def test_last_error_line() -> None:
    log = '{"level":"info","msg":"starting"}\nerror: first\n{"level":"info","msg":"stopped"}\nerror: the cause\n'
    assert last_error_line(log) == "the cause"
    assert last_error_line('{"msg": "error: inside json"}\n') is None


def test_asyncios_own_bind_error_is_explained_with_the_owner() -> None:
    import asyncio
    import os
    import socket

    async def bind(port: int) -> None:
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", port)
        server.close()

    comm = open(f"/proc/{os.getpid()}/comm").read().strip()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        try:
            asyncio.run(bind(port))
        except OSError as exc:
            cause = explain(exc)
    assert cause == f"127.0.0.1:{port} is in use (pid {os.getpid()}, {comm}); stop it or choose another port"
