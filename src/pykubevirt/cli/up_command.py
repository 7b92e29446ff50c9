"""`pykubevirt up`, `down` and `status`: the embedded cluster on this machine, run by a detached supervisor.

`up` starts `pykubevirt supervise` in its own session and returns once every node is Ready; running it again is a
no-op. `down` stops the supervisor and its components; guests keep running unless `--all` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pykubevirt.api import objects
from pykubevirt.cli import cluster_network
from pykubevirt.cli.cluster_layout import (
    DEFAULT_DATA_DIR,
    DEFAULT_LISTEN,
    ClusterLayout,
    node_number,
    pykubevirt_argv,
    recorded_node_count,
)
from pykubevirt.cli.host_checks import FAIL
from pykubevirt.cli.host_facts import startup_checks
from pykubevirt.cli.metrics_locations import handler_addresses, metrics_rows, recorded_address
from pykubevirt.cli.node_fence import DEFAULT_FENCE_GRACE_SECONDS, FENCED_CONDITION
from pykubevirt.cli.startup_error import ERROR_PREFIX, last_error_line

READY_TIMEOUT_SECONDS = 120.0
CONSOLE_WAIT_SECONDS = 15.0
TOKEN_COMMAND = "kubectl config view --raw -o jsonpath='{.users[0].user.token}'"


def _layout(args: argparse.Namespace) -> ClusterLayout:
    data_dir = Path(args.data_dir).resolve()
    return ClusterLayout(
        data_dir,
        # Not told: the cluster as it last ran, so `down` then `up` brings every node (and its guests) back.
        getattr(args, "nodes", None) or recorded_node_count(data_dir),
        getattr(args, "listen", DEFAULT_LISTEN),
        cluster_cidr=cluster_network.recorded_cidr(data_dir),
    )


def _read_state(layout: ClusterLayout) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((layout.run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return state


def supervisor_pid(layout: ClusterLayout) -> int:
    """The running supervisor's pid for this data dir, 0 when there is none (a stale pid file is ignored)."""
    try:
        pid = int((layout.run_dir / "supervisor.pid").read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return 0
    # The pid must still be a supervisor of this very data dir, not a recycled pid.
    if b"supervise" in cmdline and str(layout.data_dir).encode() in cmdline:
        return pid
    return 0


# ------------------------------------------------------------------------------------------------ up


def up(args: argparse.Namespace) -> int:
    layout = _layout(args)
    pid = supervisor_pid(layout)
    if pid:
        state = _read_state(layout) or {}
        nodes = ", ".join(state.get("nodes") or [])
        print(f"pykubevirt is already running (supervisor pid {pid}, nodes: {nodes}); nothing to do")
        _print_next_steps(layout)
        _print_console(layout, recorded_address(layout.webconsole_address_file))
        return 0
    if not args.no_pod_network:
        try:
            cluster_network.choose_cluster_cidr(layout.data_dir)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"error: cannot set up the pod network ({exc}); --no-pod-network runs without", file=sys.stderr)
            return 1
        layout = _layout(args)
    problems = [c for c in startup_checks(layout, pod_network=not args.no_pod_network) if c.status == FAIL]
    if problems:
        for problem in problems:
            print(f"{ERROR_PREFIX}{problem.line()}", file=sys.stderr)
        return 1
    layout.logs_dir.mkdir(parents=True, exist_ok=True)
    supervisor_log = layout.logs_dir / "supervisor.log"
    log_offset = supervisor_log.stat().st_size if supervisor_log.exists() else 0
    argv = pykubevirt_argv(
        *("supervise", "--data-dir", str(layout.data_dir), "--nodes", str(layout.node_count)),
        *("--listen", layout.listen, "--fence-grace", str(args.fence_grace)),
    )
    started = time.time()
    with supervisor_log.open("ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    print(f"starting the embedded cluster in {layout.data_dir} ({layout.node_count} node(s))", flush=True)
    left_out = layout.left_out_nodes
    if left_out and args.fence_grace > 0:
        names = ", ".join(left_out)
        it, its, stays = ("it", "its", "stays") if len(left_out) == 1 else ("them", "their", "stay")
        every = max(map(node_number, left_out))
        print(
            f"{names} of this data dir {stays} down ({layout.node_count} node(s) started; --nodes {every} starts "
            f"{it} again): the supervisor fences {it}, so {its} VMs start on {', '.join(layout.node_names)}",
            flush=True,
        )
    try:
        asyncio.run(_wait_ready(layout, process))
    except ComponentFailed as exc:
        print(f"{ERROR_PREFIX}{exc} (the supervisor keeps retrying; `pykubevirt down` stops it)", file=sys.stderr)
        return 1
    except (TimeoutError, RuntimeError) as exc:
        cause = _new_error_line(supervisor_log, log_offset) if process.poll() is not None else None
        print(f"{ERROR_PREFIX}{cause or f'{exc}; see {supervisor_log}'}", file=sys.stderr)
        return 1
    print(f"pykubevirt is up: API server on https://{layout.listen}, nodes {', '.join(layout.node_names)}")
    _print_next_steps(layout)
    _print_console(layout, _console_address(layout, started))
    return 0


def _console_address(layout: ClusterLayout, since: float) -> str:
    """The address this run's web console wrote, waiting a little for it (it starts after the API server)."""
    deadline = time.monotonic() + CONSOLE_WAIT_SECONDS
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if layout.webconsole_address_file.stat().st_mtime >= since - 1:
                return recorded_address(layout.webconsole_address_file)
        time.sleep(0.1)
    return ""


def _print_console(layout: ClusterLayout, address: str) -> None:
    if not address:
        print(f"the web console is not serving yet; see {layout.logs_dir / 'webconsole.log'}")
        return
    print(f"web console: http://{address}/ (log in with the token of $KUBECONFIG: {TOKEN_COMMAND})")


class ComponentFailed(RuntimeError):
    """A component exited at start-up with a one-line cause."""


def _new_error_line(log: Path, offset: int) -> str | None:
    try:
        with log.open("rb") as file:
            file.seek(offset)
            return last_error_line(file.read().decode(errors="replace"))
    except OSError:
        return None


def _failed_component(state: dict[str, Any]) -> str | None:
    """`NAME: CAUSE` of a component whose start failed for a known reason (the supervisor records the cause)."""
    for name, component in (state.get("components") or {}).items():
        message = (component.get("lastExit") or {}).get("message")
        if message:
            return f"{name}: {message}"
    return None


def _print_next_steps(layout: ClusterLayout) -> None:
    print(f"export KUBECONFIG={layout.kubeconfig}")
    if layout.cluster_cidr:
        # The pod network lives only on this host, which routes the cluster CIDR to it: guests are reached directly.
        print(
            f"pods and VMs get IPs of {layout.cluster_cidr}, reachable from this host: "
            "kubectl get vmi shows a VM's IP (the demo guest serves a page: curl http://IP/)"
        )


async def _wait_ready(layout: ClusterLayout, process: subprocess.Popen[bytes]) -> None:
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import ConfigError, load_kubeconfig
    from pykubevirt.client.resources import NODES

    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    client: KubeClient | None = None
    last = "the supervisor is starting"
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the supervisor exited with code {process.returncode}")
            state = _read_state(layout)
            # A state file a crashed supervisor left is not this one's.
            if state is None or state.get("supervisorPid") != process.pid:
                await asyncio.sleep(0.1)
                continue
            failed = _failed_component(state)
            if failed:
                raise ComponentFailed(failed)
            if client is None:
                try:
                    client = KubeClient(load_kubeconfig(layout.kubeconfig), qps=0)
                except ConfigError:
                    await asyncio.sleep(0.1)
                    continue
            try:
                nodes = (await client.list(NODES))["items"]
            except ConnectionError as exc:
                last = f"the API server does not answer: {exc}"
                await asyncio.sleep(0.2)
                continue
            ready = {n["metadata"]["name"] for n in nodes if node_schedulable(n)}
            if set(layout.node_names) <= ready:
                return
            last = f"nodes ready: {sorted(ready) or 'none'} of {layout.node_names}"
            await asyncio.sleep(0.2)
    finally:
        if client is not None:
            await client.close()
    raise TimeoutError(f"the cluster was not ready within {READY_TIMEOUT_SECONDS:.0f}s ({last})")


def node_schedulable(node: dict[str, Any]) -> bool:
    """Ready, and labelled schedulable by its virt-handler: a node VMs can start on."""
    conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
    labels = node["metadata"].get("labels") or {}
    return conditions.get("Ready") == "True" and labels.get("kubevirt.io/schedulable") == "true"


# ------------------------------------------------------------------------------------------------ down


def down(args: argparse.Namespace) -> int:
    layout = _layout(args)
    pid = supervisor_pid(layout)
    if not pid:
        print(f"pykubevirt is not running in {layout.data_dir}")
        if args.all:
            from pykubevirt.node.teardown import kill_node_pods

            killed = sum(kill_node_pods(node) for node in (layout.data_dir / "nodes").glob("*") if node.is_dir())
            if killed:
                print(f"stopped {killed} pod processes and guests left running")
            cluster_network.release_cluster_network(layout.data_dir)
        return 0
    if args.all:
        layout.run_dir.mkdir(parents=True, exist_ok=True)
        (layout.run_dir / "stop-all").write_text("")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or supervisor_pid(layout) != pid:
            what = "the cluster and every guest" if args.all else "the cluster (running guests keep running)"
            if args.all:
                cluster_network.release_cluster_network(layout.data_dir)
            print(f"stopped {what}")
            return 0
        time.sleep(0.1)
    print(f"error: the supervisor (pid {pid}) did not stop within 90s", file=sys.stderr)
    return 1


# ------------------------------------------------------------------------------------------------ status


def status(args: argparse.Namespace) -> int:
    layout = _layout(args)
    pid = supervisor_pid(layout)
    state = _read_state(layout) if pid else None
    if not pid or state is None:
        print(f"pykubevirt is not running in {layout.data_dir}")
        return 1
    print(f"supervisor pid {pid}, data in {layout.data_dir}")
    print(f"export KUBECONFIG={state.get('kubeconfig')}")
    rows: list[tuple[str, ...]] = [("COMPONENT", "STATUS", "PID", "RESTARTS", "SINCE")]
    for name, component in (state.get("components") or {}).items():
        running = component.get("running") and Path(f"/proc/{component.get('pid')}").exists()
        rows.append(
            (
                name,
                "Running" if running else "Restarting",
                str(component.get("pid") or "-"),
                str(component.get("restarts", 0)),
                str(component.get("startedAt") or "-"),
            )
        )
    _table(rows)
    nodes, handlers = asyncio.run(_nodes(layout))
    print()
    _table([("NODE", "STATUS", "SCHEDULABLE", "VMIS"), *nodes])
    print()
    # A node this supervisor does not run keeps the address its last handler wrote: nothing serves there.
    running = set(state.get("nodes") or [])
    handlers = {node: address for node, address in handlers.items() if node in running}
    _table(metrics_rows(_server(layout), recorded_address(layout.controller_metrics_file), handlers))
    print()
    _print_console(layout, recorded_address(layout.webconsole_address_file))
    return 0


def _server(layout: ClusterLayout) -> str:
    from pykubevirt.client.config import ConfigError, load_kubeconfig

    try:
        return load_kubeconfig(layout.kubeconfig).server
    except (OSError, ValueError, ConfigError):
        return f"https://{layout.listen}"


async def _nodes(layout: ClusterLayout) -> tuple[list[tuple[str, ...]], dict[str, str]]:
    from pykubevirt.client.api import KubeClient
    from pykubevirt.client.config import load_kubeconfig
    from pykubevirt.client.resources import NODES, VIRTUAL_MACHINE_INSTANCES

    client = KubeClient(load_kubeconfig(layout.kubeconfig), qps=0)
    try:
        nodes = (await client.list(NODES))["items"]
        vmis = (await client.list(VIRTUAL_MACHINE_INSTANCES))["items"]
    except ConnectionError as exc:
        return [("(API server unavailable)", str(exc), "", "")], {}
    finally:
        await client.close()
    per_node: dict[str, int] = {}
    for vmi in vmis:
        node = (vmi.get("status") or {}).get("nodeName") or ""
        per_node[node] = per_node.get(node, 0) + 1
    rows: list[tuple[str, ...]] = []
    for node in nodes:
        name = node["metadata"]["name"]
        ready = "Ready" if (objects.condition(node, "Ready") or {}).get("status") == "True" else "NotReady"
        fenced = objects.condition(node, FENCED_CONDITION) or {}
        if fenced.get("status") == "True":
            ready += f" (fenced: {fenced.get('reason', '')})"
        schedulable = (node["metadata"].get("labels") or {}).get("kubevirt.io/schedulable", "false")
        rows.append((name, ready, schedulable, str(per_node.get(name, 0))))
    return rows, handler_addresses(nodes)


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


# ------------------------------------------------------------------------------------------------ supervise


def supervise(args: argparse.Namespace) -> int:
    from pykubevirt import log
    from pykubevirt.cli.supervisor import Supervisor

    log.configure("supervisor")
    try:
        return asyncio.run(Supervisor(_layout(args), fence_grace=args.fence_grace).run())
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1


def node_count(value: str) -> int:
    try:
        count = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of nodes: {value!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"a cluster needs at least one node, not {count}")
    return count


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    data_help = f"where the cluster keeps its state (default {DEFAULT_DATA_DIR})"
    fence_help = (
        "seconds without any heartbeat from a node before the supervisor kills its processes and its VMs move "
        f"(default {DEFAULT_FENCE_GRACE_SECONDS:.0f}; 0: never fence, the node is only marked unresponsive)"
    )
    parser = sub.add_parser("up", help="start the embedded cluster (API server, controllers, nodes) in the background")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help=data_help)
    parser.add_argument(
        "--nodes",
        type=node_count,
        default=None,
        help="how many nodes (node agent + virt-handler each; default: as many as the data dir last ran, else 1)",
    )
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT of the API server")
    parser.add_argument("--fence-grace", type=float, default=DEFAULT_FENCE_GRACE_SECONDS, help=fence_help)
    parser.add_argument(
        "--no-pod-network",
        action="store_true",
        help="pods share the host's network instead of getting their own namespaces on a CNI bridge",
    )
    parser.set_defaults(func=up)

    parser = sub.add_parser("down", help="stop the embedded cluster; running guests keep running unless --all")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help=data_help)
    parser.add_argument("--all", action="store_true", help="also stop every launcher pod and guest")
    parser.set_defaults(func=down)

    parser = sub.add_parser("status", help="show the embedded cluster's components and nodes")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help=data_help)
    parser.set_defaults(func=status)

    parser = sub.add_parser("supervise", help="run the supervisor in the foreground (what `up` starts)")
    parser.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR), help=data_help)
    parser.add_argument("--nodes", type=node_count, default=None)
    parser.add_argument("--listen", default=DEFAULT_LISTEN)
    parser.add_argument("--fence-grace", type=float, default=DEFAULT_FENCE_GRACE_SECONDS, help=fence_help)
    parser.set_defaults(func=supervise)
