"""The launcher's guest-agent part: the poller and access credentials it starts, and the agent's commands.

KubeVirt's GetGuestInfo, GetUsers and GetFilesystems of cmd.proto, answered from what the poller last read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pykubevirt.launcher import guest_agent_info
from pykubevirt.launcher.access_credentials import AccessCredentialManager
from pykubevirt.launcher.command_server import CommandServer
from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.guest_agent_poller import GuestAgentPoller
from pykubevirt.launcher.protocol import Request, Status


class GuestAgentCommands:
    """The guest-agent half of the launcher; `Launcher` supplies the state and the methods declared here."""

    domain: DomainManager | None
    server: CommandServer
    agent: GuestAgentPoller | None
    credentials: AccessCredentialManager | None

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
