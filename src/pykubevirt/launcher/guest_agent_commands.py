"""The launcher's guest-agent part: the poller and access credentials it starts, and the agent's commands.

KubeVirt's GetGuestInfo, GetUsers and GetFilesystems of cmd.proto, answered from what the poller last read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from pykubevirt.launcher import guest_agent_info
from pykubevirt.launcher.access_credentials import AccessCredentialManager
from pykubevirt.launcher.command_server import CommandServer
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.guest_agent_poller import GuestAgentPoller
from pykubevirt.launcher.protocol import Request, Status

log = logging.getLogger("pykubevirt.launcher.agent")


class GuestAgentCommands:
    """The guest-agent half of the launcher; `Launcher` supplies the state and the methods declared here."""

    domain: DomainManager | None
    server: CommandServer
    agent: GuestAgentPoller | None
    credentials: AccessCredentialManager | None
    # The thaw a freeze schedules in case no one asks for it (KubeVirt's scheduleSafetyVMIUnfreeze).
    safety_thaw: asyncio.Task[None] | None

    def status(self, event: str = "") -> Status:
        raise NotImplementedError

    def host(self, path: str) -> Path:
        raise NotImplementedError

    def _start_guest_agent(self, vmi: dict[str, Any]) -> None:
        """Poll the guest agent and propagate its credentials from the first sync of a running domain on."""
        assert self.domain is not None
        if self.agent is None:
            self.agent = GuestAgentPoller(self.domain, self._publish_agent)
            self.agent.start()
        if self.credentials is None:
            self.credentials = AccessCredentialManager(self.domain, self.host, self._publish_agent)
        self.credentials.start(vmi)

    def _publish_agent(self) -> None:
        self.server.publish(self.status(event="AgentUpdated"))

    def _agent_data(self) -> guest_agent_info.AgentData:
        if self.agent is None or not self.agent.connected:
            raise RuntimeError("the guest agent is not connected")
        return self.agent.data

    async def _guest_info(self, request: Request) -> dict[str, Any]:
        return guest_agent_info.guest_agent_info(self._agent_data())

    async def _user_list(self, request: Request) -> dict[str, Any]:
        return guest_agent_info.user_list(self._agent_data())

    async def _filesystem_list(self, request: Request) -> dict[str, Any]:
        return guest_agent_info.filesystem_list(self._agent_data())

    async def _fsfreeze_status(self) -> str:
        assert self.domain is not None
        return guest_agent_info.parse_fsfreeze_status(
            await self.domain.agent_command('{"execute":"guest-fsfreeze-status"}')
        )

    def _set_frozen(self, frozen: bool) -> None:
        data = self._agent_data()
        wanted = "frozen" if frozen else ""
        if data.fs_freeze_status != wanted:
            data.fs_freeze_status = wanted
            self._publish_agent()

    async def _freeze(self, request: Request) -> Status:
        """Freeze the guest's filesystems (a no-op when frozen), thawing them after the request's timeout."""
        assert self.domain is not None
        self._agent_data()
        if await self._fsfreeze_status() != "frozen":
            await self.domain.fs_freeze()
        self._cancel_safety_thaw()
        timeout = int(request.get("unfreezeTimeoutSeconds") or 0)
        if timeout > 0:
            self.safety_thaw = asyncio.create_task(self._thaw_after(timeout), name="safety-unfreeze")
        self._set_frozen(True)
        return self.status()

    async def _unfreeze(self, request: Request) -> Status:
        self._agent_data()
        await self._thaw()
        return self.status()

    async def _thaw(self) -> None:
        assert self.domain is not None
        self._cancel_safety_thaw()
        # A status that cannot be read is no reason not to thaw (KubeVirt's UnfreezeVMI goes on too).
        with contextlib.suppress(Exception):
            if await self._fsfreeze_status() == "thawed":
                self._set_frozen(False)
                return
        await self.domain.fs_thaw()
        self._set_frozen(False)

    async def _thaw_after(self, seconds: int) -> None:
        await asyncio.sleep(seconds)
        log.warning("unfreeze was not called within %d s; thawing the guest's filesystems", seconds)
        self.safety_thaw = None
        try:
            await self._thaw()
        except Exception as exc:  # the guest may be gone; nothing is left to thaw then
            log.error("safety unfreeze failed: %s", exc)

    def _cancel_safety_thaw(self) -> None:
        task, self.safety_thaw = self.safety_thaw, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
