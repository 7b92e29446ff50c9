"""One libvirt per launcher: a `qemu:///embed` connection (or `test:///default` for tests) and the one domain it runs.

libvirt's calls block, so every call goes through `asyncio.to_thread`; lifecycle events arrive through libvirtaio on
the event loop and are turned into state updates for whoever watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt

from pykubevirt.launcher.domain_state import EVENTS, DomainState, from_libvirt

log = logging.getLogger("pykubevirt.launcher.domain")

# KubeVirt's launcher qemu.conf, minus what needs daemons we do not run (virtlogd, cgroups, namespaces, SELinux).
# swtpm runs as root like QEMU: a persistent TPM's state sits on a claim whose host path only root may enter.
EMBED_QEMU_CONF = """\
stdio_handler = "file"
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
user = "root"
group = "root"
swtpm_user = "root"
swtpm_group = "root"
dynamic_ownership = 0
remember_owner = 0
"""

_event_impl_registered = False
# Our own event number for libvirt's MEMORY_DEVICE_SIZE_CHANGE (lifecycle events are >= 0, -1 is a reboot).
MEMORY_SIZE_EVENT = -2


def register_event_loop() -> None:
    """libvirt needs an event implementation before the first connection; use the running asyncio loop."""
    global _event_impl_registered
    if _event_impl_registered:
        return
    from pykubevirt.launcher.libvirt_event_loop import ThreadSafeEventImpl

    ThreadSafeEventImpl(asyncio.get_running_loop()).register()
    # libvirt prints every error to stderr by default; callers get them as exceptions and log what matters.
    libvirt.registerErrorHandler(lambda _ctx, _error: None, None)
    _event_impl_registered = True


def embed_uri(root: Path, hugetlbfs: str = "") -> str:
    """An embedded QEMU driver rooted at `root`, configured to run without the system daemons; `hugetlbfs` is the
    pod's huge page mount (libvirt refuses a hugepages guest without one)."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    conf = EMBED_QEMU_CONF + (f'hugetlbfs_mount = "{hugetlbfs}"\n' if hugetlbfs else "")
    (root / "etc" / "qemu.conf").write_text(conf)
    return f"qemu:///embed?root={root}"


StateListener = Callable[[DomainState, str], None]
AgentListener = Callable[[bool], None]
# `listener(detail)` on libvirt's CRASHED event (detail: virDomainEventCrashedDetailType).
CrashListener = Callable[[int], None]
# qemuAgentCommand's timeout (seconds), as KubeVirt's launcher uses for its agent calls.
AGENT_COMMAND_TIMEOUT = 10
GUEST_INFO_TYPES = (
    libvirt.VIR_DOMAIN_GUEST_INFO_INTERFACES
    | libvirt.VIR_DOMAIN_GUEST_INFO_OS
    | libvirt.VIR_DOMAIN_GUEST_INFO_HOSTNAME
    | libvirt.VIR_DOMAIN_GUEST_INFO_TIMEZONE
    | libvirt.VIR_DOMAIN_GUEST_INFO_USERS
)


class DomainManager:
    """Owns the connection and the domain named `name`; all methods are coroutines safe to call from the loop."""

    def __init__(self, uri: str, name: str) -> None:
        self.uri = uri
        self.name = name
        self._conn: Any = None
        self._listeners: list[StateListener] = []
        self._agent_listeners: list[AgentListener] = []
        self._crash_listeners: list[CrashListener] = []
        self._callback_ids: list[int] = []
        # Events being read and published; `close` cancels them (a launcher may exit while libvirt's later events for
        # its guest, a Shutdown followed by a Stopped, are still on their way).
        self._publishing: set[asyncio.Task[None]] = set()
        # libvirt's currentMemory in bytes as last read with the state (None before a domain was seen).
        self.current_memory: int | None = None

    async def connect(self) -> None:
        register_event_loop()
        self._conn = await asyncio.to_thread(libvirt.open, self.uri)
        loop = asyncio.get_running_loop()

        def lifecycle(conn: Any, domain: Any, event: int, detail: int, opaque: Any) -> None:
            # Called on the loop (libvirtaio); only schedule work here, as libvirt requires.
            if domain.name() == self.name:
                loop.call_soon(self._on_event, event, detail)

        def reboot(conn: Any, domain: Any, opaque: Any) -> None:
            if domain.name() == self.name:
                loop.call_soon(self._on_event, -1, 0)

        self._callback_ids.append(
            self._conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, lifecycle, None)
        )

        def agent(conn: Any, domain: Any, state: int, reason: int, opaque: Any) -> None:
            if domain.name() == self.name:
                connected = state == libvirt.VIR_CONNECT_DOMAIN_EVENT_AGENT_LIFECYCLE_STATE_CONNECTED
                for listener in list(self._agent_listeners):
                    loop.call_soon(listener, connected)

        self._callback_ids.append(
            self._conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_REBOOT, reboot, None)
        )

        def memory_size(conn: Any, domain: Any, alias: str, size: int, opaque: Any) -> None:
            # A virtio-mem device plugged or unplugged memory: the guest's current memory changed.
            if domain.name() == self.name:
                loop.call_soon(self._on_event, MEMORY_SIZE_EVENT, 0)

        try:
            self._callback_ids.append(
                self._conn.domainEventRegisterAny(
                    None, libvirt.VIR_DOMAIN_EVENT_ID_MEMORY_DEVICE_SIZE_CHANGE, memory_size, None
                )
            )
        except libvirt.libvirtError as exc:
            log.debug("no memory device size events: %s", exc)
        try:
            self._callback_ids.append(
                self._conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, agent, None)
            )
        except libvirt.libvirtError as exc:  # drivers without a guest agent (test:///default) have no such event
            log.debug("no agent lifecycle events: %s", exc)

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def add_agent_listener(self, listener: AgentListener) -> None:
        """`listener(connected)` runs on the loop when the guest opens or closes the agent's port."""
        self._agent_listeners.append(listener)

    def add_crash_listener(self, listener: CrashListener) -> None:
        """`listener(detail)` runs on the loop when the guest panics, before the state that follows is read."""
        self._crash_listeners.append(listener)

    def _on_event(self, event: int, detail: int) -> None:
        if self._conn is None:
            return  # closed since libvirt queued it
        if event == libvirt.VIR_DOMAIN_EVENT_CRASHED:
            # At once, as KubeVirt handles a panic before its domain lookup: libvirt stops the crashed guest meanwhile,
            # and a status read while it does (a command's, not this event's) must already count the panic.
            for crashed in list(self._crash_listeners):
                crashed(detail)
        name = EVENTS.get(event, {-1: "Reboot", MEMORY_SIZE_EVENT: "MemoryDeviceSizeChange"}.get(event, str(event)))
        task = asyncio.get_running_loop().create_task(self._publish(name))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish(self, event: str) -> None:
        state = await self.state()
        memory = f", current memory {self.current_memory >> 20} MiB" if self.current_memory is not None else ""
        log.info("domain event %s, state %s (%s)%s", event, state.state, state.reason, memory)
        for listener in list(self._listeners):
            listener(state, event)

    @property
    def connection(self) -> Any:
        """The libvirt connection (for blocking reads made in a worker thread, such as the bulk stats)."""
        return self._conn

    def lookup(self) -> Any:
        """The libvirt domain object, or None (blocking: call it through `asyncio.to_thread`)."""
        return self._domain()

    def _domain(self) -> Any:
        try:
            return self._conn.lookupByName(self.name)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise

    async def state(self) -> DomainState:
        """The domain's state; NoState/Unknown when it is not defined."""

        def read() -> DomainState:
            domain = self._domain()
            if domain is None:
                return DomainState("NoState", "Unknown")
            try:
                state, reason = domain.state()
                # virDomainGetInfo's memory (KiB): the current memory KubeVirt reports as status.memory.guestCurrent.
                self.current_memory = int(domain.info()[2]) * 1024
            except libvirt.libvirtError as exc:
                # Undefined between the lookup and the read (a migration's UNDEFINE_SOURCE, a concurrent delete).
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
                return DomainState("NoState", "Unknown")
            return from_libvirt(state, reason)

        return await asyncio.to_thread(read)

    async def exists(self) -> bool:
        return await asyncio.to_thread(lambda: self._domain() is not None)

    async def warm_up(self) -> None:
        """Have libvirt load (or probe) QEMU's capabilities now, while the launcher waits for its VMI."""
        await asyncio.to_thread(self._conn.getDomainCapabilities, None, None, None, None, 0)

    async def define_and_start(self, xml: str, *, paused: bool) -> None:
        """Define the domain from `xml` and start it (paused when the VMI's startStrategy is Paused)."""

        def run() -> None:
            domain = self._conn.defineXML(xml)
            state, _ = domain.state()
            if state in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_NOSTATE, libvirt.VIR_DOMAIN_CRASHED):
                flags = libvirt.VIR_DOMAIN_START_PAUSED if paused else 0
                domain.createWithFlags(flags)

        await asyncio.to_thread(run)

    async def _act(self, action: Callable[[Any], Any]) -> bool:
        def run() -> bool:
            domain = self._domain()
            if domain is None:
                return False
            action(domain)
            return True

        return await asyncio.to_thread(run)

    async def act(self, action: Callable[[Any], Any]) -> bool:
        """Run `action` on the libvirt domain in a thread; False when there is no domain."""
        return await self._act(action)

    async def shutdown(self) -> bool:
        """Ask the guest to shut down (ACPI power button); False when there is no domain."""

        def power_button(domain: Any) -> None:
            # The power button, as KubeVirt's SignalShutdownVMI presses it: libvirt's default would go through the
            # guest agent when one is connected, which is not the graceful shutdown users (and their acpid) expect.
            try:
                domain.shutdownFlags(libvirt.VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN)
            except libvirt.libvirtError as exc:
                # libvirt's test driver takes no shutdown flags at all.
                if exc.get_error_code() != libvirt.VIR_ERR_INVALID_ARG:
                    raise
                domain.shutdownFlags(libvirt.VIR_DOMAIN_SHUTDOWN_DEFAULT)

        return await self._act(power_button)

    async def destroy(self) -> bool:
        """Power the domain off at once."""

        def destroy(domain: Any) -> None:
            state, _ = domain.state()
            if state not in (libvirt.VIR_DOMAIN_SHUTOFF, libvirt.VIR_DOMAIN_CRASHED):
                domain.destroyFlags(libvirt.VIR_DOMAIN_DESTROY_GRACEFUL)

        return await self._act(destroy)

    async def pause(self) -> bool:
        return await self._act(lambda d: d.suspend())

    async def resume(self) -> bool:
        return await self._act(lambda d: d.resume())

    async def reboot(self, *, agent: bool = False) -> bool:
        """Soft reboot: through the guest agent when it is connected, else the ACPI power button."""
        flags = libvirt.VIR_DOMAIN_REBOOT_GUEST_AGENT if agent else libvirt.VIR_DOMAIN_REBOOT_ACPI_POWER_BTN
        return await self._act(lambda d: d.reboot(flags))

    async def reset(self) -> bool:
        """Hard reset, as KubeVirt's ResetVMI: the guest restarts without being asked (virDomainReset)."""
        return await self._act(lambda d: d.reset(0))

    async def screenshot(self, *, move_cursor: bool = False) -> tuple[str, bytes]:
        """The first screen's image and its MIME type (virDomainScreenshot through a stream)."""
        import libvirt_qemu

        def run() -> tuple[str, bytes]:
            domain = self._running_domain()
            if move_cursor:
                # A relative pointer move and back: enough for a screen saver to wake, nothing for the guest to do.
                events = [{"type": "rel", "data": {"axis": "x", "value": delta}} for delta in (1, -1)]
                command = {"execute": "input-send-event", "arguments": {"events": events}}
                libvirt_qemu.qemuMonitorCommand(domain, json.dumps(command), 0)
            stream = domain.connect().newStream(0)
            try:
                mime = str(domain.screenshot(stream, 0, 0))
                chunks = []
                while True:
                    chunk = stream.recv(1 << 16)
                    if not isinstance(chunk, bytes) or not chunk:
                        break
                    chunks.append(chunk)
                stream.finish()
            except libvirt.libvirtError:
                with contextlib.suppress(libvirt.libvirtError):
                    stream.abort()
                raise
            return mime, b"".join(chunks)

        return await asyncio.to_thread(run)

    def _running_domain(self) -> Any:
        domain = self._domain()
        if domain is None:
            raise libvirt.libvirtError("the domain is not defined")
        return domain

    async def agent_command(self, command: str, wait_seconds: int = AGENT_COMMAND_TIMEOUT) -> str:
        """One raw guest agent command (libvirt's qemuAgentCommand); the agent's JSON reply."""
        import libvirt_qemu

        def run() -> str:
            return str(libvirt_qemu.qemuAgentCommand(self._running_domain(), command, wait_seconds, 0))

        return await asyncio.to_thread(run)

    async def fs_freeze(self) -> None:
        """Freeze every guest filesystem through the agent (virDomainFSFreeze), as KubeVirt's FreezeVMI."""
        await asyncio.to_thread(lambda: self._running_domain().fsFreeze(None, 0))

    async def fs_thaw(self) -> None:
        await asyncio.to_thread(lambda: self._running_domain().fsThaw(None, 0))

    async def guest_info(self) -> dict[str, Any]:
        """libvirt's typed guest info: interfaces, OS, hostname, timezone and users, from the agent."""
        return await asyncio.to_thread(lambda: dict(self._running_domain().guestInfo(GUEST_INFO_TYPES, 0)))

    async def set_authorized_keys(self, user: str, keys: list[str]) -> None:
        """Replace `user`'s authorized_keys in the guest through the agent (flags 0 overwrite the file)."""
        await asyncio.to_thread(lambda: self._running_domain().authorizedSSHKeysSet(user, keys, 0))

    async def undefine(self) -> bool:
        def undefine(domain: Any) -> None:
            flags = getattr(libvirt, "VIR_DOMAIN_UNDEFINE_KEEP_NVRAM", 0)
            try:
                domain.undefineFlags(flags)
            except libvirt.libvirtError:
                domain.undefine()

        return await self._act(undefine)

    async def attach_device(self, xml: str) -> bool:
        """Hot-plug a device into the running guest only (the persistent definition keeps its own disks)."""
        return await self._act(lambda d: d.attachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE))

    async def detach_device(self, xml: str) -> bool:
        """Unplug a device from the running guest; libvirt waits a few seconds for the guest to let it go."""
        return await self._act(lambda d: d.detachDeviceFlags(xml, libvirt.VIR_DOMAIN_AFFECT_LIVE))

    async def block_capacity(self, disk: str) -> int | None:
        """The guest-visible size of a disk (its path or target) in bytes; None when there is no domain."""

        def read() -> int | None:
            domain = self._domain()
            return int(domain.blockInfo(disk, 0)[0]) if domain is not None else None

        return await asyncio.to_thread(read)

    async def block_resize(self, disk: str, size: int) -> bool:
        """Grow a disk of the running guest to `size` bytes (QEMU's block_resize: the guest is told at once)."""
        return await self._act(lambda d: d.blockResize(disk, size, libvirt.VIR_DOMAIN_BLOCK_RESIZE_BYTES))

    async def xml(self) -> str:
        def read() -> str:
            domain = self._domain()
            return str(domain.XMLDesc(0)) if domain is not None else ""

        return await asyncio.to_thread(read)

    async def close(self) -> None:
        if self._conn is None:
            return
        for task in list(self._publishing):
            task.cancel()
        for callback in self._callback_ids:
            try:
                self._conn.domainEventDeregisterAny(callback)
            except libvirt.libvirtError:
                pass
        self._callback_ids.clear()
        conn, self._conn = self._conn, None
        await asyncio.to_thread(conn.close)
