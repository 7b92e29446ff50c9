"""Reaching a real guest from the host as a user does: `virtctl port-forward` (a local port, and --stdio) through the
VM's portforward subresource, `virtctl ssh` (the host's ssh through a port-forward ProxyCommand, to the guest's
dropbear with a cloud-init key), `virtctl expose` plus a connection to the Service's CLUSTER-IP through the host's
nftables proxy, and `virtctl usbredir` to its USB redirection channels. One demo VM (with `clientPassthrough`) serves
its page on port 80 (busybox httpd) and ssh on 22 for every test of the module."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from pykubevirt.client.resources import VIRTUAL_MACHINES
from pykubevirt.node.pod_network import ClusterNetwork
from tests.e2e.test_vm_lifecycle import demo_vm
from tests.support.apiserver_process import KUBECTL, kubectl_env
from tests.support.cluster import ClusterView, EmbeddedCluster
from tests.support.ports import free_port
from tests.support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

NAME = "reach"
VIRTCTL = str(Path(sys.executable).parent / "virtctl")
REQUEST = b"GET / HTTP/1.0\r\nHost: guest\r\n\r\n"


@pytest.fixture(scope="module")
def ssh_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A key pair of the module's own: the private key's path and the public key."""
    key = tmp_path_factory.mktemp("ssh") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "access", "-f", str(key)], check=True)
    return key, key.with_suffix(".pub").read_text().strip()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def guest(cluster: EmbeddedCluster, ssh_key: tuple[Path, str]) -> AsyncIterator[tuple[ClusterView, str]]:
    """The module's VM, booted with the module's ssh key, its httpd answering; the view and its namespace."""
    view = ClusterView(cluster)
    await view.wait_ready()
    ns = await view.namespace()
    user_data = f"#cloud-config\nhostname: {NAME}\nssh_authorized_keys:\n  - {ssh_key[1]}\n"
    vm = demo_vm(NAME, user_data=user_data)
    vm["spec"]["template"]["spec"]["domain"]["devices"]["clientPassthrough"] = {}
    await view.admin.create(VIRTUAL_MACHINES, vm, ns)
    vmi = await view.wait_vmi_phase(ns, NAME, "Running")
    pod = await view.launcher_pod(vmi)
    await view.wait_serial(view.node, pod, vmi, "pykubevirt-guest: ready")
    yield view, ns
    await view.admin.delete(VIRTUAL_MACHINES, NAME, ns)
    await view.close()


async def http_get(host: str, port: int) -> str | None:
    """The page at host:port, or None while nothing answers yet."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(REQUEST)
        await writer.drain()
        body = await asyncio.wait_for(reader.read(), 15)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
    return body.decode(errors="replace") or None


async def test_virtctl_port_forward_reaches_the_guests_web_server(guest: tuple[ClusterView, str]) -> None:
    view, ns = guest
    local = free_port()
    env = kubectl_env(view.cluster.server, view.cluster.root / "home")
    forward = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "port-forward", "-n", ns, f"vm/{NAME}", f"{local}:80"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert forward.stderr is not None
        line = await asyncio.wait_for(forward.stderr.readline(), 60)
        assert line.decode().strip() == f"forwarding tcp 127.0.0.1:{local} to 80"
        page = await eventually(lambda: http_get("127.0.0.1", local), timeout=90, interval=0.5)
        assert " 200 " in page.splitlines()[0] and f"pykubevirt-guest {NAME}" in page
    finally:
        forward.terminate()
        await forward.wait()
    # --stdio: the tunnel on stdin and stdout, as ssh's ProxyCommand uses it.
    stdio = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "port-forward", "--stdio=true", f"vm/{NAME}/{ns}", "80"),
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert stdio.stdin is not None and stdio.stdout is not None
    try:
        stdio.stdin.write(REQUEST)
        await stdio.stdin.drain()
        # The guest's httpd closes after its answer, which ends the tunnel (stdin stays open meanwhile).
        out = await asyncio.wait_for(stdio.stdout.read(), 60)
        assert f"pykubevirt-guest {NAME}" in out.decode(errors="replace")
        assert await asyncio.wait_for(stdio.wait(), 30) == 0
    finally:
        if stdio.returncode is None:
            stdio.kill()
            await stdio.wait()


async def test_virtctl_expose_gives_a_cluster_ip_the_host_reaches(guest: tuple[ClusterView, str]) -> None:
    view, ns = guest
    _, out, _ = await view.run(
        "virtctl", "expose", "vm", NAME, "-n", ns, "--port=8080", "--target-port=80", "--name=reach-http"
    )
    assert out == f"Service reach-http successfully created for vm {NAME}\n"
    _, cluster_ip, _ = await view.run(
        "kubectl", "get", "svc", "reach-http", "-n", ns, "-o", "jsonpath={.spec.clusterIP}"
    )
    _, selector, _ = await view.run("kubectl", "get", "svc", "reach-http", "-n", ns, "-o", "jsonpath={.spec.selector}")
    assert selector == '{"vmi.kubevirt.io/id":"reach"}'
    # Only addresses of this cluster's own network are ever dialled: the ClusterIP is in the proxy's range.
    service_range = ipaddress.IPv4Network(ClusterNetwork(view.cluster.layout.cluster_cidr).service_cidr)
    assert ipaddress.IPv4Address(cluster_ip) in service_range
    page = await eventually(lambda: http_get(cluster_ip, 8080), timeout=90, interval=0.5)
    assert f"pykubevirt-guest {NAME}" in page
    _, endpoints, _ = await view.run("kubectl", "get", "endpoints", "reach-http", "-n", ns, "--no-headers")
    assert ":80" in endpoints.split()[1]
    # Deleting the Service takes its rule: the host refuses the address at once, nothing leaves it.
    await view.run("kubectl", "delete", "svc", "reach-http", "-n", ns)

    async def gone() -> bool:
        with contextlib.suppress(OSError, TimeoutError):
            _, writer = await asyncio.wait_for(asyncio.open_connection(cluster_ip, 8080), 5)
            writer.close()
            return False
        return True

    await eventually(gone, timeout=30, interval=0.5)


async def test_virtctl_ssh_runs_a_command_in_the_guest(
    guest: tuple[ClusterView, str], ssh_key: tuple[Path, str]
) -> None:
    view, ns = guest
    key, _ = ssh_key
    env = kubectl_env(view.cluster.server, view.cluster.root / "home")
    argv = [
        *(VIRTCTL, "ssh", f"root@vm/{NAME}/{ns}", "-i", str(key), "-c", "hostname"),
        *("--local-ssh-opts=-o StrictHostKeyChecking=no", "--local-ssh-opts=-o UserKnownHostsFile=/dev/null"),
        *("-t", "-oBatchMode=yes", "-t", "-oLogLevel=ERROR"),
    ]

    async def hostname() -> str | None:
        # dropbear starts in the background once the guest is up: refused until then.
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(process.communicate(), 60)
        return out.decode() if process.returncode == 0 else None

    assert await eventually(hostname, timeout=90, interval=1.0) == f"{NAME}\n"
    # A key the guest does not know is refused, and virtctl says how ssh ended.
    other = key.parent / "other"
    await asyncio.to_thread(
        subprocess.run, ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True
    )
    refused = await asyncio.create_subprocess_exec(
        *[str(other) if a == str(key) else a for a in argv],
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    # As long as the accepted login above may take: key exchange in a TCG guest on loaded cores is slow.
    out, err = await asyncio.wait_for(refused.communicate(), 90)
    assert refused.returncode == 1 and out == b""
    assert err.decode().strip().splitlines()[-1] == "exit status 255"


async def test_virtctl_scp_copies_a_file_into_the_guest_and_a_directory_back(
    guest: tuple[ClusterView, str], ssh_key: tuple[Path, str], tmp_path: Path
) -> None:
    view, ns = guest
    key, _ = ssh_key
    env = kubectl_env(view.cluster.server, view.cluster.root / "home")
    local = ["-i", str(key), "-t", "-oStrictHostKeyChecking=no", "-t", "-oUserKnownHostsFile=/dev/null"]
    local += ["-t", "-oBatchMode=yes", "-t", "-oLogLevel=ERROR"]

    async def virtctl(*argv: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            VIRTCTL, *argv, *local, env=env, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(process.communicate(), 120)
        return int(process.returncode or 0), err.decode()

    # 300 KiB that are not all alike, so a short or shifted copy cannot pass.
    payload = bytes((i * 7 + i // 251) % 256 for i in range(300 * 1024))
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "data.bin").write_bytes(payload)
    (tmp_path / "up" / "note.txt").write_text("from the host\n")

    async def uploaded() -> bool:
        # dropbear starts in the background once the guest is up: refused until then.
        code, _ = await virtctl("scp", "-r", str(tmp_path / "up"), f"root@vmi/{NAME}/{ns}:/tmp/copied")
        return code == 0

    assert await eventually(uploaded, timeout=90, interval=1.0)
    code, err = await virtctl("scp", "--recursive", f"root@vm/{NAME}/{ns}:/tmp/copied", str(tmp_path / "down"))
    assert code == 0, err
    assert (tmp_path / "down" / "data.bin").read_bytes() == payload
    assert (tmp_path / "down" / "note.txt").read_text() == "from the host\n"
    # One file back by its path; the VM's namespace from -n this time.
    code, err = await virtctl("scp", "-n", ns, f"root@vm/{NAME}:/tmp/copied/note.txt", str(tmp_path / "one.txt"))
    assert (code, (tmp_path / "one.txt").read_text()) == (0, "from the host\n"), err
    # A path the guest does not have: scp's own complaint, then how it ended, as upstream's exec.Cmd reports.
    code, err = await virtctl("scp", f"root@vm/{NAME}/{ns}:/tmp/none", str(tmp_path / "none"))
    assert code == 1 and "No such file" in err, err
    assert err.strip().splitlines()[-1] == "exit status 1"
    assert not (tmp_path / "none").exists()


async def test_a_vm_made_by_virtctl_create_boots_and_takes_its_ssh_key(
    guest: tuple[ClusterView, str], ssh_key: tuple[Path, str]
) -> None:
    """The user guide's pipe: `virtctl create vm … | kubectl apply -f -`, then `virtctl ssh` with the key it put in."""
    view, ns = guest
    key, public = ssh_key
    env = kubectl_env(view.cluster.server, view.cluster.root / "home")
    name = "made"
    create = await asyncio.create_subprocess_exec(
        *(VIRTCTL, "create", "vm", f"--name={name}", "--memory=128Mi", "--termination-grace-period=5"),
        *("--volume-containerdisk=src:pykubevirt.local/demo-guest:1.0", f"--ssh-key={public}"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    manifest, err = await create.communicate()
    assert create.returncode == 0, err
    apply = await asyncio.create_subprocess_exec(
        KUBECTL, "apply", "-n", ns, "-f", "-", env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await apply.communicate(manifest)
    assert out.decode().strip() == f"virtualmachine.kubevirt.io/{name} created"
    try:
        await view.wait_vmi_phase(ns, name, "Running")
        argv = [
            *(VIRTCTL, "ssh", f"root@vm/{name}/{ns}", "-i", str(key), "-c", "hostname"),
            *("-t", "-oStrictHostKeyChecking=no", "-t", "-oUserKnownHostsFile=/dev/null", "-t", "-oBatchMode=yes"),
            *("-t", "-oLogLevel=ERROR"),
        ]

        async def hostname() -> str | None:
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(process.communicate(), 60)
            return out.decode() if process.returncode == 0 else None

        # The generated cloud-config's key lets root in; the guest took the VM's name as its hostname.
        assert await eventually(hostname, timeout=180, interval=2.0) == f"{name}\n"
    finally:
        await view.admin.delete(VIRTUAL_MACHINES, name, ns)


async def test_virtctl_usbredir_reaches_the_guests_usb_redirection_channels(guest: tuple[ClusterView, str]) -> None:
    """`virtctl usbredir --no-launch`: the user's usbredir client connects to the printed address, and QEMU's
    redirection channel greets it with a usbredir hello. A VMI has four channels; a fifth client is refused."""
    view, ns = guest
    env = kubectl_env(view.cluster.server, view.cluster.root / "home")
    sessions: list[tuple[asyncio.subprocess.Process, asyncio.StreamWriter]] = []
    try:
        for _ in range(4):
            process = await asyncio.create_subprocess_exec(
                VIRTCTL, "-n", ns, "usbredir", NAME, "--no-launch", env=env, stdout=asyncio.subprocess.PIPE
            )
            assert process.stdout is not None
            line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
            assert line.startswith("User can connect usbredir client at: 127.0.0.1:"), line
            reader, writer = await asyncio.open_connection("127.0.0.1", int(line.rsplit(":", 1)[1]))
            sessions.append((process, writer))
            # The hello packet: a header (type 0 = hello, length, 32-bit id), then QEMU's version string.
            header = await asyncio.wait_for(reader.readexactly(12), 30)
            assert int.from_bytes(header[:4], "little") == 0
            version = await asyncio.wait_for(reader.readexactly(64), 30)
            assert version.startswith(b"qemu usb-redir guest"), version
        fifth = await asyncio.create_subprocess_exec(
            VIRTCTL, "-n", ns, "usbredir", NAME, "--no-launch", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(fifth.communicate(), 30)
        assert fifth.returncode == 1
        # virt-handler answers 503 (All USB devices are in use.); virt-api, like KubeVirt's, reports its failed dial.
        assert err.decode() == (
            f"Can't access VMI {NAME}: Internal error occurred: Can't connect to websocket (503): "
            "websocket: bad handshake\n"
        )
    finally:
        for process, writer in sessions:
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
