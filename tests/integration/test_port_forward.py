"""The VMI and VM `portforward` subresource of the embedded API server (virt-api dials the VMI's first interface
address, as upstream's netDial) against a plain TCP server inside a real pod network namespace, with aiohttp and
with the real `virtctl port-forward` console script (listening and --stdio). No QEMU: the VMI's status is written
by the test as virt-handler would."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from pykubevirt.cli.cluster_network import choose_cluster_cidr, release_cluster_network
from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.resources import NAMESPACES, VIRTUAL_MACHINE_INSTANCES, VIRTUAL_MACHINES
from pykubevirt.node import netns
from pykubevirt.node.pod_network import PodNetwork
from tests.integration.conftest import vm_manifest, vmi_manifest
from tests.support.apiserver_process import APIServerProcess
from tests.support.control_plane import client_for
from tests.support.ports import free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="module")

SUB = "/apis/subresources.kubevirt.io/v1"
VIRTCTL = str(Path(sys.executable).parent / "virtctl")
PORT = 7000
# TCP: greets each connection with the address it was reached at, then echoes what it receives, upper-cased, until
# end of input or a line "bye". UDP on the same port: answers each datagram with it upper-cased.
ECHO = (
    "import asyncio\n"
    "async def serve(r, w):\n"
    "    w.write(('hello ' + w.get_extra_info('sockname')[0] + '\\n').encode())\n"
    "    while data := await r.read(65536):\n"
    "        w.write(data.upper()); await w.drain()\n"
    "        if data.endswith(b'bye\\n'): break\n"
    "    w.close()\n"
    "class Echo(asyncio.DatagramProtocol):\n"
    "    def connection_made(self, t): self.t = t\n"
    "    def datagram_received(self, data, addr): self.t.sendto(data.upper(), addr)\n"
    "async def main():\n"
    f"    await asyncio.get_running_loop().create_datagram_endpoint(Echo, local_addr=('0.0.0.0', {PORT}))\n"
    f"    s = await asyncio.start_server(serve, '0.0.0.0', {PORT})\n"
    "    print('ready', flush=True)\n"
    "    await s.serve_forever()\n"
    "asyncio.run(main())\n"
)


@dataclass
class Guest:
    """A TCP server in a pod's network namespace, and the namespace of the test's objects."""

    client: KubeClient
    # KubeVirt's admission keeps VMI status changes of anyone but its service accounts: status is written as these.
    handler: KubeClient
    controller: KubeClient
    ip: str
    namespace: str


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def guest(apiserver: APIServerProcess, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Guest]:
    root = tmp_path_factory.mktemp("port-forward")
    cidr = choose_cluster_cidr(root)
    network = PodNetwork(cidr, "pf-node", root / "node")
    pod_cidr = cidr.replace(".0.0/16", ".0.0/24")
    await network.start(pod_cidr)
    uid = str(uuid.uuid4())
    ip, *_ = await network.setup({"metadata": {"uid": uid, "name": "launcher", "namespace": "pf"}, "spec": {}})
    server = await asyncio.create_subprocess_exec(
        *netns.enter_argv(str(network.netns_of(uid))), sys.executable, "-c", ECHO, stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    assert (await asyncio.wait_for(server.stdout.readline(), 30)).strip() == b"ready"
    client = client_for(apiserver)
    namespace = f"pf-{uuid.uuid4().hex[:8]}"
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    handler, controller = client_for(apiserver, "virt-handler"), client_for(apiserver, "virt-controller")
    yield Guest(client, handler, controller, ip, namespace)
    server.terminate()
    await server.wait()
    await network.teardown(uid)
    release_cluster_network(root)
    for each in (client, handler, controller):
        await each.close()


async def running_vmi(guest: Guest, name: str, *, ip: str | None = None, **status: Any) -> Object:
    """A VMI whose status says it runs with its first interface at `ip` (the guest's by default)."""
    await guest.client.create(VIRTUAL_MACHINE_INSTANCES, vmi_manifest(name), guest.namespace)
    interfaces = [{"name": "default", "ipAddress": guest.ip if ip is None else ip}] if ip != "" else []
    body = {"status": {"phase": "Running", "nodeName": "pf-node", "interfaces": interfaces, **status}}
    return await guest.handler.patch(VIRTUAL_MACHINE_INSTANCES, name, body, guest.namespace)


def path(guest: Guest, name: str, tail: str, resource: str = "virtualmachineinstances") -> str:
    return f"{SUB}/namespaces/{guest.namespace}/{resource}/{name}/portforward/{tail}"


def _ssl(server: APIServerProcess) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(server.ca_file()))


async def open_ws(
    server: APIServerProcess, url_path: str
) -> tuple[aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
    session = aiohttp.ClientSession(headers={"Authorization": f"Bearer {server.token()}"})
    try:
        ws = await session.ws_connect(server.url + url_path, protocols=("plain.kubevirt.io",), ssl=_ssl(server))
    except BaseException:
        await session.close()
        raise
    return session, ws


async def receive(ws: aiohttp.ClientWebSocketResponse) -> bytes:
    message = await asyncio.wait_for(ws.receive(), 10)
    assert message.type == aiohttp.WSMsgType.BINARY, message
    return bytes(message.data)


async def status_of(server: APIServerProcess, url_path: str) -> tuple[int, dict[str, Any]]:
    """The Status a plain GET gets (the refusal a websocket client sees, with its body)."""
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {server.token()}"}) as session:
        async with session.get(server.url + url_path, ssl=_ssl(server)) as response:
            return response.status, await response.json()


async def test_a_vmi_port_is_a_websocket_of_raw_bytes_to_the_guest(apiserver: APIServerProcess, guest: Guest) -> None:
    await running_vmi(guest, "echo")
    session, ws = await open_ws(apiserver, path(guest, "echo", str(PORT)))
    try:
        assert ws.protocol == "plain.kubevirt.io"
        assert await receive(ws) == f"hello {guest.ip}\n".encode()
        await ws.send_bytes(b"ping\x00\xff")
        assert await receive(ws) == b"PING\x00\xff"
    finally:
        await ws.close()
        await session.close()
    # The explicit protocol form reaches the same port.
    session, ws = await open_ws(apiserver, path(guest, "echo", f"{PORT}/tcp"))
    try:
        assert await receive(ws) == f"hello {guest.ip}\n".encode()
    finally:
        await ws.close()
        await session.close()


async def test_refusals_name_what_is_missing(apiserver: APIServerProcess, guest: Guest) -> None:
    await running_vmi(guest, "noiface", ip="")
    assert await status_of(apiserver, path(guest, "noiface", str(PORT))) == (400, status_body(guest, 400))
    code, body = await status_of(apiserver, path(guest, "noiface", str(PORT)))
    assert body["message"] == "no network interfaces are present"
    await running_vmi(guest, "closed")
    code, body = await status_of(apiserver, path(guest, "closed", "7001"))
    assert (
        code == 500
        and body["message"]
        == f"Internal error occurred: dialing VM: dial tcp {guest.ip}:7001: connect: connection refused"
    )
    await running_vmi(guest, "paused", conditions=[{"type": "Paused", "status": "True"}])
    code, body = await status_of(apiserver, path(guest, "paused", str(PORT)))
    assert code == 409
    assert (
        body["message"] == 'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "paused": VMI is paused'
    )
    code, body = await status_of(apiserver, path(guest, "missing", str(PORT)))
    assert (code, body["message"]) == (404, 'virtualmachineinstance.kubevirt.io "missing" not found')
    code, body = await status_of(apiserver, path(guest, "closed", f"{PORT}/sctp"))  # as KubeVirt: tcp and udp
    assert (code, body["message"]) == (400, 'unsupported protocol "sctp"')
    # A plain GET to a reachable port is dialed, then refused for not being a websocket.
    code, body = await status_of(apiserver, path(guest, "closed", str(PORT)))
    assert code == 400 and "websocket" in body["message"]


def status_body(guest: Guest, code: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "no network interfaces are present",
        "reason": "BadRequest",
        "code": code,
    }


async def test_a_vm_forwards_to_its_own_vmi_once_created(apiserver: APIServerProcess, guest: Guest) -> None:
    vm = await guest.client.create(VIRTUAL_MACHINES, vm_manifest("vmpf"), guest.namespace)
    code, body = await status_of(apiserver, path(guest, "vmpf", str(PORT), "virtualmachines"))
    assert code == 409
    assert body["message"] == 'Operation cannot be fulfilled on virtualmachine.kubevirt.io "vmpf": VMI is not started'
    await guest.controller.patch(
        VIRTUAL_MACHINES, "vmpf", {"status": {"created": True}}, guest.namespace, subresource="status"
    )
    owned = vmi_manifest("vmpf")
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vmpf", "uid": vm["metadata"]["uid"]}
    ]
    await guest.client.create(VIRTUAL_MACHINE_INSTANCES, owned, guest.namespace)
    body = {"status": {"phase": "Running", "interfaces": [{"name": "default", "ipAddress": guest.ip}]}}
    await guest.handler.patch(VIRTUAL_MACHINE_INSTANCES, "vmpf", body, guest.namespace)
    session, ws = await open_ws(apiserver, path(guest, "vmpf", str(PORT), "virtualmachines"))
    try:
        assert await receive(ws) == f"hello {guest.ip}\n".encode()
    finally:
        await ws.close()
        await session.close()


# ------------------------------------------------------------------------------------------------------ virtctl


def virtctl_env(server: APIServerProcess, home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
    env.update({"KUBECONFIG": str(server.kubeconfig), "HOME": str(home)})
    return env


async def exchange(port: int) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        greeting = await asyncio.wait_for(reader.readline(), 10)
        writer.write(b"abc\n")
        await writer.drain()
        return greeting, await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()


async def test_virtctl_port_forward_listens_locally_and_tunnels_each_connection(
    apiserver: APIServerProcess, guest: Guest, tmp_path: Path
) -> None:
    await running_vmi(guest, "cli")
    local = free_port()
    process = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "port-forward", f"vmi/cli/{guest.namespace}", f"{local}:{PORT}"),
        env=virtctl_env(apiserver, tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        assert line.decode().strip() == f"forwarding tcp 127.0.0.1:{local} to {PORT}"

        async def tunnelled() -> tuple[bytes, bytes] | None:
            with contextlib.suppress(OSError):
                return await exchange(local)
            return None

        # Two connections in turn: each gets its own stream.
        for _ in range(2):
            assert await eventually(tunnelled, timeout=10) == (f"hello {guest.ip}\n".encode(), b"ABC\n")
    finally:
        process.terminate()
        await process.wait()


async def test_virtctl_port_forward_stdio_carries_one_port_on_stdin_and_stdout(
    apiserver: APIServerProcess, guest: Guest, tmp_path: Path
) -> None:
    await running_vmi(guest, "stdio")
    process = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "-n", guest.namespace, "port-forward", "--stdio=true", "vm/stdio", str(PORT)),
        env=virtctl_env(apiserver, tmp_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # A VM that created no VMI is refused; the VMI form of the same name tunnels.
    out, err = await asyncio.wait_for(process.communicate(b""), 30)
    assert process.returncode == 1 and out == b""
    assert 'virtualmachine.kubevirt.io "stdio" not found' in err.decode()
    process = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "-n", guest.namespace, "port-forward", "--stdio=true", "vmi/stdio", str(PORT)),
        env=virtctl_env(apiserver, tmp_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 30) == f"hello {guest.ip}\n".encode()
        process.stdin.write(b"over stdio\n")
        await process.stdin.drain()
        assert await asyncio.wait_for(process.stdout.readline(), 10) == b"OVER STDIO\n"
        # End of input only stops sending, as from a pipe: the answer still arrives, and the guest's end closes it.
        process.stdin.write(b"last words\nbye\n")
        process.stdin.close()
        assert await asyncio.wait_for(process.stdout.read(), 30) == b"LAST WORDS\nBYE\n"
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_stdio_ends_when_its_reader_is_gone_even_with_sighup_ignored(
    apiserver: APIServerProcess, guest: Guest, tmp_path: Path
) -> None:
    """ssh closes both ends of its ProxyCommand when it exits; under nohup the SIGHUP it sends is ignored, and the
    guest's side (an sshd waiting out its login timeout) would hold the tunnel open."""
    await running_vmi(guest, "reader")
    argv = [VIRTCTL, "-n", guest.namespace, "port-forward", "--stdio=true", "vmi/reader", str(PORT)]

    def run() -> int:
        process = subprocess.Popen(
            argv,
            env=virtctl_env(apiserver, tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            assert process.stdout.readline() == f"hello {guest.ip}\n".encode()
            process.stdin.close()
            process.stdout.close()
            return process.wait(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert await asyncio.to_thread(run) == 0


async def test_udp_datagrams_travel_one_a_message(apiserver: APIServerProcess, guest: Guest, tmp_path: Path) -> None:
    await running_vmi(guest, "udp")
    session, ws = await open_ws(apiserver, path(guest, "udp", f"{PORT}/udp"))
    try:
        await ws.send_bytes(b"one")
        await ws.send_bytes(b"two")
        assert [await receive(ws), await receive(ws)] == [b"ONE", b"TWO"]
    finally:
        await ws.close()
        await session.close()
    local = free_port()
    process = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "port-forward", f"vmi/udp/{guest.namespace}", f"udp/{local}:{PORT}"),
        env=virtctl_env(apiserver, tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stderr.readline(), 30)
        assert line.decode().strip() == f"forwarding udp 127.0.0.1:{local} to {PORT}"
        answers: asyncio.Queue[bytes] = asyncio.Queue()

        class Client(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: Any) -> None:
                answers.put_nowait(data)

        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(Client, remote_addr=("127.0.0.1", local))
        try:
            # UDP may drop a datagram: sent until heard.
            async def answered() -> bytes | None:
                transport.sendto(b"over udp")
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(answers.get(), 0.5)
                return None

            assert await eventually(answered, timeout=15) == b"OVER UDP"
            transport.sendto(b"again")

            async def next_new_answer() -> bytes:
                # A resend of "over udp" that was queued while the tunnel opened may still be answered first.
                while (answer := await answers.get()) == b"OVER UDP":
                    pass
                return answer

            assert await asyncio.wait_for(next_new_answer(), 15) == b"AGAIN"
        finally:
            transport.close()
    finally:
        process.terminate()
        await process.wait()
