"""subresources.kubevirt.io on the embedded API server: VM start/stop/restart per RunStrategy, VMI operations proxied
to a (fake) virt-handler, websocket streams, and the real `virtctl` console script end to end."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import ssl
import sys
import termios
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pykubevirt.client.api import JSON_PATCH
from pykubevirt.client.resources import (
    MIGRATIONS,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    VIRTUAL_MACHINE_INSTANCES,
    VIRTUAL_MACHINES,
)
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import ControlPlane, start_control_plane, vm_manifest
from tests.support.fake_handler import CONSOLE_GREETING, RFB_BANNER, SCREEN_PNG, USBREDIR_HELLO, FakeHandler
from tests.support.http_client import APIClient, Reply
from tests.support.waiting import consistently, eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUB = "/apis/subresources.kubevirt.io/v1"
VIRTCTL = str(Path(sys.executable).parent / "virtctl")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cp(apiserver: APIServerProcess) -> AsyncIterator[ControlPlane]:
    plane = await start_control_plane(apiserver)
    yield plane
    await plane.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def handler(cp: ControlPlane) -> AsyncIterator[FakeHandler]:
    async def command(action: str, namespace: str, name: str) -> None:
        if action in ("pause", "unpause"):
            await cp.node.set_paused(f"{namespace}/{name}", action == "pause")

    fake = await FakeHandler(cp.admin, cp.node.name, command).start()
    yield fake
    await fake.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def http(apiserver: APIServerProcess) -> AsyncIterator[APIClient]:
    async with APIClient(apiserver) as client:
        yield client


def vm_path(ns: str, name: str, action: str, version: str = "v1") -> str:
    return f"/apis/subresources.kubevirt.io/{version}/namespaces/{ns}/virtualmachines/{name}/{action}"


def vmi_path(ns: str, name: str, action: str) -> str:
    return f"{SUB}/namespaces/{ns}/virtualmachineinstances/{name}/{action}"


def conflict(name: str, why: str, resource: str = "virtualmachine") -> str:
    return f'Operation cannot be fulfilled on {resource}.kubevirt.io "{name}": {why}'


def assert_status(reply: Reply, code: int, message: str) -> None:
    assert reply.status == code, reply.body
    assert reply.body["kind"] == "Status" and reply.body["code"] == code
    assert reply.message == message


async def running_vm(cp: ControlPlane, ns: str, name: str, strategy: str = "Always") -> dict[str, Any]:
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest(name, strategy), ns)
    if strategy == "Manual":
        await cp.admin.request("PUT", vm_path(ns, name, "start"), body={})
    await cp.wait_printable(ns, name, "Running")
    vmi = await cp.vmi(ns, name)
    assert vmi is not None
    return vmi


# ------------------------------------------------------------------------------------------------------ API surface


async def test_discovery_and_version(http: APIClient) -> None:
    for version in ("v1", "v1alpha3"):
        listing = await http.get(f"/apis/subresources.kubevirt.io/{version}")
        assert listing.status == 200 and listing.body["kind"] == "APIResourceList"
        names = {r["name"]: r["verbs"] for r in listing.body["resources"]}
        assert names["virtualmachines/start"] == ["update"] and names["virtualmachineinstances/console"] == ["get"]
        info = await http.get(f"/apis/subresources.kubevirt.io/{version}/version")
        assert info.status == 200 and info.body["gitVersion"].startswith("v")
    groups = await http.get("/apis")
    group = next(g for g in groups.body["groups"] if g["name"] == "subresources.kubevirt.io")
    assert [v["version"] for v in group["versions"]] == ["v1", "v1alpha3"]
    health = await http.get(f"{SUB}/healthz")
    assert health.status == 200 and health.body["apiserver"]["connectivity"] == "ok"


async def test_authentication_is_required(apiserver: APIServerProcess) -> None:
    async with APIClient(apiserver, token=None) as anonymous:
        for reply in (
            await anonymous.put(vm_path("default", "x", "start"), {}),
            await anonymous.get(f"{SUB}/version"),
        ):
            assert_status(reply, 401, "Unauthorized")
    async with APIClient(apiserver, token="not-a-token") as stranger:
        assert (await stranger.put(vm_path("default", "x", "stop"), {})).status == 401


async def test_unknown_paths_and_methods(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    assert (await http.put(vm_path(ns, "x", "frobnicate"), {})).status == 404
    assert (await http.get(vm_path(ns, "x", "start"))).status == 405
    assert_status(await http.put(vm_path(ns, "nope", "start"), {}), 404, 'virtualmachine.kubevirt.io "nope" not found')
    assert_status(
        await http.put(vmi_path(ns, "nope", "pause"), {}), 404, 'virtualmachineinstance.kubevirt.io "nope" not found'
    )
    reply = await http.request("PUT", vm_path(ns, "x", "stop"), raw=b"[1]")
    assert_status(
        reply,
        400,
        "Can not unmarshal Request body to struct, error: json: cannot unmarshal array into Go value of type "
        "v1.StopOptions",
    )


# ------------------------------------------------------------------------------------------------------ VM lifecycle


async def test_halted_start_and_stop(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("h", "Halted"), ns)
    assert_status(await http.put(vm_path(ns, "h", "stop"), {}), 409, conflict("h", "VM is not running"))
    reply = await http.put(vm_path(ns, "h", "start"), {})
    assert reply.status == 202 and reply.body is None
    assert (await cp.vm(ns, "h") or {})["spec"]["runStrategy"] == "Always"
    await cp.wait_printable(ns, "h", "Running")
    assert_status(await http.put(vm_path(ns, "h", "start"), {}), 409, conflict("h", "VM is already running"))
    assert (await http.put(vm_path(ns, "h", "stop"), {})).status == 202
    assert (await cp.vm(ns, "h") or {})["spec"]["runStrategy"] == "Halted"
    await cp.wait_printable(ns, "h", "Stopped")


async def test_manual_uses_state_change_requests(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    vmi = await running_vm(cp, ns, "m", "Manual")
    assert (await http.put(vm_path(ns, "m", "stop"), {})).status == 202
    await cp.wait_vmi_gone(ns, "m", vmi["metadata"]["uid"])
    await cp.wait_printable(ns, "m", "Stopped")
    vm = await cp.vm(ns, "m") or {}
    assert vm["spec"]["runStrategy"] == "Manual", "a manual stop keeps the RunStrategy"
    assert_status(await http.put(vm_path(ns, "m", "stop"), {}), 409, conflict("m", "VM is not running"))
    assert_status(await http.put(vm_path(ns, "m", "restart"), {}), 409, conflict("m", "VM is not running: Halted"))


async def test_always_and_once(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    first = await running_vm(cp, ns, "a")
    assert_status(await http.put(vm_path(ns, "a", "start"), {}), 409, conflict("a", "VM is already running"))
    assert (await http.put(vm_path(ns, "a", "restart", "v1alpha3"), {})).status == 202
    second = await cp.wait_vmi_phase(ns, "a", "Running", other_than_uid=first["metadata"]["uid"])
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert (await http.put(vm_path(ns, "a", "stop"), {})).status == 202
    await cp.wait_printable(ns, "a", "Stopped")
    assert (await cp.vm(ns, "a") or {})["spec"]["runStrategy"] == "Halted"

    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("o", "Once"), ns)
    await cp.wait_printable(ns, "o", "Running")
    message = conflict("o", "RunStategy Once does not support manual restart requests")
    assert_status(await http.put(vm_path(ns, "o", "restart"), {}), 409, message)
    assert_status(await http.put(vm_path(ns, "o", "start"), {}), 409, conflict("o", "VM is already running"))


async def test_restart_grace_period(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    assert_status(
        await http.put(vm_path(ns, "r", "restart"), {"gracePeriodSeconds": 5}),
        400,
        "For force restart, only gracePeriod=0 is supported for now",
    )
    first = await running_vm(cp, ns, "r")
    assert (await http.put(vm_path(ns, "r", "restart"), {"gracePeriodSeconds": 0})).status == 202
    # The old VMI was told to shut down within 1 s before it was stopped.
    old = await cp.vmi(ns, "r")
    if old is not None and old["metadata"]["uid"] == first["metadata"]["uid"]:
        assert old["spec"]["terminationGracePeriodSeconds"] == 1
    await cp.wait_vmi_phase(ns, "r", "Running", other_than_uid=first["metadata"]["uid"])


async def test_stop_with_grace_period_patches_the_vmi(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    vmi = await running_vm(cp, ns, "g")
    assert (await http.put(vm_path(ns, "g", "stop"), {"gracePeriod": 3})).status == 202
    after = await cp.vmi(ns, "g")
    if after is not None and after["metadata"]["uid"] == vmi["metadata"]["uid"]:
        assert after["spec"]["terminationGracePeriodSeconds"] == 3
    await cp.wait_vmi_gone(ns, "g", vmi["metadata"]["uid"])


async def test_dry_run_changes_nothing(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("d", "Halted"), ns)
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("dm", "Manual"), ns)
    dry = {"dryRun": ["All"]}
    for name in ("d", "dm"):
        await cp.wait_printable(ns, name, "Stopped")
        assert (await http.put(vm_path(ns, name, "start"), dry)).status == 202

    async def still_stopped() -> bool:
        for name, strategy in (("d", "Halted"), ("dm", "Manual")):
            vm = await cp.vm(ns, name) or {}
            assert vm["spec"]["runStrategy"] == strategy
            assert not (vm.get("status") or {}).get("stateChangeRequests")
            assert await cp.vmi(ns, name) is None
        return True

    await consistently(still_stopped, for_=0.5)
    vmi = await running_vm(cp, ns, "dr")
    before = await cp.vm(ns, "dr") or {}
    for action, body in (("stop", {**dry, "gracePeriod": 0}), ("restart", {**dry, "gracePeriodSeconds": 0})):
        assert (await http.put(vm_path(ns, "dr", action), body)).status == 202

    async def still_running() -> bool:
        after = await cp.vm(ns, "dr") or {}
        assert after["spec"] == before["spec"] and not (after.get("status") or {}).get("stateChangeRequests")
        current = await cp.vmi(ns, "dr") or {}
        assert current["metadata"]["uid"] == vmi["metadata"]["uid"]
        assert "terminationGracePeriodSeconds" not in current["spec"], "the VMI's grace period is untouched"
        assert (await cp.printable(ns, "dr")) == "Running"
        return True

    await consistently(still_running, for_=0.5)


# ------------------------------------------------------------------------------------------------------ VMI via handler


async def test_pause_unpause_through_the_handler(cp: ControlPlane, http: APIClient, handler: FakeHandler) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "p")
    handler.calls.clear()
    assert (await http.put(vmi_path(ns, "p", "pause"), {"dryRun": ["All"]})).status == 200
    assert handler.calls == [], "a dry run does not reach virt-handler"
    reply = await http.put(vmi_path(ns, "p", "pause"), {})
    assert reply.status == 200
    assert handler.calls[0][:2] == ("PUT", f"/v1/namespaces/{ns}/virtualmachineinstances/p/pause")

    async def paused() -> bool:
        vmi = await cp.vmi(ns, "p") or {}
        return any(c["type"] == "Paused" for c in (vmi.get("status") or {}).get("conditions") or [])

    await eventually(paused)
    assert_status(
        await http.put(vmi_path(ns, "p", "pause"), {}),
        409,
        conflict("p", "VMI is already paused", "virtualmachineinstance"),
    )
    assert (await http.put(vmi_path(ns, "p", "unpause"), {})).status == 200
    await eventually(lambda: _not(paused))
    assert_status(
        await http.put(vmi_path(ns, "p", "unpause"), {}),
        409,
        conflict("p", "VMI is not paused", "virtualmachineinstance"),
    )
    assert (await http.put(vmi_path(ns, "p", "softreboot"), None)).status == 200
    assert handler.calls[-1][1].endswith("/p/softreboot")
    assert (await http.put(vmi_path(ns, "p", "reset"), None)).status == 200
    assert handler.calls[-1][1].endswith("/p/reset")
    message = conflict("p", "VMI does not have guest agent connected", "virtualmachineinstance")
    assert_status(await http.get(vmi_path(ns, "p", "guestosinfo")), 409, message)


async def _not(probe: Any) -> bool:
    return not await probe()


async def test_handler_errors_pass_through(cp: ControlPlane, http: APIClient, handler: FakeHandler) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "e")
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "domain is gone", "code": 500}
    handler.failure = (500, {**status, "reason": "InternalError"})
    try:
        reply = await http.put(vmi_path(ns, "e", "pause"), {})
    finally:
        handler.failure = None
    assert_status(reply, 500, "domain is gone")
    handler.failure = (500, {**status, "reason": "InternalError"})
    try:
        reply = await http.put(vmi_path(ns, "e", "reset"), None)
    finally:
        handler.failure = None
    # KubeVirt answers a failed reset as its own internal error.
    assert_status(reply, 500, "Internal error occurred: domain is gone")
    await handler.publish(None)
    try:
        reply = await http.put(vmi_path(ns, "e", "pause"), {})
    finally:
        await handler.publish(f"127.0.0.1:{handler.port}")
    assert reply.status == 503 and reply.body["reason"] == "ServiceUnavailable"
    assert "pykubevirt.io/virt-handler-address" in reply.message


async def test_failed_vmi_of_a_manual_vm(cp: ControlPlane, http: APIClient, handler: FakeHandler) -> None:
    ns = await cp.namespace()
    vmi = await running_vm(cp, ns, "f", "Manual")
    await cp.node.set_phase(f"{ns}/f", "Failed")
    await cp.wait_printable(ns, "f", "Stopped")
    # Manual keeps the final VMI: the VMI subresources refuse it before virt-handler is asked.
    handler.calls.clear()
    message = conflict("f", "VM is not running", "virtualmachineinstance")
    assert_status(await http.put(vmi_path(ns, "f", "pause"), {}), 409, message)
    message = conflict("f", "VMI is in failed status", "virtualmachineinstance")
    assert_status(await http.get(vmi_path(ns, "f", "console")), 409, message)
    assert handler.calls == []
    assert_status(await http.put(vm_path(ns, "f", "stop"), {}), 409, conflict("f", "VM is not running"))
    # Starting a Manual VM whose VMI is final stops that VMI and starts a new one.
    assert (await http.put(vm_path(ns, "f", "start"), {})).status == 202
    await cp.wait_vmi_phase(ns, "f", "Running", other_than_uid=vmi["metadata"]["uid"])


# ------------------------------------------------------------------------------------------------------ websockets


def _ssl(server: APIServerProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.ca_file()))


async def test_console_and_vnc_streams(cp: ControlPlane, apiserver: APIServerProcess, handler: FakeHandler) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "c")
    headers = {"Authorization": f"Bearer {apiserver.token()}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=_ssl(apiserver))) as session:
        async with session.ws_connect(
            apiserver.url + vmi_path(ns, "c", "console"), headers=headers, protocols=("plain.kubevirt.io",)
        ) as ws:
            assert ws.protocol == "plain.kubevirt.io"
            greeting = await ws.receive(timeout=10)
            assert greeting.data == CONSOLE_GREETING
            await ws.send_bytes(b"root\r")
            echo = await ws.receive(timeout=10)
            assert echo.type == aiohttp.WSMsgType.BINARY and echo.data == b"root\r"
        async with session.ws_connect(
            apiserver.url + vmi_path(ns, "c", "vnc") + "?preserveSession=true", headers=headers
        ) as ws:
            assert (await ws.receive(timeout=10)).data == RFB_BANNER
        assert handler.calls[-1][1].endswith("/c/vnc?preserveSession=true")
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(apiserver.url + vmi_path(ns, "c", "console"))
        assert refused.value.status == 401
    assert "plain.kubevirt.io" in handler.protocols


async def test_console_refusals(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    manifest = vm_manifest("nc", "Always")
    manifest["spec"]["template"]["spec"]["domain"]["devices"]["autoattachSerialConsole"] = False
    manifest["spec"]["template"]["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = False
    await cp.admin.create(VIRTUAL_MACHINES, manifest, ns)
    await cp.wait_printable(ns, "nc", "Running")
    assert_status(await http.get(vmi_path(ns, "nc", "console")), 400, "No serial consoles are present.")
    assert_status(await http.get(vmi_path(ns, "nc", "vnc")), 400, "No graphics devices are present.")
    assert_status(
        await http.get(vmi_path(ns, "gone", "console")), 404, 'virtualmachineinstance.kubevirt.io "gone" not found'
    )


# ------------------------------------------------------------------------------------------------------ virtctl


def virtctl_env(server: APIServerProcess, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update({"KUBECONFIG": str(server.kubeconfig), "HOME": str(home)})
    return env


async def virtctl(server: APIServerProcess, home: Path, *args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        VIRTCTL,
        *args,
        env=virtctl_env(server, home),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_virtctl_lifecycle(cp: ControlPlane, apiserver: APIServerProcess, tmp_path: Path) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("vc", "Halted"), ns)
    run = lambda *args: virtctl(apiserver, tmp_path, *args)  # noqa: E731

    assert await run("-n", ns, "start", "vc", "--dry-run") == (
        0,
        "Dry Run execution\nVM vc was scheduled to start\n",
        "",
    )
    assert (await cp.vm(ns, "vc") or {})["spec"]["runStrategy"] == "Halted"
    assert await run("start", "vc", "-n", ns) == (0, "VM vc was scheduled to start\n", "")
    await cp.wait_printable(ns, "vc", "Running")
    code, out, err = await run("start", "vc", f"--namespace={ns}")
    assert (code, out) == (1, "")
    assert err == f"Error starting VirtualMachine {conflict('vc', 'VM is already running')}\n"
    assert await run("restart", "vc", "-n", ns) == (0, "VM vc was scheduled to restart\n", "")
    assert await run("stop", "vc", "-n", ns, "--grace-period=0") == (
        1,
        "",
        "Must both use --force=true and set --grace-period.\n",
    )
    await cp.wait_printable(ns, "vc", "Running")
    assert await run("stop", "vc", "-n", ns) == (0, "VM vc was scheduled to stop\n", "")
    await cp.wait_printable(ns, "vc", "Stopped")
    assert await run("stop", "vc", "-n", ns) == (
        1,
        "",
        f"error stopping VirtualMachine {conflict('vc', 'VM is not running')}\n",
    )
    code, _, err = await run("restart", "vc", "-n", ns, "--grace-period", "0", "--force")
    assert (code, err) == (
        1,
        "error force restarting VirtualMachine: "
        + conflict("vc", "RunStategy Halted does not support manual restart requests")
        + "\n",
    )
    code, _, err = await run("start", "missing", "-n", ns)
    assert (code, err) == (1, 'Error starting VirtualMachine virtualmachine.kubevirt.io "missing" not found\n')
    code, _, err = await run("pause", "vm", "vc", "-n", ns)
    assert (code, err) == (1, "Error pausing VirtualMachineInstance vc. VirtualMachine vc is not set to run\n")
    code, out, err = await run("version")
    assert code == 0 and err == ""
    client, server = out.splitlines()
    assert client.startswith('Client Version: version.Info{GitVersion:"v')
    assert server.startswith('Server Version: version.Info{GitVersion:"v')


async def test_virtctl_pause_unpause_console_vnc(
    cp: ControlPlane, apiserver: APIServerProcess, handler: FakeHandler, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "vp")
    run = lambda *args, stdin=None: virtctl(apiserver, tmp_path, "-n", ns, *args, stdin=stdin)  # noqa: E731
    assert await run("pause", "vm", "vp", "--dry-run") == (0, "Dry Run execution\nVMI vp was scheduled to pause\n", "")
    assert await run("pause", "vmi", "vp") == (0, "VMI vp was scheduled to pause\n", "")
    await cp.wait_printable(ns, "vp", "Paused")
    code, _, err = await run("pause", "VMI", "vp")
    assert (code, err) == (
        1,
        "Error pausing VirtualMachineInstance vp: "
        + conflict("vp", "VMI is already paused", "virtualmachineinstance")
        + "\n",
    )
    assert await run("unpause", "vm", "vp") == (0, "VMI vp was scheduled to unpause\n", "")
    await cp.wait_printable(ns, "vp", "Running")
    assert await run("soft-reboot", "vp") == (0, "VMI vp was scheduled to soft-reboot\n", "")
    assert await run("reset", "vp") == (0, "VMI vp was scheduled to reset\n", "")
    shot = tmp_path / "screen.png"
    assert await run("vnc", "screenshot", "vp", "--file", str(shot), "--move-cursor") == (0, "", "")
    assert shot.read_bytes() == SCREEN_PNG
    assert handler.calls[-1][1].endswith("/vp/vnc/screenshot?moveCursor=true")
    code, _, err = await run("vnc", "screenshot", "vp")
    assert (code, err) == (1, 'required flag(s) "file" not set\n')

    code, out, err = await run("console", "vp", stdin=b"hello\r")
    assert code == 0, err
    assert err == "Successfully connected to vp console. Press Ctrl+] or Ctrl+5 to exit console.\n"
    assert out == (CONSOLE_GREETING + b"hello\r").decode()
    code, out, err = await run("console", "nothere", "--timeout", "1")
    assert (code, out, err) == (1, "", 'virtualmachineinstance.kubevirt.io "nothere" not found\n')

    process = await asyncio.create_subprocess_exec(
        VIRTCTL,
        "-n",
        ns,
        "vnc",
        "vp",
        "--proxy-only",
        env=virtctl_env(apiserver, tmp_path),
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        port = json.loads(line)["port"]
        assert line.decode() == json.dumps({"port": port}, separators=(",", ":")) + "\n"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.readexactly(len(RFB_BANNER)), 10) == RFB_BANNER
        writer.write(b"RFB 003.008\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(12), 10) == b"RFB 003.008\n"
        writer.close()
        assert await asyncio.wait_for(process.wait(), 10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_virtctl_usbredir_proxies_a_local_port_to_the_vmis_usb_redirection(
    cp: ControlPlane, apiserver: APIServerProcess, handler: FakeHandler, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    manifest = vm_manifest("usb", "Always")
    manifest["spec"]["template"]["spec"]["domain"]["devices"]["clientPassthrough"] = {}
    await cp.admin.create(VIRTUAL_MACHINES, manifest, ns)
    await cp.wait_printable(ns, "usb", "Running")
    await running_vm(cp, ns, "plain")
    run = lambda *args: virtctl(apiserver, tmp_path, "-n", ns, *args)  # noqa: E731
    code, _, err = await run("usbredir", "--no-launch", "plain")
    assert (code, err) == (
        1,
        "Can't access VMI plain: "
        + conflict("plain", "Not configured with USB Redirection", "virtualmachineinstance")
        + "\n",
    )
    assert (await run("usbredir", "usb"))[::2] == (1, "Missing argument\n")

    process = await asyncio.create_subprocess_exec(
        VIRTCTL, "-n", ns, "usbredir", "usb", "--no-launch",
        env=virtctl_env(apiserver, tmp_path), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stderr is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith("User can connect usbredir client at: 127.0.0.1:")
        reader, writer = await asyncio.open_connection("127.0.0.1", int(line.rsplit(":", 1)[1]))
        assert await asyncio.wait_for(reader.readexactly(len(USBREDIR_HELLO)), 10) == USBREDIR_HELLO
        assert handler.calls[-1][1].endswith("/usb/usbredir")
        writer.close()
        # The session ends with the client, reported as KubeVirt's virtctl does.
        assert await asyncio.wait_for(process.wait(), 10) == 1
        assert (await process.stderr.read()).decode() == "Remote connection has closed.\n"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_virtctl_console_on_a_terminal(
    cp: ControlPlane, apiserver: APIServerProcess, handler: FakeHandler, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "tty")
    master, slave = pty.openpty()
    before = termios.tcgetattr(slave)
    process = await asyncio.create_subprocess_exec(
        VIRTCTL,
        "-n",
        ns,
        "console",
        "tty",
        env=virtctl_env(apiserver, tmp_path),
        stdin=slave,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        # The guest's first bytes arrive once the terminal is raw: keys then go through unprocessed.
        assert await asyncio.wait_for(process.stdout.readexactly(len(CONSOLE_GREETING)), 30) == CONSOLE_GREETING
        assert not termios.tcgetattr(slave)[3] & termios.ICANON
        os.write(master, b"ls\r")
        assert await asyncio.wait_for(process.stdout.readexactly(3), 10) == b"ls\r"
        os.write(master, b"\x1d")
        assert await asyncio.wait_for(process.wait(), 10) == 0
        assert (await process.stderr.read()).decode() == (
            "Successfully connected to tty console. Press Ctrl+] or Ctrl+5 to exit console.\n"
        )
        assert termios.tcgetattr(slave) == before, "the terminal is restored"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(master)
        os.close(slave)


async def test_start_paused(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("sp", "Halted"), ns)
    await cp.wait_printable(ns, "sp", "Stopped")
    assert (await http.put(vm_path(ns, "sp", "start"), {"paused": True})).status == 202

    async def started() -> dict[str, Any] | None:
        return await cp.vmi(ns, "sp")

    vmi = await eventually(started)
    assert vmi["spec"]["startStrategy"] == "Paused"
    assert (await cp.vm(ns, "sp") or {})["spec"]["runStrategy"] == "Always"


# ------------------------------------------------------------------------------------------------------ volumes


def _volume_names(spec: dict[str, Any]) -> list[str]:
    return [v["name"] for v in spec.get("volumes") or []]


async def test_virtctl_addvolume_and_removevolume(
    cp: ControlPlane, apiserver: APIServerProcess, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    await running_vm(cp, ns, "hp")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "disk1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}},
    }
    await cp.admin.create(PERSISTENT_VOLUME_CLAIMS, claim, ns)
    run = lambda *args: virtctl(apiserver, tmp_path, "-n", ns, *args)  # noqa: E731

    async def specs() -> tuple[dict[str, Any], dict[str, Any]]:
        vm, vmi = await cp.vm(ns, "hp"), await cp.vmi(ns, "hp")
        assert vm is not None and vmi is not None
        return vm["spec"]["template"]["spec"], vmi["spec"]

    assert await run("addvolume", "hp", "--volume-name=nothing") == (
        1,
        "",
        "error adding volume, Volume nothing is not a DataVolume or PersistentVolumeClaim\n",
    )
    assert await run("addvolume", "hp", "--volume-name=disk1", "--dry-run") == (
        0,
        "Dry Run execution\nSuccessfully submitted add volume request to VM hp for volume disk1\n",
        "",
    )
    assert _volume_names((await specs())[1]) == ["root"]

    # Without --persist: the VMI only.
    ok = (0, "Successfully submitted add volume request to VM hp for volume disk1\n", "")
    assert await run("addvolume", "hp", "--volume-name=disk1", "--cache=writethrough") == ok
    template, spec = await specs()
    assert _volume_names(template) == ["root"]
    assert spec["volumes"][-1] == {
        "name": "disk1",
        "persistentVolumeClaim": {"claimName": "disk1", "hotpluggable": True},
    }
    disk = spec["domain"]["devices"]["disks"][-1]
    assert (disk["name"], disk["disk"], disk["serial"], disk["cache"]) == (
        "disk1",
        {"bus": "scsi"},
        "disk1",
        "writethrough",
    )
    exists = conflict(
        "hp", "Unable to add volume [disk1] because volume with that name already exists", "virtualmachineinstance"
    )
    assert await run("addvolume", "hp", "--volume-name=disk1") == (1, "", f"error adding volume, {exists}\n")
    not_hotplug = conflict(
        "hp", "Unable to remove volume [root] because it is not hotpluggable", "virtualmachineinstance"
    )
    assert await run("removevolume", "hp", "--volume-name=root") == (1, "", f"error removing volume, {not_hotplug}\n")
    removed = (0, "Successfully submitted remove volume request to VM hp for volume disk1\n", "")
    assert await run("removevolume", "hp", "--volume-name=disk1") == removed
    assert _volume_names((await specs())[1]) == ["root"]
    missing = conflict("hp", "Unable to remove volume [disk1] because it does not exist", "virtualmachineinstance")
    assert await run("removevolume", "hp", "--volume-name=disk1") == (1, "", f"error removing volume, {missing}\n")

    # With --persist: the VM's template and its running VMI.
    assert await run("addvolume", "hp", "--volume-name=disk1", "--persist", "--serial=s-1", "--bus=virtio") == ok
    template, spec = await specs()
    assert _volume_names(template) == _volume_names(spec) == ["root", "disk1"]
    assert template["domain"]["devices"]["disks"][-1] == {"name": "disk1", "disk": {"bus": "virtio"}, "serial": "s-1"}

    # The running VMI already has the volume: the VM needs no restart for it.
    async def no_restart_required() -> bool:
        vm = await cp.vm(ns, "hp")
        assert vm is not None
        return all(x["type"] != "RestartRequired" for x in (vm.get("status") or {}).get("conditions") or [])

    await consistently(no_restart_required, for_=2.0, interval=0.2)
    assert await run("removevolume", "hp", "--volume-name=disk1", "--persist") == removed
    template, spec = await specs()
    assert _volume_names(template) == _volume_names(spec) == ["root"]


async def test_volume_subresource_refusals(cp: ControlPlane, http: APIClient) -> None:
    ns = await cp.namespace()
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("hpr", "Halted"), ns)
    reply = await http.put(vmi_path(ns, "hpr", "addvolume"), None)
    assert_status(reply, 400, "Request with no body, a new name is expected as the request body")
    reply = await http.put(vm_path(ns, "hpr", "addvolume"), {"name": "x", "volumeSource": {}})
    assert_status(reply, 400, "AddVolumeOptions requires disk to not be nil")
    reply = await http.put(vm_path(ns, "hpr", "removevolume"), {})
    assert_status(reply, 400, "RemoveVolumeOptions requires name to be set")
    reply = await http.put(vmi_path(ns, "hpr", "removevolume"), {"name": "x"})
    assert_status(reply, 404, 'virtualmachineinstance.kubevirt.io "hpr" not found')
    # A stopped VM's template still takes the volume (it is attached at the next start).
    body = {
        "name": "x",
        "disk": {"disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "x"}},
    }
    reply = await http.put(vm_path(ns, "hpr", "addvolume"), body)
    assert reply.status == 202, reply.body
    vm = await cp.vm(ns, "hpr")
    assert vm is not None and _volume_names(vm["spec"]["template"]["spec"]) == ["root", "x"]


async def test_virtctl_migrate_and_migrate_cancel(
    cp: ControlPlane, apiserver: APIServerProcess, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    run = lambda *args: virtctl(apiserver, tmp_path, "-n", ns, *args)  # noqa: E731
    await cp.admin.create(VIRTUAL_MACHINES, vm_manifest("mv", "Halted"), ns)
    code, out, err = await run("migrate", "mv")
    assert (code, out) == (1, "")
    assert err == f"Error migrating VirtualMachine {conflict('mv', 'VM is not running')}\n"
    assert await run("migrate-cancel", "mv") == (1, "", "Found no migration to cancel for mv\n")
    await cp.admin.delete(VIRTUAL_MACHINES, "mv", ns)

    await running_vm(cp, ns, "mv2")
    assert await run("migrate", "mv2", "--dry-run") == (0, "VM mv2 was scheduled to migrate\n", "")
    assert (await cp.admin.list(MIGRATIONS, ns))["items"] == []
    assert await run("migrate", "mv2") == (0, "VM mv2 was scheduled to migrate\n", "")
    migrations = (await cp.admin.list(MIGRATIONS, ns))["items"]
    assert len(migrations) == 1
    created = migrations[0]
    assert created["metadata"]["name"].startswith("kubevirt-migrate-vm-")
    assert created["spec"] == {"vmiName": "mv2"}
    assert created["metadata"]["labels"]["kubevirt.io/vmi-name"] == "mv2"
    assert await run("migrate-cancel", "mv2") == (0, "VM mv2 was scheduled to migrate-cancel\n", "")

    async def cancelled() -> bool:
        items = (await cp.admin.list(MIGRATIONS, ns))["items"]
        return all((m.get("status") or {}).get("phase") == "Failed" for m in items)

    await eventually(cancelled)
    assert await run("migrate-cancel", "mv2") == (1, "", "Found no migration to cancel for mv2\n")


async def test_evacuate_cancel_unmarks_a_vmi_unless_its_node_is_drain_tainted(
    cp: ControlPlane, apiserver: APIServerProcess, http: APIClient, tmp_path: Path
) -> None:
    ns = await cp.namespace()
    vmi = await running_vm(cp, ns, "ev")
    node = vmi["status"]["nodeName"]
    run = lambda *args: virtctl(apiserver, tmp_path, "-n", ns, *args)  # noqa: E731

    async def evacuation() -> str | None:
        found = await cp.vmi(ns, "ev")
        return ((found or {}).get("status") or {}).get("evacuationNodeName")

    async def mark() -> None:
        # What the eviction webhook writes, as KubeVirt's own component (a user's status edit is reverted).
        patch = [{"op": "add", "path": "/status/evacuationNodeName", "value": node}]
        await cp.controller_client.patch(VIRTUAL_MACHINE_INSTANCES, "ev", patch, ns, patch_type=JSON_PATCH)
        assert await evacuation() == node

    # Not marked: nothing to do.
    assert await run("evacuate-cancel", "vmi", "ev") == (0, f"VMI {ns}/ev was canceled evacuation\n", "")
    await mark()
    assert await run("evacuate-cancel", "vmi", "ev", "--dry-run") == (
        0,
        f"Dry Run execution\nVMI {ns}/ev was canceled evacuation\n",
        "",
    )
    assert await evacuation() == node
    assert await run("evacuate-cancel", "vm", "ev") == (0, f"VM {ns}/ev was canceled evacuation\n", "")
    assert await evacuation() is None

    # A body naming another node removes nothing (the patch tests it).
    await mark()
    stale = {"kind": "EvacuateCancelOptions", "apiVersion": "kubevirt.io/v1", "evacuationNodeName": "elsewhere"}
    reply = await http.put(vmi_path(ns, "ev", "evacuate/cancel"), stale)
    assert reply.status == 500 and "/status/evacuationNodeName" in reply.message, reply.body
    assert_status(await http.request("PUT", vmi_path(ns, "ev", "evacuate/cancel")), 400, "No body")

    # While the node carries the drain taint the evacuation controller would mark the VMI again: refused.
    taint = {"key": "kubevirt.io/drain", "effect": "NoSchedule"}
    await cp.admin.patch(NODES, node, {"spec": {"taints": [taint]}})
    try:
        code, _, err = await run("evacuate-cancel", "vmi", "ev")
    finally:
        await cp.admin.patch(NODES, node, {"spec": {"taints": None}})
    assert code == 1
    assert err == (
        f'error canceling evacuation for VMI {ns}/ev: Node "{node}" has NodeDrainTaintKey '
        '"&Taint{Key:kubevirt.io/drain,Value:,Effect:NoSchedule,TimeAdded:<nil>,}"\n'
    )
    assert await run("evacuate-cancel", "pod", "ev") == (1, "", 'unsupported resource type "pod"\n')
