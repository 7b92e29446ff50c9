"""The demo guest under plain QEMU (TCG): boot marker, console, ACPI power button, panic, NoCloud, ConfigDrive."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.launcher import cloudinit
from tests.support.ports import free_port

QEMU = "qemu-system-x86_64"
# TCG boots the Debian kernel in ~10 s here (most of it decompressing the xz kernel). On a host whose cores are all
# busy (make test-stress) it took over 45 s; the cluster e2e tests allow 90 s for the same boot.
BOOT_TIMEOUT = 90.0
STOP_TIMEOUT = 10.0

BOOTED = "pykubevirt-guest: booted"
READY = "pykubevirt-guest: ready"

pytestmark = pytest.mark.e2e


class QMP:
    """A minimal QMP client: one command at a time, events collected by a reader thread."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rw", encoding="utf-8")
        self.events: list[dict[str, Any]] = []
        self._replies: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        json.loads(self.file.readline())  # greeting
        threading.Thread(target=self._read, daemon=True).start()
        self.execute("qmp_capabilities")

    def _read(self) -> None:
        try:
            for line in self.file:
                message = json.loads(line)
                with self._cond:
                    (self.events if "event" in message else self._replies).append(message)
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass

    def execute(self, command: str, timeout: float = 5.0) -> dict[str, Any]:
        self.file.write(json.dumps({"execute": command}) + "\n")
        self.file.flush()
        with self._cond:
            if not self._cond.wait_for(lambda: self._replies, timeout):
                raise TimeoutError(f"no QMP reply to {command}")
            return self._replies.pop(0)

    def wait_event(self, name: str, timeout: float) -> dict[str, Any] | None:
        with self._cond:
            self._cond.wait_for(lambda: any(e["event"] == name for e in self.events), timeout)
            return next((e for e in self.events if e["event"] == name), None)

    def close(self) -> None:
        self.sock.close()


class Guest:
    """One QEMU process booting the image; serial output is logged to a file, as KubeVirt's serial log is."""

    def __init__(self, image: Path, workdir: Path, extra_args: list[str]) -> None:
        # Unix socket paths are limited to 108 bytes, so they live in a short directory of their own.
        self.sockdir = Path(tempfile.mkdtemp(prefix="pkvg-"))
        self.serial_log = workdir / "serial.log"
        self.serial_sock = self.sockdir / "serial.sock"
        self.qmp_sock = self.sockdir / "qmp.sock"
        args = [
            QEMU,
            "-machine", "q35", "-accel", "tcg", "-m", "128", "-nographic", "-no-reboot",
            "-monitor", "none", "-nic", "none",
            # The chardev log records everything, connected or not; the socket is for typing into the console.
            "-chardev", f"socket,id=serial0,path={self.serial_sock},server=on,wait=off,logfile={self.serial_log}",
            "-serial", "chardev:serial0",
            "-qmp", f"unix:{self.qmp_sock},server=on,wait=off",
            "-drive", f"file={image},if=none,id=boot,format=raw,snapshot=on",
            "-device", "virtio-blk-pci,drive=boot,bootindex=0",
            *extra_args,
        ]  # fmt: skip
        self.stderr = (workdir / "qemu.stderr").open("wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)
        self.qmp = self._connect_qmp()

    def _connect_qmp(self) -> QMP:
        deadline = time.monotonic() + 10
        while True:
            try:
                return QMP(self.qmp_sock)
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"QEMU did not open QMP: {self.diagnostics()}") from None
                time.sleep(0.05)

    def output(self) -> str:
        return self.serial_log.read_text(errors="replace") if self.serial_log.exists() else ""

    def diagnostics(self) -> str:
        stderr = Path(self.stderr.name).read_text(errors="replace")
        return f"exit={self.proc.poll()} stderr={stderr[-2000:]!r}\nserial:\n{self.output()[-4000:]}"

    def wait_for(self, text: str, timeout: float = BOOT_TIMEOUT) -> float:
        """Seconds since QEMU started until `text` was on the console."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not seen within {timeout:.0f} s\n{self.diagnostics()}")
            if self.proc.poll() is not None and text not in self.output():
                raise AssertionError(f"QEMU exited before {text!r}\n{self.diagnostics()}")
            time.sleep(0.05)
        return time.monotonic() - self.started

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"QEMU still running after {timeout:.0f} s\n{self.diagnostics()}") from None

    def type(self, text: str) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as console:
            console.connect(str(self.serial_sock))
            console.sendall(text.encode())
            time.sleep(0.2)

    def stop(self) -> None:
        self.qmp.close()
        if self.proc.poll() is None:
            self.proc.kill()  # this Popen's own PID only
            self.proc.wait(10)
        self.stderr.close()
        shutil.rmtree(self.sockdir, ignore_errors=True)


@pytest.fixture
def boot(guest_image: Path, tmp_path: Path) -> Iterator[Any]:
    """boot(*qemu_args) starts a guest; every guest is killed by PID at teardown."""
    guests: list[Guest] = []

    def start(*extra_args: str) -> Guest:
        workdir = tmp_path / f"guest{len(guests)}"
        workdir.mkdir()
        guest = Guest(guest_image, workdir, list(extra_args))
        guests.append(guest)
        return guest

    yield start
    for guest in guests:
        guest.stop()


def cloud_init_iso(
    tmp_path: Path, source: str, user_data: str, name: str = "e2e-vm", hostname: str | None = None
) -> Path:
    vmi: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "e2e"},
        "spec": {
            "domain": {"firmware": {"uuid": "0d4bb1c1-7e1f-4c1a-9d8e-4f6a2b3c4d5e"}},
            "volumes": [{"name": "cloudinitdisk", cloudinit.VOLUME_SOURCES[source]: {"userData": user_data}}],
        },
    }
    if hostname:
        vmi["spec"]["hostname"] = hostname
    target = tmp_path / f"cloud-init-{name}.iso"
    cloudinit.build_iso(cloudinit.cloud_init_data(vmi, source), target)
    return target


def virtio_disk(iso: Path) -> list[str]:
    return ["-drive", f"file={iso},if=virtio,format=raw,readonly=on"]


def sata_cdrom(iso: Path) -> list[str]:
    # q35's ICH9 AHCI ports are ide.0 .. ide.5; KubeVirt's default cdrom bus is sata.
    return [
        "-drive",
        f"file={iso},if=none,id=cidata,format=raw,readonly=on",
        "-device",
        "ide-cd,drive=cidata,bus=ide.1",
    ]


def test_boots_without_cloud_init_and_serves_a_console(boot: Any, record_property: Any) -> None:
    guest = boot()
    booted = guest.wait_for(BOOTED)
    record_property("boot_to_marker_seconds", round(booted, 2))
    print(f"TCG boot to '{BOOTED}': {booted:.1f} s")
    guest.wait_for(READY)
    assert "pykubevirt-guest: no cloud-init disk" in guest.output()
    guest.wait_for("# ", timeout=10)
    guest.type("echo pykv-$((6 * 7))\n")
    guest.wait_for("pykv-42", timeout=10)


def test_acpi_power_button_powers_off(boot: Any) -> None:
    guest = boot()
    guest.wait_for(BOOTED)
    sent = time.monotonic()
    assert "return" in guest.qmp.execute("system_powerdown")
    assert guest.wait_exit(STOP_TIMEOUT) == 0
    print(f"system_powerdown to QEMU exit: {time.monotonic() - sent:.1f} s")
    assert "pykubevirt-guest: power button, powering off" in guest.output()


def test_nocloud_disk_user_data_hostname_runcmd_and_poweroff(boot: Any, tmp_path: Path) -> None:
    user_data = (
        "#cloud-config\n"
        "hostname: from-user-data\n"
        "runcmd:\n"
        '  - echo "pykv-marker-nocloud"\n'
        "  - [echo, pykv, flow-list]\n"
        "  - poweroff\n"
    )
    guest = boot(*virtio_disk(cloud_init_iso(tmp_path, cloudinit.NO_CLOUD, user_data)))
    guest.wait_for("pykv-marker-nocloud")
    # The commands' lines reach the serial port one by one: wait for the last rather than reading the log at once.
    guest.wait_for("pykv flow-list", timeout=10)
    output = guest.output()
    assert "pykubevirt-guest: cloud-init NoCloud on vdb" in output
    assert "pykubevirt-guest: hostname from-user-data" in output
    assert guest.wait_exit(STOP_TIMEOUT) == 0
    assert "pykubevirt-guest: poweroff" in guest.output()


def test_nocloud_cdrom_metadata_hostname_and_shell_script(boot: Any, tmp_path: Path) -> None:
    script = "#!/bin/sh\necho pykv-script-$(hostname)\n"
    iso = cloud_init_iso(tmp_path, cloudinit.NO_CLOUD, script, hostname="meta-host")
    guest = boot(*sata_cdrom(iso))
    guest.wait_for(READY)
    output = guest.output()
    assert "pykubevirt-guest: cloud-init NoCloud on sr0" in output
    assert "pykubevirt-guest: hostname meta-host" in output
    assert "pykv-script-meta-host" in output


def test_config_drive(boot: Any, tmp_path: Path) -> None:
    user_data = "#cloud-config\nruncmd:\n  - echo pykv-marker-configdrive\n"
    iso = cloud_init_iso(tmp_path, cloudinit.CONFIG_DRIVE, user_data, name="cd-vm.with.dots")
    guest = boot(*virtio_disk(iso))
    guest.wait_for(READY)
    output = guest.output()
    assert "pykubevirt-guest: cloud-init ConfigDrive on vdb" in output
    assert "pykubevirt-guest: hostname cd-vm" in output
    assert "pykv-marker-configdrive" in output


def test_crash_runcmd_panics_the_guest(boot: Any, tmp_path: Path) -> None:
    iso = cloud_init_iso(tmp_path, cloudinit.NO_CLOUD, "#cloud-config\nruncmd:\n  - crash\n")
    # pvpanic lets QEMU tell a panic from a reset, as libvirt's on_crash needs.
    guest = boot(*virtio_disk(iso), "-device", "pvpanic")
    guest.wait_for("Kernel panic - not syncing: sysrq triggered crash")
    assert guest.qmp.wait_event("GUEST_PANICKED", timeout=STOP_TIMEOUT) is not None
    guest.wait_exit(STOP_TIMEOUT)
    assert READY not in guest.output()


def agent_call(path: Path, command: str, arguments: dict[str, Any] | None = None) -> Any:
    """One guest agent command over its virtio-serial chardev (what libvirt's qemuAgentCommand sends)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        stream = sock.makefile("rw", encoding="utf-8")
        message: dict[str, Any] = {"execute": command}
        if arguments is not None:
            message["arguments"] = arguments
        stream.write(json.dumps(message) + "\n")
        stream.flush()
        return json.loads(stream.readline())["return"]


def test_guest_agent_and_dropbear_with_the_cloud_init_key(boot: Any, tmp_path: Path) -> None:
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    public = (tmp_path / "id.pub").read_text().strip()
    user_data = f"#cloud-config\nhostname: agent-host\nssh_authorized_keys:\n  - {public}\n"
    agent_sock = Path(tempfile.mkdtemp(prefix="pkvga-")) / "qga.sock"
    port = free_port()
    guest = boot(
        *virtio_disk(cloud_init_iso(tmp_path, cloudinit.NO_CLOUD, user_data)),
        "-chardev", f"socket,id=qga0,path={agent_sock},server=on,wait=off",
        "-device", "virtio-serial-pci",
        "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
        # QEMU user networking forwards a loopback port to the guest's dropbear; nothing leaves the host.
        "-netdev", f"user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-net-pci,netdev=net0",
    )  # fmt: skip
    guest.wait_for(READY)
    output = guest.output()
    assert "pykubevirt-guest: guest agent on vport" in output
    assert "pykubevirt-guest: ssh keys 1" in output
    os_info = agent_call(agent_sock, "guest-get-osinfo")
    assert os_info["id"] == "pykubevirt-guest" and os_info["pretty-name"] == "pykubevirt demo guest 1 (busybox)"
    assert agent_call(agent_sock, "guest-get-host-name") == {"host-name": "agent-host"}
    commands = {c["name"] for c in agent_call(agent_sock, "guest-info")["supported_commands"] if c["enabled"]}
    assert {"guest-get-osinfo", "guest-ssh-add-authorized-keys", "guest-shutdown"} <= commands
    ssh = [
        "ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR",
        "root@127.0.0.1", "hostname",
    ]  # fmt: skip
    # Under the full suite's load (two workers' guests on two cores) dropbear has been seen answering after 30 s.
    deadline = time.monotonic() + 90
    while True:
        result = subprocess.run(ssh, capture_output=True, text=True, timeout=60, check=False)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert result.stdout.strip() == "agent-host", result.stderr
    # guest-shutdown mode=reboot reaches PID 1 through /sbin/shutdown -r; -no-reboot makes QEMU exit on it.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(agent_sock))
        sock.sendall(b'{"execute":"guest-shutdown","arguments":{"mode":"reboot"}}\n')
    guest.wait_exit(STOP_TIMEOUT)
    assert "pykubevirt-guest: reboot" in guest.output()
    shutil.rmtree(agent_sock.parent, ignore_errors=True)


def test_nocloud_network_config_gives_a_nic_its_static_address(boot: Any, tmp_path: Path) -> None:
    # KubeVirt's way for a NIC on a network without IPAM: cloud-init networkData (network-config v2).
    network_data = "network:\n  version: 2\n  ethernets:\n    eth0:\n      addresses:\n        - 192.168.80.10/24\n"
    vmi: dict[str, Any] = {
        "metadata": {"name": "static", "namespace": "e2e"},
        "spec": {
            "volumes": [
                {
                    "name": "cloudinitdisk",
                    "cloudInitNoCloud": {"userData": "#cloud-config\n", "networkData": network_data},
                }
            ],
        },
    }
    iso = tmp_path / "cloud-init-static.iso"
    cloudinit.build_iso(cloudinit.cloud_init_data(vmi, cloudinit.NO_CLOUD), iso)
    # A NIC whose frames go to a loopback UDP port nobody answers: no DHCP server, nothing leaves the host.
    netdev = f"socket,id=n0,udp=127.0.0.1:{free_port()},localaddr=127.0.0.1:{free_port()}"
    guest = boot(*virtio_disk(iso), "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0")
    guest.wait_for("pykubevirt-guest: network-config eth0 192.168.80.10/24")
    guest.wait_for(READY)
    guest.wait_for("# ", timeout=10)
    guest.type("ip -4 -o addr show dev eth0\n")
    guest.wait_for("inet 192.168.80.10/24", timeout=10)
