"""virt-launcher's guest agent poller: asks the agent through libvirt, as KubeVirt's agent-poller does.

Workers: `guest-info` (version and commands) and `guest-get-fsinfo` by qemuAgentCommand, and libvirt's typed
guest info (interfaces, OS, hostname, timezone, users) every 10 s. Each runs at once, then after
min(10 s, interval), doubling up to its interval. libvirt's agent lifecycle event says when the guest opens or
closes its port: the launcher then tells virt-handler at once (AgentConnected) and polls again right away, so a
freshly booted guest's OS shows up without waiting for the next tick. While the port is closed nobody is asked
(KubeVirt asks anyway and is refused): each round woke the launcher's threads, 0.15 ms of CPU a second per idle VM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from pykubevirt.launcher import guest_agent_info as info
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.interface_status import GuestInterface

log = logging.getLogger("pykubevirt.launcher.agent")

POLL_INITIAL_INTERVAL: Final = 10.0
# cmd/virt-launcher defaults: --qemu-agent-version-interval, --qemu-agent-file-interval; apiCallTick.
VERSION_INTERVAL: Final = 300.0
FILE_INTERVAL: Final = 300.0
GUEST_INFO_INTERVAL: Final = 10.0


class GuestAgentPoller:
    """Keeps `data` and `connected` current for one domain; `on_change` runs whenever either changes."""

    def __init__(self, domain: DomainManager, on_change: Callable[[], None]) -> None:
        self.domain = domain
        self.on_change = on_change
        self.data = info.AgentData()
        self.connected = False
        self._tasks: list[asyncio.Task[None]] = []
        self._kicks: list[asyncio.Event] = []

    def start(self) -> None:
        """Start the workers (once the domain runs) and follow the agent channel's state."""
        if self._tasks:
            return
        loop = asyncio.get_running_loop()
        self.domain.add_agent_listener(self._on_agent_event)
        workers: list[tuple[Callable[[], Awaitable[None]], float]] = [
            (self._poll_version, VERSION_INTERVAL),
            (self._poll_filesystems, FILE_INTERVAL),
            (self._poll_guest_info, GUEST_INFO_INTERVAL),
        ]
        self._tasks = [loop.create_task(self._worker(poll, interval)) for poll, interval in workers]
        self._tasks.append(loop.create_task(self._read_channel()))

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def status_fields(self) -> dict[str, Any]:
        return info.status_fields(self.connected, self.data)

    def guest_interfaces(self) -> list[GuestInterface]:
        """The guest's NICs as the agent last reported them, for status.interfaces."""
        return [
            GuestInterface(str(i["interfaceName"]), str(i["mac"]), tuple(i.get("ipAddresses") or ()))
            for i in self.data.interfaces
        ]

    # ------------------------------------------------------------------------------------------------ channel

    async def _read_channel(self) -> None:
        """The channel's state as the domain XML has it now (events only report later changes)."""
        try:
            connected = info.channel_connected(await self.domain.xml())
        except Exception as exc:  # a domain that went away has no agent
            log.debug("cannot read the agent channel state: %s", exc)
            return
        self._set_connected(connected)

    def _on_agent_event(self, connected: bool) -> None:
        self._set_connected(connected)

    def _set_connected(self, connected: bool) -> None:
        if connected == self.connected:
            return
        self.connected = connected
        log.info("guest agent %s", "connected" if connected else "disconnected")
        if connected:
            for kick in self._kicks:
                kick.set()
        self.on_change()

    # ------------------------------------------------------------------------------------------------ workers

    async def _worker(self, poll: Callable[[], Awaitable[None]], interval: float) -> None:
        kick = asyncio.Event()
        self._kicks.append(kick)
        wait = min(POLL_INITIAL_INTERVAL, interval)
        while True:
            polled = self.connected
            if polled:
                await poll()
            # An agent that (re)connects wakes every worker early; the schedule itself carries on.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(kick.wait(), wait if polled else None)
            kick.clear()
            if polled and wait < interval:
                wait = min(wait * 2, interval)

    async def _command(self, command: str) -> str | None:
        try:
            return await self.domain.agent_command(f'{{"execute":"{command}"}}')
        except Exception as exc:  # not vital: skip this round (upstream does the same)
            log.debug("guest agent %s failed: %s", command, exc)
            return None

    async def _poll_version(self) -> None:
        reply = await self._command("guest-info")
        if reply is None:
            return
        try:
            version, commands = info.parse_agent_info(reply)
        except (ValueError, TypeError, AttributeError) as exc:
            log.error("Cannot parse guest agent information %s", exc)
            return
        if (version, commands) != (self.data.version, self.data.supported_commands):
            self.data.version, self.data.supported_commands = version, commands
            self.on_change()

    async def _poll_filesystems(self) -> None:
        reply = await self._command("guest-get-fsinfo")
        if reply is None:
            return
        try:
            self.data.filesystems = info.parse_filesystems(reply)
        except (ValueError, TypeError, AttributeError) as exc:
            log.error("Cannot parse guest agent filesystem %s", exc)

    async def _poll_guest_info(self) -> None:
        try:
            guest = await self.domain.guest_info()
        except Exception as exc:  # no agent yet, or the domain is going away
            log.debug("guest info failed: %s", exc)
            return
        before = (info.status_fields(self.connected, self.data), self.data.interfaces)
        info.apply_guest_info(self.data, guest)
        if (info.status_fields(self.connected, self.data), self.data.interfaces) != before:
            self.on_change()
