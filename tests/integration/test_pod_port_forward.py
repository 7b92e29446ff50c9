"""`kubectl port-forward` through the API server's pods/portforward and a real node agent: bytes both ways over several
connections at once, kube's words for a port nothing listens on, RBAC, and the node endpoint's own refusals.

The node agent here runs pods in the host's network (no pod network), so the pod's localhost is this host's; the e2e
pod-network test forwards into a launcher pod's namespace and on to its guest."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
import pytest

from pykubevirt.apiserver.pod_port_forward import SPDY_REFUSED
from pykubevirt.client.resources import PODS
from pykubevirt.node import spdy_frames as spdy
from pykubevirt.node.port_forward_server import PROTOCOL
from tests.integration.test_node_agent import AGENT_IP, Env, env, py
from tests.integration.test_pod_exec import running_pod
from tests.support.apiserver_process import kubectl, kubectl_env
from tests.support.port_forward import kubectl_port_forward
from tests.support.ports import free_port
from tests.support.waiting import eventually

__all__ = ["env"]  # the node agent fixture of test_node_agent, one for this module

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.kubectl]


def echo_server(port: int) -> str:
    """A container's code: echo every connection's bytes back, many connections at once."""
    return (
        "import socket, threading\n"
        "def serve(conn):\n"
        "    with conn:\n"
        "        while data := conn.recv(65536):\n"
        "            conn.sendall(data)\n"
        f"server = socket.create_server(('127.0.0.1', {port}))\n"
        "while True:\n"
        "    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()\n"
    )


async def listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    return True


async def echo_pod(env: Env, name: str) -> tuple[str, int]:
    port = free_port()
    ns = await running_pod(env, name, py("main", echo_server(port)))
    await eventually(lambda: listening(port), timeout=30)
    return ns, port


async def round_trip(port: int, payload: bytes) -> bytes:
    """Send `payload` through the local port and read as many bytes back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), 30)
    finally:
        writer.close()


async def test_port_forward_carries_bytes_both_ways_on_several_connections_at_once(env: Env, tmp_path: Path) -> None:
    ns, port = await echo_pod(env, "echo")
    kube_env = kubectl_env(env.server, tmp_path / "home")
    async with kubectl_port_forward(kube_env, "-n", ns, "pod/echo", f":{port}") as forward:
        payloads = [os.urandom(size) for size in (1, 70_000, 3 * 1024 * 1024)]
        echoed = await asyncio.gather(*(round_trip(forward.ports[0], payload) for payload in payloads))
        assert echoed == payloads
        # The session outlives its connections: another one after them still gets through.
        assert await round_trip(forward.ports[0], b"once more") == b"once more"


async def test_a_port_nothing_listens_on_reads_as_the_kubelets_error(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "quiet", py("main", "import time; time.sleep(600)"))
    uid = (await env.client.get(PODS, "quiet", ns))["metadata"]["uid"]
    closed = free_port()
    kube_env = kubectl_env(env.server, tmp_path / "home")
    async with kubectl_port_forward(kube_env, "-n", ns, "quiet", f":{closed}") as forward:
        with pytest.raises((asyncio.IncompleteReadError, ConnectionResetError)):
            await round_trip(forward.ports[0], b"anyone?")
        code, err = await forward.stderr_at_exit()
    assert code == 1
    assert (
        f"an error occurred forwarding {forward.ports[0]} -> {closed}: error forwarding port {closed} to pod quiet, "
        f"uid {uid}: failed to connect to localhost:{closed}, IPv4: dial tcp4 127.0.0.1:{closed}: connect: "
        f"connection refused IPv6: "
    ) in err
    assert err.strip().splitlines()[-1] == "error: lost connection to pod"


async def test_port_forward_needs_create_on_pods_portforward(env: Env, tmp_path: Path) -> None:
    ns, port = await echo_pod(env, "ruled")
    home = tmp_path / "home"

    def admin(*args: str) -> str:
        return kubectl(env.server, home, *args).stdout

    admin("create", "serviceaccount", "viewer", "-n", ns)
    admin("create", "role", "peek", "-n", ns, "--verb=get", "--resource=pods", "--resource=pods/portforward")
    admin("create", "rolebinding", "peek", "-n", ns, "--role=peek", f"--serviceaccount={ns}:viewer")
    token = admin("create", "token", "viewer", "-n", ns).strip()
    kube_env = kubectl_env(env.server, home)
    with pytest.raises(AssertionError) as refused:
        async with kubectl_port_forward(kube_env, "--token", token, "-n", ns, "ruled", f":{port}"):
            pass
    assert (
        f'pods "ruled" is forbidden: User "system:serviceaccount:{ns}:viewer" cannot create resource '
        f'"pods/portforward" in API group "" in the namespace "{ns}"'
    ) in str(refused.value)
    admin("create", "role", "forward", "-n", ns, "--verb=create", "--resource=pods/portforward")
    admin("create", "rolebinding", "forward", "-n", ns, "--role=forward", f"--serviceaccount={ns}:viewer")
    async with kubectl_port_forward(kube_env, "--token", token, "-n", ns, "ruled", f":{port}") as forward:
        assert await round_trip(forward.ports[0], b"allowed") == b"allowed"


async def test_the_api_server_refuses_what_it_cannot_forward_as_kube_does(env: Env) -> None:
    ns = await running_pod(env, "plain", py("main", "import time; time.sleep(600)"))
    base = f"{env.server.url}/api/v1/namespaces/{ns}/pods"
    headers = {"Authorization": f"Bearer {env.server.token()}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        # kubectl before 1.31 (or with its WebSocket tunnel off) upgrades to SPDY directly: refused in words.
        async with session.post(f"{base}/plain/portforward", ssl=False) as spdy_upgrade:
            status = await spdy_upgrade.json()
        assert (spdy_upgrade.status, status["reason"]) == (400, "BadRequest")
        assert status["message"] == SPDY_REFUSED
        async with session.post(f"{base}/nowhere/portforward", ssl=False) as missing:
            assert (missing.status, (await missing.json())["message"]) == (404, 'pods "nowhere" not found')


async def test_the_nodes_endpoint_answers_spdy_as_spdystream_expects(env: Env) -> None:
    """Below kubectl: a stream without a port is refused with a finished reply, pings come back, and a client that
    sends no requestID gets its error and data streams paired by their ids, as the kubelet pairs an old client's."""
    ns, port = await echo_pod(env, "raw")
    url = f"http://{AGENT_IP}:{env.agent.log_server.port}/portForward/{ns}/raw"
    headers = {"Authorization": f"Bearer {env.server.token()}"}
    writer, reader = spdy.FrameWriter(), spdy.FrameReader()
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"http://{AGENT_IP}:{env.agent.log_server.port}/portForward/{ns}/nowhere") as gone:
            assert gone.status == 404
        async with session.ws_connect(url, protocols=(PROTOCOL,)) as ws:
            frames: list[spdy.Frame] = []

            async def next_frame() -> spdy.Frame:
                while not frames:
                    message = await asyncio.wait_for(ws.receive(), 10)
                    frames.extend(reader.feed(message.data))
                return frames.pop(0)

            await ws.send_bytes(writer.syn_stream(1, {"streamtype": ["data"]}))
            assert await next_frame() == spdy.SynReply(1, fin=True)  # a finished reply: the stream is refused
            await ws.send_bytes(spdy.ping(7))
            assert await next_frame() == spdy.Ping(7)
            await ws.send_bytes(writer.syn_stream(3, {"streamtype": ["error"], "port": [str(port)]}, fin=False))
            await ws.send_bytes(writer.syn_stream(5, {"streamtype": ["data"], "port": [str(port)]}))
            await ws.send_bytes(spdy.data(5, b"paired"))
            received = [await next_frame() for _ in range(3)]
            assert received[:2] == [spdy.SynReply(3, fin=False), spdy.SynReply(5, fin=False)]
            assert received[2] == spdy.Data(5, False, b"paired")
            await ws.send_bytes(spdy.data(5, b"", fin=True))
            ends = {await next_frame(), await next_frame()}
            assert ends == {spdy.Data(5, True, b""), spdy.Data(3, True, b"")}
