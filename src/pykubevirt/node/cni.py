"""CNI plugins invoked as a kubelet's runtime does: the plugin binaries from CNI_PATH, CNI_* in the environment, the
network's configuration list (a file under the node's data dir) fed plugin by plugin on stdin.

Plugins run inside the cluster's network namespace, which stands for the node's host network: the bridge plugin
turns forwarding on where it runs, and that must never be the host's own namespace.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykubevirt.node import netns

CNI_PATH = os.environ.get("PYKUBEVIRT_CNI_PATH") or "/usr/lib/cni"
CNI_VERSION = "1.0.0"
LOOPBACK: dict[str, Any] = {"cniVersion": CNI_VERSION, "name": "cni-loopback", "type": "loopback"}


@dataclass(frozen=True, slots=True)
class Invocation:
    """Who a CNI call is for: the sandbox (container id, netns path, interface) and the pod's CNI_ARGS."""

    container_id: str
    netns_path: str
    ifname: str
    args: str = ""


def pod_args(namespace: str, name: str, uid: str) -> str:
    """CNI_ARGS as the kubelet passes them."""
    return (
        f"IgnoreUnknown=1;K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name};"
        f"K8S_POD_INFRA_CONTAINER_ID={uid};K8S_POD_UID={uid}"
    )


def bridge_conflist(name: str, bridge: str, subnets: str | Sequence[str], ipam_dir: Path, mtu: int) -> dict[str, Any]:
    """The node's pod network: bridge + host-local IPAM from the node's podCIDRs (one range set per family, IPv4
    first, each with its default route), then portmap for hostPorts."""
    subnet_list = [subnets] if isinstance(subnets, str) else list(subnets)
    routes = [{"dst": "::/0" if ":" in subnet else "0.0.0.0/0"} for subnet in subnet_list]
    return {
        "cniVersion": CNI_VERSION,
        "name": name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "mtu": mtu,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}] for subnet in subnet_list],
                    "routes": routes,
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
        ],
    }


def has_ipv6(conflist: Mapping[str, Any]) -> bool:
    """Whether a configuration list's IPAM gives IPv6 addresses."""
    for plugin in conflist.get("plugins") or []:
        for ranges in ((plugin.get("ipam") or {}).get("ranges")) or []:
            if any(":" in str(r.get("subnet") or "") for r in ranges):
                return True
    return False


def write_conflist(path: Path, conflist: Mapping[str, Any]) -> None:
    """The configuration file the node's runtime reads (written atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(conflist, indent=2) + "\n")
    os.replace(tmp, path)


async def _exec_plugin(
    plugin: Mapping[str, Any], command: str, call: Invocation, run_in: str, cni_path: str
) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": call.container_id,
        "CNI_NETNS": call.netns_path,
        "CNI_IFNAME": call.ifname,
        "CNI_PATH": cni_path,
        "CNI_ARGS": call.args,
    }
    binary = os.path.join(cni_path.split(os.pathsep)[0], str(plugin["type"]))
    argv = [*netns.enter_argv(run_in), binary] if run_in else [binary]
    try:
        out = await netns.run(argv, stdin=json.dumps(plugin).encode(), env=env)
    except netns.NetworkError as exc:
        raise netns.NetworkError(f"CNI {plugin['type']} {command}: {_plugin_error(str(exc))}") from exc
    return json.loads(out) if out.strip() else {}


def _plugin_error(text: str) -> str:
    """A plugin reports its error as JSON {code, msg, details} on stdout."""
    start = text.find("{")
    if start >= 0:
        try:
            body = json.loads(text[start:])
            return str(body.get("msg") or text) + (f" ({body['details']})" if body.get("details") else "")
        except ValueError:
            pass
    return text


def _plugin_conf(
    conflist: Mapping[str, Any], plugin: Mapping[str, Any], runtime: Mapping[str, Any], prev: Mapping[str, Any] | None
) -> dict[str, Any]:
    conf: dict[str, Any] = {"cniVersion": conflist["cniVersion"], "name": conflist["name"], **plugin}
    wanted = {key: value for key, value in runtime.items() if (plugin.get("capabilities") or {}).get(key)}
    if wanted:
        conf["runtimeConfig"] = wanted
    if prev is not None:
        conf["prevResult"] = prev
    return conf


async def add_network(
    conflist: Mapping[str, Any],
    call: Invocation,
    *,
    run_in: str,
    runtime: Mapping[str, Any] | None = None,
    cni_path: str = CNI_PATH,
) -> dict[str, Any]:
    """ADD through every plugin of the list in order, each given the previous result; the last result."""
    result: dict[str, Any] | None = None
    for plugin in conflist["plugins"]:
        conf = _plugin_conf(conflist, plugin, runtime or {}, result)
        result = await _exec_plugin(conf, "ADD", call, run_in, cni_path) or result
    return result or {}


async def del_network(
    conflist: Mapping[str, Any],
    call: Invocation,
    *,
    run_in: str,
    runtime: Mapping[str, Any] | None = None,
    cni_path: str = CNI_PATH,
) -> None:
    """DEL through the list in reverse order (idempotent: the plugins accept a gone netns or a second DEL)."""
    for plugin in reversed(conflist["plugins"]):
        await _exec_plugin(_plugin_conf(conflist, plugin, runtime or {}, None), "DEL", call, run_in, cni_path)


async def add_loopback(netns_path: str, container_id: str, *, run_in: str, cni_path: str = CNI_PATH) -> None:
    """`lo` up in the sandbox through the loopback plugin, as the container runtime does for every pod."""
    await _exec_plugin(LOOPBACK, "ADD", Invocation(container_id, netns_path, "lo"), run_in, cni_path)


def result_ips(result: Mapping[str, Any], ifname: str = "eth0") -> list[str]:
    """The addresses (without prefix) the result gives the sandbox's interface, IPv4 first."""
    interfaces = result.get("interfaces") or []
    found: list[str] = []
    for ip in result.get("ips") or []:
        index = ip.get("interface")
        if index is not None and 0 <= index < len(interfaces) and interfaces[index].get("name") != ifname:
            continue
        found.append(str(ip["address"]).split("/")[0])
    return sorted(found, key=lambda a: ":" in a)


def ports_of(pod: Mapping[str, Any]) -> Sequence[dict[str, Any]]:
    """The pod's hostPorts as the portMappings capability (runtimeConfig) of portmap."""
    mappings = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                mappings.append(
                    {
                        "hostPort": int(port["hostPort"]),
                        "containerPort": int(port["containerPort"]),
                        "protocol": str(port.get("protocol") or "TCP").lower(),
                        "hostIP": str(port.get("hostIP") or ""),
                    }
                )
    return mappings
