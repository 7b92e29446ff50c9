"""The launcher's guest agent side on libvirt's test driver, which has no agent: the status says the channel is not
connected, the agent queries refuse, qemuGuestAgent credentials report the agent offline, and virt-handler's
endpoint passes the launcher's refusal on."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pykubevirt.handler.api_server import HandlerAPI
from pykubevirt.handler.launcher_client import CommandFailed
from tests.support.launcher_process import LauncherProcess, defaulted_vmi, start_launcher

CREDENTIALS = [
    {
        "sshPublicKey": {
            "source": {"secret": {"secretName": "agent-keys"}},
            "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}},
        }
    }
]


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[LauncherProcess]:
    proc = start_launcher(tmp_path, "agentvmi", str(uuid.uuid4()))
    secret = proc.pod_dir / "volumes" / "private" / "secret" / "agent-keys-access-cred"
    secret.mkdir(parents=True)
    (secret / "key1").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB0 test@host\n")
    yield proc
    proc.stop()


async def watch_until(stream: AsyncIterator[Any], predicate: Any, within: float = 10.0) -> dict[str, Any]:
    async def scan() -> dict[str, Any]:
        async for status in stream:
            if predicate(status):
                return dict(status)
        raise AssertionError("the watch stream ended")

    return await asyncio.wait_for(scan(), within)


async def test_without_an_agent_the_launcher_says_so(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    vmi = defaulted_vmi("agentvmi", launcher.vmi_uid, accessCredentials=CREDENTIALS)
    answer = await launcher.client().sync(vmi)
    assert answer["guestAgent"] == {"connected": False}
    stream = launcher.client().watch()
    offline = await watch_until(stream, lambda s: "accessCredential" in s)
    await stream.aclose()
    assert offline["accessCredential"] == {"succeeded": False, "message": "Guest agent is offline"}
    for command in ("guestinfo", "userlist", "filesystemlist", "freeze", "unfreeze"):
        with pytest.raises(CommandFailed, match="the guest agent is not connected"):
            await launcher.client().request(command)
    # No agent: soft reboot presses the power button instead (the test driver accepts it).
    rebooted = await launcher.client().request("softreboot")
    assert rebooted["domain"]["state"] == "Running"
    # A hard reset needs no agent either.
    reset = await launcher.client().request("reset")
    assert reset["domain"]["state"] == "Running"
    # The screen, as a PNG (the test driver's own image; QEMU's PPM is re-encoded).
    shot = await launcher.client().request("screenshot", move_cursor=False)
    assert base64.b64decode(shot["png"]).startswith(b"\x89PNG\r\n\x1a\n")


class OneVMI:
    """The handler endpoint's VMI lookup: this launcher's VMI, running on node n1."""

    def __init__(self, vmi: dict[str, Any]) -> None:
        self.vmi = vmi

    def get_by_name(self, namespace: str, name: str) -> dict[str, Any] | None:
        meta = self.vmi["metadata"]
        return self.vmi if (namespace, name) == (meta["namespace"], meta["name"]) else None


async def test_handler_endpoint_passes_the_launchers_answer_on(launcher: LauncherProcess) -> None:
    await launcher.wait_ready()
    vmi = defaulted_vmi("agentvmi", launcher.vmi_uid)
    await launcher.client().sync(vmi)
    vmi["status"] = {"phase": "Running", "nodeName": "n1", "activePods": {launcher.pod_uid: "n1"}}
    api = HandlerAPI(node="n1", pods_dir=launcher.pod_dir.parent, vmis=OneVMI(vmi))  # type: ignore[arg-type]
    await api.start()
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{api.port}/v1/namespaces/default/virtualmachineinstances"
            for query in ("guestosinfo", "userlist", "filesystemlist"):
                async with session.get(f"{base}/agentvmi/{query}") as reply:
                    body = await reply.json()
                assert reply.status == 500
                assert body["message"].endswith("the guest agent is not connected")
            async with session.get(f"{base}/other/guestosinfo") as reply:
                assert reply.status == 404
            # A freeze names when the guest thaws by itself; without an agent it is refused as a bad request.
            async with session.put(f"{base}/agentvmi/freeze", json={}) as reply:
                assert (reply.status, (await reply.json())["message"]) == (
                    400,
                    "Unfreeze timeout in freeze request is not set",
                )
            async with session.put(f"{base}/agentvmi/freeze", json={"unfreezeTimeout": "5m0s"}) as reply:
                body = await reply.json()
            assert reply.status == 400
            assert body["message"] == "freeze failed: the guest agent is not connected"
    finally:
        await api.stop()
