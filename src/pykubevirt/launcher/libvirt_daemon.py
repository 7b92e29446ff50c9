"""A private `libvirtd` for one launcher pod: the only libvirt here that can receive a live migration.

`qemu:///embed` has no RPC listener, so a migration cannot land in it (libvirt 9.0: "Attempt to migrate guest to the
same host" / "Domain autodestroy not supported for embedded drivers"). KubeVirt runs a daemon in every launcher pod;
here a migration-target launcher starts one. Its QEMU driver has `/var/lib/libvirt`, `/run/libvirt` and the like
built in, so the daemon runs in a mount namespace of its own where those are bind mounts of the pod's directories
(plain directories, so a restarted daemon reconnects to its running QEMU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import libvirt

from pykubevirt.launcher import capabilities_cache
from pykubevirt.launcher.domain_manager import EMBED_QEMU_CONF
from pykubevirt.launcher.libvirt_log import relay_libvirt_stream

log = logging.getLogger("pykubevirt.launcher.libvirtd")

LIBVIRTD = "/usr/sbin/libvirtd"
SOCKET_NAME = "libvirt-sock"
# Host directory → where the daemon's namespace mounts it.
_MOUNTS = (
    ("run", "/run/libvirt"),
    ("etc", "/etc/libvirt"),
    ("lib", "/var/lib/libvirt"),
    ("cache", "/var/cache/libvirt"),
    ("vlog", "/var/log/libvirt"),
)

# Only the owner may drive the daemon; the migration proxy reaches the socket as root.
_LIBVIRTD_CONF = """\
unix_sock_dir = "{sock}"
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
unix_sock_admin_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "{outputs}"
"""


class LibvirtdError(RuntimeError):
    """The daemon did not come up."""


def qemu_conf(migration_address: str, ports: tuple[int, int]) -> str:
    """The launcher's qemu.conf plus where incoming migration streams listen (the node's migration address).

    No `migration_host`: libvirt refuses a loopback one, and the source names the address in its URIs anyway.
    """
    listen = f'migration_address = "{migration_address}"\n' if migration_address else ""
    return EMBED_QEMU_CONF + listen + f"migration_port_min = {ports[0]}\nmigration_port_max = {ports[1]}\n"


class PrivateLibvirtd:
    """One `libvirtd` under `directory`, in its own mount namespace; `uri` connects to it."""

    def __init__(
        self,
        directory: Path,
        *,
        migration_address: str,
        ports: tuple[int, int],
        hook: str = "",
        mounts: tuple[tuple[str, str], ...] = (),
        log_filters: str | None = None,
    ) -> None:
        self.directory = directory
        # libvirt's debug categories (`debug_log_filters`); None logs warnings and errors only.
        self.log_filters = log_filters
        # More (directory under `directory`, path in the daemon's namespace) bind mounts.
        self.mounts = mounts
        self.migration_address = migration_address
        self.ports = ports
        # A qemu hook script (libvirt calls it at incoming migration with the domain XML to rewrite).
        self.hook = hook
        self.process: subprocess.Popen[bytes] | None = None
        self._forwarder: threading.Thread | None = None

    @property
    def socket(self) -> Path:
        return self.directory / "sock" / SOCKET_NAME

    @property
    def uri(self) -> str:
        return f"qemu+unix:///system?socket={self.socket}"

    def _write_config(self) -> None:
        d = self.directory
        for name in ("sock", "log", *(host for host, _ in (*_MOUNTS, *self.mounts))):
            (d / name).mkdir(parents=True, exist_ok=True)
        conf = _LIBVIRTD_CONF.format(sock=d / "sock", outputs="1:stderr" if self.log_filters else "3:stderr")
        if self.log_filters:
            conf += f'log_filters = "{self.log_filters}"\n'
        (d / "etc" / "libvirtd.conf").write_text(conf)
        (d / "etc" / "qemu.conf").write_text(qemu_conf(self.migration_address, self.ports))
        if self.hook:
            hooks = d / "etc" / "hooks"
            hooks.mkdir(exist_ok=True)
            (hooks / "qemu").write_text(self.hook)
            (hooks / "qemu").chmod(0o755)
        # The QEMU capabilities another launcher probed spare this daemon the seconds of probing them again.
        capabilities_cache.seed_dir(self.capabilities_dir, capabilities_cache.DAEMON_SHARED_DIR)

    @property
    def log_dir(self) -> Path:
        """The host directory the daemon sees as /var/log/libvirt."""
        return self.directory / "vlog"

    @property
    def capabilities_dir(self) -> Path:
        return self.directory / "cache" / "qemu" / "capabilities"

    def publish_capabilities(self) -> int:
        """Offer the capabilities this daemon probed to the next one (call once a domain has started here)."""
        return capabilities_cache.publish_dir(self.capabilities_dir, capabilities_cache.DAEMON_SHARED_DIR)

    def command(self) -> list[str]:
        d = self.directory
        steps = []
        for host, inside in (*_MOUNTS, *self.mounts):
            # The mount points are empty directories on the host; the daemon's files stay in the pod's directory.
            steps.append(f"mkdir -p {inside} && mount --bind {shlex.quote(str(d / host))} {inside}")
        config, pid_file = shlex.quote(str(d / "etc" / "libvirtd.conf")), shlex.quote(str(d / "libvirtd.pid"))
        steps.append(f"exec {LIBVIRTD} -f {config} -p {pid_file}")
        # On CPU 0: libvirt keys its capability cache on the host's cpuid, which includes the APIC ID of the CPU
        # that read it, so a daemon on another CPU would probe QEMU again (4 s). libvirt gives QEMU all CPUs back.
        return ["taskset", "-c", "0", "unshare", "-m", "--propagation", "private", "sh", "-c", " && ".join(steps)]

    async def start(self, within: float = 20.0) -> None:
        """Start the daemon and wait until its socket accepts connections."""
        await asyncio.to_thread(self._write_config)
        started = time.monotonic()
        self.process = self._spawn()
        while time.monotonic() - started < within:
            if self.process.poll() is not None:
                raise LibvirtdError(f"libvirtd exited with {self.process.returncode}: {self._log_tail()}")
            if await self._accepts():
                log.info("private libvirtd %d ready in %.2fs", self.process.pid, time.monotonic() - started)
                return
            await asyncio.sleep(0.02)
        await self.stop()
        raise LibvirtdError(f"libvirtd did not listen within {within:.0f}s: {self._log_tail()}")

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Popen only forks and execs: quick enough for the loop, and the wait below is asynchronous.
        with (self.directory / "log" / "stderr.log").open("ab") as output:
            process = subprocess.Popen(self.command(), stdout=output, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert process.stderr is not None
        self._forwarder = threading.Thread(
            target=self._forward, args=(process.stderr,), name="libvirtd-log", daemon=True
        )
        self._forwarder.start()
        return process

    def _forward(self, stream: IO[bytes]) -> None:
        """libvirt's warnings and errors into the launcher's own log, as KubeVirt's virt-launcher shows them, so
        `kubectl logs` of the compute container has them; the raw lines stay in log/stderr.log."""
        with stream, (self.directory / "log" / "stderr.log").open("ab", buffering=0) as raw:
            relay_libvirt_stream(stream, raw)

    async def _accepts(self) -> bool:
        # The socket accepts before the QEMU driver has initialised; only a full open shows the daemon serves.
        if not self.socket.exists():
            return False

        def probe() -> bool:
            try:
                libvirt.open(self.uri).close()
            except libvirt.libvirtError:
                return False
            return True

        return await asyncio.to_thread(probe)

    def _log_tail(self) -> str:
        if self._forwarder is not None and self.process is not None and self.process.poll() is not None:
            self._forwarder.join(1.0)  # the daemon exited: its last lines are on their way to the file
        path = self.directory / "log" / "stderr.log"
        tail = path.read_text(errors="replace")[-1500:] if path.exists() else ""
        return tail.strip() or "no output"

    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    async def stop(self, within: float = 5.0) -> None:
        """SIGTERM the daemon (its QEMUs keep running, as with any libvirtd) and wait for it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.to_thread(process.wait), within)
        except TimeoutError:
            process.kill()
            await asyncio.to_thread(process.wait)

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def available() -> bool:
    """Whether this host has the daemon (Debian's `libvirt-daemon` package) and `unshare`."""
    return os.access(LIBVIRTD, os.X_OK) and all(shutil.which(tool) for tool in ("unshare", "taskset"))
