"""The launcher's commands on the domain's power and size: shutdown, kill, pause, unpause, soft reboot, delete, and the
CPU and memory hotplug syncs (KubeVirt's cmd.proto calls of the same names)."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from pykubevirt.launcher.domain_manager import DomainManager
from pykubevirt.launcher.domain_state import DomainState
from pykubevirt.launcher.guest_agent_poller import GuestAgentPoller
from pykubevirt.launcher.memory_hotplug import sync_memory
from pykubevirt.launcher.protocol import (
    MAX_LINE,
    NO_STATE,
    UNKNOWN_REASON,
    Command,
    Request,
    ShutdownReply,
    Status,
)
from pykubevirt.launcher.screenshot_png import as_png
from pykubevirt.launcher.vcpu_hotplug import sync_vcpus

log = logging.getLogger("pykubevirt.launcher")


class DomainCommands:
    """The power and resize half of the launcher; `Launcher` supplies the state and the methods declared here."""

    domain: DomainManager | None
    agent: GuestAgentPoller | None
    vmi_uid: str
    vmi: dict[str, Any] | None
    defined: bool
    last_state: DomainState
    deleted: asyncio.Event

    def status(self, event: str = "") -> Status:
        raise NotImplementedError

    async def _refreshed_status(self) -> Status:
        raise NotImplementedError

    async def _sync_resources(self, request: Request) -> Status:
        """CPU or memory hotplug: the running domain gets the VMI's vCPUs or guest memory (vcpu/memory_hotplug)."""
        vmi = request.get("vmi")
        if self.domain is None or not isinstance(vmi, dict) or (vmi.get("metadata") or {}).get("uid") != self.vmi_uid:
            raise ValueError(f"{request['cmd']} needs this launcher's running VMI")
        sync = sync_vcpus if request["cmd"] == Command.SYNC_VCPUS else sync_memory
        log.info("%s: %s", request["cmd"], await sync(self.domain, vmi))
        self.vmi = vmi
        return await self._refreshed_status()

    async def _shutdown(self, request: Request) -> ShutdownReply:
        assert self.domain is not None
        done = await self.domain.shutdown()
        return {**self.status(), "signaled": done}

    async def _kill(self, request: Request) -> Status:
        assert self.domain is not None
        await self.domain.destroy()
        return await self._refreshed_status()

    async def _pause(self, request: Request) -> Status:
        assert self.domain is not None
        await self.domain.pause()
        return await self._refreshed_status()

    async def _unpause(self, request: Request) -> Status:
        assert self.domain is not None
        await self.domain.resume()
        return await self._refreshed_status()

    async def _softreboot(self, request: Request) -> Status:
        assert self.domain is not None
        # KubeVirt reboots through the agent when it is connected, else presses the ACPI power button.
        await self.domain.reboot(agent=self.agent is not None and self.agent.connected)
        return self.status()

    async def _reset(self, request: Request) -> Status:
        assert self.domain is not None
        await self.domain.reset()
        return self.status()

    async def _screenshot(self, request: Request) -> dict[str, Any]:
        assert self.domain is not None
        mime, image = await self.domain.screenshot(move_cursor=bool(request.get("moveCursor")))
        encoded = base64.b64encode(as_png(mime, image)).decode()
        if len(encoded) > MAX_LINE - 1024:
            # The reply is one protocol line; a clear refusal beats a line the handler cannot read.
            raise ValueError(f"the screenshot ({len(encoded)} bytes in base64) is too large for the launcher protocol")
        return {"png": encoded}

    async def _delete(self, request: Request) -> Status:
        """Undefine the stopped domain; the launcher then exits (its pod completes)."""
        assert self.domain is not None
        await self.domain.destroy()
        await self.domain.undefine()
        self.defined = False
        self.last_state = DomainState(NO_STATE, UNKNOWN_REASON)
        asyncio.get_running_loop().call_later(0.2, self.deleted.set)
        return self.status()
