"""`kubectl exec` through the API server's pods/exec and a real node agent: the container's output, stdin, exit
code and environment, a terminal, and kube's refusals."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pykubevirt.client.resources import PODS
from tests.integration.test_node_agent import AGENT_IP, Env, env, in_thread, phase, pod_manifest, py, wait_pod
from tests.support.apiserver_process import kubectl

__all__ = ["env"]  # the node agent fixture of test_node_agent, one for this module

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.kubectl]
SLEEPER = "import time; time.sleep(600)"


async def running_pod(env: Env, name: str, *containers: dict[str, Any]) -> str:
    ns = await env.namespace()
    await env.client.create(PODS, pod_manifest(name, env.node, *containers), ns)
    await wait_pod(env.client, ns, name, lambda p: phase(p) == "Running")
    return ns


async def test_exec_runs_the_command_with_the_containers_environment_and_exit_code(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "box", py("main", SLEEPER, env=[{"name": "GREETING", "value": "hello from the pod"}]))
    home = tmp_path / "home"
    result = await in_thread(
        kubectl, env.server, home, "exec", "-n", ns, "box", "--", "sh", "-c", 'echo "$GREETING"; echo oops >&2; exit 3',
        check=False,
    )  # fmt: skip
    assert (result.returncode, result.stdout) == (3, "hello from the pod\n")
    assert result.stderr == "oops\ncommand terminated with exit code 3\n"
    piped = await in_thread(kubectl, env.server, home, "exec", "-i", "-n", ns, "box", "--", "cat", stdin="a\nb\n")
    assert piped.stdout == "a\nb\n"


async def test_exec_with_a_terminal(env: Env, tmp_path: Path) -> None:
    script = shutil.which("script")
    assert script is not None, "util-linux's script gives kubectl the terminal -t needs"
    ns = await running_pod(env, "term", py("main", SLEEPER))
    config = env.server.kubeconfig
    command = f"kubectl --kubeconfig {config} exec -it -n {ns} term -- sh -c 'tty; exit 5'"
    result = await in_thread(_run, [script, "-qec", command, "/dev/null"], tmp_path)
    assert result[0] == 5
    assert "/dev/pts/" in result[1]
    assert "command terminated with exit code 5" in result[1]


def _run(argv: list[str], home: Path) -> tuple[int, str]:
    """`argv` to its end: its exit code and everything it printed."""
    done = subprocess.run(
        argv, input="", capture_output=True, text=True, timeout=60, env={"HOME": str(home), "PATH": "/usr/bin:/bin"}
    )
    return done.returncode, done.stdout + done.stderr


async def test_exec_refusals_read_as_kubes(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "pair", py("main", SLEEPER), py("done", "pass"))
    home = tmp_path / "home"

    async def refused(*args: str) -> str:
        result = await in_thread(kubectl, env.server, home, "exec", "-n", ns, *args, check=False)
        assert result.returncode == 1, result
        return result.stderr.strip().splitlines()[-1]

    assert await refused("pair", "-c", "nope", "--", "true") == (
        "Error from server (BadRequest): container nope is not valid for pod pair"
    )
    assert await refused("pair", "-c", "main", "--", "no-such-command") == (
        'error: Internal error occurred: error executing command in container: exec: "no-such-command": '
        "executable file not found in $PATH"
    )
    assert 'container not found ("done")' in await refused("pair", "-c", "done", "--", "true")


async def test_the_nodes_exec_endpoint_runs_nothing_for_a_caller_rbac_does_not_allow(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "guarded", py("main", SLEEPER))
    url = f"http://{AGENT_IP}:{env.agent.log_server.port}/exec/{ns}/guarded/main"
    params = {"command": "true", "stdout": "true"}
    home = tmp_path / "home"
    await in_thread(kubectl, env.server, home, "create", "serviceaccount", "peeker", "-n", ns)
    token = (await in_thread(kubectl, env.server, home, "create", "token", "peeker", "-n", ns)).stdout
    async with aiohttp.ClientSession() as session:
        async with session.get(url, params=params) as anonymous:
            assert (anonymous.status, (await anonymous.json())["message"]) == (401, "Unauthorized")
        headers = {"Authorization": f"Bearer {token.strip()}"}
        async with session.get(url, params=params, headers=headers) as unprivileged:
            body = await unprivileged.json()
        assert unprivileged.status == 403
        assert body["message"] == (
            f'forbidden: user "system:serviceaccount:{ns}:peeker" cannot create resource "nodes/proxy" "{env.node}"'
        )


async def test_exec_needs_create_on_pods_exec_as_kube_1_30_asks_of_a_websocket(env: Env, tmp_path: Path) -> None:
    ns = await running_pod(env, "ruled", py("main", SLEEPER))
    home = tmp_path / "home"

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(env.server, home, *args)

    admin("create", "serviceaccount", "viewer", "-n", ns)
    admin("create", "role", "peek", "-n", ns, "--verb=get", "--resource=pods", "--resource=pods/exec")
    admin("create", "rolebinding", "peek", "-n", ns, "--role=peek", f"--serviceaccount={ns}:viewer")
    token = admin("create", "token", "viewer", "-n", ns).stdout.strip()
    as_viewer = ("--token", token, "exec", "-n", ns, "ruled", "--", "true")
    refused = await in_thread(kubectl, env.server, home, *as_viewer, check=False)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f'Error from server (Forbidden): pods "ruled" is forbidden: User "system:serviceaccount:{ns}:viewer" cannot '
        f'create resource "pods/exec" in API group "" in the namespace "{ns}"'
    )
    admin("create", "role", "run", "-n", ns, "--verb=create", "--resource=pods/exec")
    admin("create", "rolebinding", "run", "-n", ns, "--role=run", f"--serviceaccount={ns}:viewer")
    allowed = await in_thread(kubectl, env.server, home, *as_viewer, check=False)
    assert allowed.returncode == 0, allowed.stderr
