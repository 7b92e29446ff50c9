"""The demo guest's qemu-guest-agent through libvirt, and its dropbear: AgentConnected, guestOSInfo, virtctl
guestosinfo/userlist/fslist, the condition dropping when the agent is stopped in the guest, ssh with the cloud-init
key and with a qemuGuestAgent accessCredential, and soft reboot through the agent. One cluster for the module."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pykubevirt.api import pod_layout
from pykubevirt.client.resources import SECRETS, VIRTUAL_MACHINES
from pykubevirt.handler.launcher_client import connectable
from tests.e2e.test_vm_lifecycle import delete_vm, demo_vm
from tests.support.cluster import ClusterView
from tests.support.waiting import eventually

pytestmark = pytest.mark.e2e

AGENT_TIMEOUT = 120.0


def keypair(directory: Path, name: str) -> tuple[Path, str]:
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key, (directory / f"{name}.pub").read_text().strip()


def agent_vm(name: str, user_data: str) -> dict[str, Any]:
    """The demo VM on a masquerade interface that forwards every port (22 for dropbear)."""
    vm = demo_vm(name, user_data=user_data)
    spec = vm["spec"]["template"]["spec"]
    spec["domain"]["devices"]["interfaces"] = [{"name": "default", "masquerade": {}}]
    spec["networks"] = [{"name": "default", "pod": {}}]
    return vm


def condition(vmi: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for entry in ((vmi or {}).get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return dict(entry)
    return None


async def ssh(key: Path, host: str, command: str) -> str | None:
    """`command` run in the guest by the host's ssh client as root; None while dropbear does not let it in."""
    process = await asyncio.create_subprocess_exec(
        "ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
        f"root@{host}", command,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    return out.decode() if process.returncode == 0 else None


async def type_on_console(kube: ClusterView, pod: dict[str, Any], vmi: dict[str, Any], line: str) -> None:
    """Send one command line to the guest's serial console (the socket virt-handler's console endpoint opens)."""
    path = pod_layout.serial_socket(str(kube.node.pods_dir), pod["metadata"]["uid"], vmi["metadata"]["uid"])
    reader, writer = await asyncio.open_unix_connection(connectable(path))
    writer.write(b"\n" + line.encode() + b"\n")
    await writer.drain()
    # The console keeps no input once the client is gone: stay until the guest has echoed the line back (a slow
    # emulated guest may take seconds), or give up after a while and let the caller's check tell.
    echoed = b""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(15):
            while line.encode() not in echoed:
                chunk = await reader.read(4096)
                if not chunk:
                    break
                echoed = echoed[-4096:] + chunk
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


async def test_agent_connects_reports_the_guest_and_drops_when_stopped(kube: ClusterView, tmp_path: Path) -> None:
    ns = await kube.namespace()
    key, public = keypair(tmp_path, "cloud-init-key")
    user_data = f"#cloud-config\nhostname: agent-vm\nssh_authorized_keys:\n  - {public}\n"
    await kube.admin.create(VIRTUAL_MACHINES, agent_vm("agent-vm", user_data), ns)
    vmi = await kube.wait_vmi_phase(ns, "agent-vm", "Running")
    pod = await kube.launcher_pod(vmi)

    async def connected() -> dict[str, Any] | None:
        current = await kube.vmi(ns, "agent-vm")
        found = condition(current, "AgentConnected")
        return current if found and found["status"] == "True" else None

    await eventually(connected, timeout=AGENT_TIMEOUT)

    async def os_reported() -> dict[str, Any] | None:
        current = await kube.vmi(ns, "agent-vm") or {}
        info = (current.get("status") or {}).get("guestOSInfo") or {}
        return info if info.get("name") else None

    os_info = await eventually(os_reported, timeout=60)
    assert os_info["name"] == "pykubevirt guest" and os_info["id"] == "pykubevirt-guest"
    assert os_info["kernelRelease"].endswith("-amd64")
    assert condition(await kube.vmi(ns, "agent-vm"), "AgentVersionNotSupported") is None

    async def guest_os_info() -> tuple[dict[str, Any], str] | None:
        _, out, _ = await kube.run("virtctl", "guestosinfo", "agent-vm", "-n", ns)
        # The agent starts before cloud-init names the guest; the launcher's next poll (10 s on) has the name.
        return (json.loads(out), out) if json.loads(out).get("hostname") == "agent-vm" else None

    body, out = await eventually(guest_os_info, timeout=60, interval=2.0)
    assert body["os"]["prettyName"] == "pykubevirt demo guest 1 (busybox)"
    assert body["guestAgentVersion"].startswith("7.")
    assert out.startswith('{\n  "guestAgentVersion"')

    # The agent's eth0 joins the domain's interface by MAC; behind masquerade the pod IP stays the address.
    async def joined() -> dict[str, Any] | None:
        current = await kube.vmi(ns, "agent-vm") or {}
        first = ((current.get("status") or {}).get("interfaces") or [{}])[0]
        return first if first.get("interfaceName") == "eth0" else None

    interface = await eventually(joined, timeout=60)
    assert interface["infoSource"] == "domain, guest-agent"
    assert interface["ipAddress"] == pod["status"]["podIP"]
    _, out, _ = await kube.run("virtctl", "userlist", "agent-vm", "-n", ns)
    assert json.loads(out) == {"metadata": {}, "items": []}
    _, out, _ = await kube.run("virtctl", "fslist", "agent-vm", "-n", ns)
    assert "items" in json.loads(out)

    # dropbear lets the cloud-init key in, through masquerade at the pod IP.
    pod_ip = pod["status"]["podIP"]
    hostname = await eventually(lambda: ssh(key, pod_ip, "hostname"), timeout=60, interval=1.0)
    assert hostname.strip() == "agent-vm"

    # A freeze through virt-api (what a snapshot of the running VM asks for): the handler reports it, then the thaw.
    freeze_path = f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/agent-vm"
    await kube.admin.request("PUT", f"{freeze_path}/freeze", body={"unfreezeTimeout": "1m0s"})

    async def freeze_status(wanted: str | None) -> bool:
        current = await kube.vmi(ns, "agent-vm") or {}
        return (current.get("status") or {}).get("fsFreezeStatus") == wanted

    await eventually(lambda: freeze_status("frozen"), timeout=30)
    await kube.admin.request("PUT", f"{freeze_path}/unfreeze", body={})
    await eventually(lambda: freeze_status(None), timeout=30)

    # Stopping the agent in the guest closes its port: libvirt sees the channel disconnect, the condition goes.
    await type_on_console(kube, pod, vmi, "killall qemu-ga")

    async def disconnected() -> bool:
        return condition(await kube.vmi(ns, "agent-vm"), "AgentConnected") is None

    await eventually(disconnected, timeout=60)
    code, _, err = await kube.run("virtctl", "guestosinfo", "agent-vm", "-n", ns, check=False)
    assert code == 1
    assert "VMI does not have guest agent connected" in err
    await delete_vm(kube, ns, "agent-vm")


async def test_access_credentials_through_the_agent_and_soft_reboot(kube: ClusterView, tmp_path: Path) -> None:
    ns = await kube.namespace()
    key, public = keypair(tmp_path, "agent-key")
    secret = {"metadata": {"name": "agent-keys"}, "stringData": {"key1": public + "\n"}}
    await kube.admin.create(SECRETS, secret, ns)
    vm = agent_vm("cred-vm", "#cloud-config\nhostname: cred-vm\n")
    vm["spec"]["template"]["spec"]["accessCredentials"] = [
        {
            "sshPublicKey": {
                "source": {"secret": {"secretName": "agent-keys"}},
                "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}},
            }
        }
    ]
    await kube.admin.create(VIRTUAL_MACHINES, vm, ns)
    vmi = await kube.wait_vmi_phase(ns, "cred-vm", "Running")
    pod = await kube.launcher_pod(vmi)

    async def synced() -> bool:
        found = condition(await kube.vmi(ns, "cred-vm"), "AccessCredentialsSynchronized")
        return bool(found) and found["status"] == "True"

    await eventually(synced, timeout=AGENT_TIMEOUT)
    try:
        hostname = await eventually(lambda: ssh(key, pod["status"]["podIP"], "hostname"), timeout=60, interval=1.0)
    except AssertionError:
        await type_on_console(kube, pod, vmi, "ls -la /root/.ssh; cat /root/.ssh/authorized_keys; echo END-OF-KEYS")
        console = await kube.wait_serial(kube.node, pod, vmi, "END-OF-KEYS\r\n")
        _, logs, _ = await kube.run("kubectl", "logs", "-n", ns, pod["metadata"]["name"], check=False)
        raise AssertionError(f"ssh with the agent's key failed:\n{console[-1500:]}\n{logs[-3000:]}") from None
    assert hostname.strip() == "cred-vm"
    assert ("Normal", "AccessCredentialsSyncSuccess") in await kube.events(ns, "cred-vm")

    # A second key, added as users add them (`virtctl credentials add-ssh-key`), reaches the running guest through
    # the agent. The secret is the user's own, not the VM's: --force.
    second, second_public = keypair(tmp_path, "second-key")
    argv = ("credentials", "add-ssh-key", "-n", ns, "--user", "root", "--value", second_public, "--force", "cred-vm")
    _, out, _ = await kube.run("virtctl", *argv)
    assert out == 'Successfully added the key to secret "agent-keys"\n'
    hostname = await eventually(lambda: ssh(second, pod["status"]["podIP"], "hostname"), timeout=AGENT_TIMEOUT)
    assert hostname.strip() == "cred-vm"

    # With the agent there, soft reboot goes through it (guest-shutdown mode=reboot), not the power button, which
    # would power this guest off.
    await kube.run("virtctl", "soft-reboot", "cred-vm", "-n", ns)
    console = await kube.wait_serial(kube.node, pod, vmi, "pykubevirt-guest: reboot")
    assert "power button" not in console

    async def booted_twice() -> bool:
        text = kube.serial_log(kube.node, pod, vmi).read_text(errors="replace")
        return text.count("pykubevirt-guest: booted") >= 2

    await eventually(booted_twice, timeout=AGENT_TIMEOUT)
    assert (await kube.vmi(ns, "cred-vm") or {})["status"]["phase"] == "Running"
    await delete_vm(kube, ns, "cred-vm")
