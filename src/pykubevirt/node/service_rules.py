"""The nft rules of the embedded cluster's Service proxy, rendered from plain Service and Endpoints data, as
kube-proxy's nftables mode: a ClusterIP:port (or a node's InternalIP:nodePort) is DNATed to one of the Service's ready
endpoints, picked at random.

Two tables of one name are rendered. The host's (hook output) serves connections made on the host: ClusterIPs, and
nodePorts on the nodes' loopback InternalIPs, which are masqueraded to the host link's address, as a reply to a
127/8 source cannot be routed back. The cluster namespace's (hook prerouting, where every node bridge ends) serves
pods and guests; what it DNATs is masqueraded too, so that a pod reaching a Service backed by a pod on its own
bridge gets the reply through the namespace's conntrack and not straight over the bridge (kube-proxy's hairpin case,
taken for every connection, as `--masquerade-all` does).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FAMILY = "ip"
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One ClusterIP:port (and its nodePort, 0 for none) and the endpoints (ip, port) it balances over."""

    name: str
    cluster_ip: str
    port: int
    protocol: str
    endpoints: tuple[tuple[str, int], ...]
    node_port: int = 0

    @property
    def chain(self) -> str:
        return f"svc-{_chain_id(self.name, self.protocol, self.port)}"


def _chain_id(*parts: object) -> str:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()[:16]


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def service_ports(
    services: Iterable[Mapping[str, Any]], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ServicePort]:
    """Every TCP/UDP port of every Service with an IPv4 ClusterIP, with its ready endpoints (`endpoints` by key)."""
    found = []
    for service in services:
        meta, spec = service.get("metadata") or {}, service.get("spec") or {}
        cluster_ip = str(spec.get("clusterIP") or "")
        if spec.get("type") == "ExternalName" or not _is_ipv4(cluster_ip):
            continue
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        subsets = (endpoints.get(key) or {}).get("subsets") or []
        for port in spec.get("ports") or []:
            protocol = str(port.get("protocol") or "TCP").lower()
            if protocol not in ("tcp", "udp"):
                continue
            port_name = str(port.get("name") or "")
            targets = set()
            for subset in subsets:
                for ep_port in subset.get("ports") or []:
                    if (
                        str(ep_port.get("name") or "") != port_name
                        or str(ep_port.get("protocol") or "TCP").lower() != protocol
                    ):
                        continue
                    for address in subset.get("addresses") or []:
                        targets.add((str(address["ip"]), int(ep_port["port"])))
            node_port = int(port.get("nodePort") or 0) if spec.get("type") in NODE_PORT_TYPES else 0
            found.append(
                ServicePort(
                    f"{key}:{port_name}", cluster_ip, int(port["port"]), protocol, tuple(sorted(targets)), node_port
                )
            )
    return sorted(found, key=lambda p: (p.cluster_ip, p.protocol, p.port))


def node_ips(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The nodes' loopback IPv4 InternalIPs: where nodePorts are served (a real address of the host never is)."""
    found = set()
    for node in nodes:
        for address in (node.get("status") or {}).get("addresses") or []:
            value = str(address.get("address") or "")
            if address.get("type") == "InternalIP" and _is_ipv4(value) and ipaddress.IPv4Address(value).is_loopback:
                found.add(value)
    return sorted(found, key=ipaddress.IPv4Address)


def _set(items: Sequence[object]) -> str:
    return "{ " + ", ".join(str(i) for i in items) + " }" if len(items) > 1 else str(items[0])


def guarded(service_cidr: str, ports: list[ServicePort]) -> str:
    """The destinations the proxy answers for: its range, and any ClusterIP outside it (an API server given another
    range), so that no Service address is ever routed off the host, whatever the API server allocated."""
    network = ipaddress.IPv4Network(service_cidr)
    outside = sorted({p.cluster_ip for p in ports if ipaddress.IPv4Address(p.cluster_ip) not in network})
    return _set([service_cidr, *outside])


def _service_chains(ports: list[ServicePort]) -> tuple[list[str], list[str]]:
    """The `services` chain's dispatch rules, and the per-Service and per-endpoint chains they go to."""
    rules: list[str] = []
    chains: list[str] = []
    for port in ports:
        if not port.endpoints:
            continue
        rules.append(
            f'\t\tip daddr {port.cluster_ip} {port.protocol} dport {port.port} goto {port.chain} comment "{port.name}"'
        )
        endpoint_chains = [f"ep-{_chain_id(port.name, port.protocol, ip, number)}" for ip, number in port.endpoints]
        if len(endpoint_chains) == 1:
            chains += [f"\tchain {port.chain} {{", f"\t\tgoto {endpoint_chains[0]}", "\t}"]
        else:
            choices = ", ".join(f"{i} : goto {chain}" for i, chain in enumerate(endpoint_chains))
            chains += [
                f"\tchain {port.chain} {{",
                f"\t\tnumgen random mod {len(endpoint_chains)} vmap {{ {choices} }}",
                "\t}",
            ]
        for chain, (ip, number) in zip(endpoint_chains, port.endpoints, strict=True):
            chains += [f"\tchain {chain} {{", f"\t\tmeta l4proto {port.protocol} dnat to {ip}:{number}", "\t}"]
    return rules, chains


def _header(table: str) -> list[str]:
    # Declaring then deleting makes the replacement one transaction whether or not the table exists.
    return [f"table {FAMILY} {table}", f"delete table {FAMILY} {table}", f"table {FAMILY} {table} {{"]


def render_table(table: str, service_cidr: str, ports: list[ServicePort], nodes: Sequence[str] = ()) -> str:
    """The host's nft script: ClusterIPs, and nodePorts on the `nodes` addresses, DNATed for the host's own
    connections; the rest of the service range, and nodePorts without endpoints, refused on the host."""
    destinations = guarded(service_cidr, ports)
    rules, chains = _service_chains(ports)
    served = [p for p in ports if p.node_port and p.endpoints] if nodes else []
    idle = sorted({(p.protocol, p.node_port) for p in ports if p.node_port and not p.endpoints}) if nodes else []
    lines = _header(table)
    lines += [
        "\tchain nat-output {",
        "\t\ttype nat hook output priority -100; policy accept;",
        f"\t\tip daddr {destinations} jump services",
    ]
    if served:
        lines.append(f"\t\tip daddr {_set(nodes)} jump node-ports")
    lines += ["\t}", "\tchain services {", *rules, "\t}"]
    if served:
        lines.append("\tchain node-ports {")
        lines += [f'\t\t{p.protocol} dport {p.node_port} goto {p.chain} comment "{p.name}"' for p in served]
        lines += [
            "\t}",
            "\tchain nat-postrouting {",
            "\t\ttype nat hook postrouting priority 100; policy accept;",
            # Only what node-ports DNATed: a node's address may be 127.0.0.1, which every local client uses.
            f"\t\tct status dnat ct original ip daddr {_set(nodes)} masquerade",
            "\t}",
        ]
    lines += chains
    # After DNAT only what matched no Service still has a service-range destination: refused here, on the host.
    lines += [
        "\tchain filter-output {",
        "\t\ttype filter hook output priority 0; policy accept;",
        f"\t\tip daddr {destinations} meta l4proto tcp reject with tcp reset",
        f"\t\tip daddr {destinations} reject",
    ]
    for protocol, number in idle:
        reject = "reject with tcp reset" if protocol == "tcp" else "reject"
        lines.append(f"\t\tip daddr {_set(nodes)} {protocol} dport {number} {reject}")
    lines += ["\t}", "}"]
    return "\n".join(lines) + "\n"


def render_pod_table(table: str, service_cidr: str, ports: list[ServicePort]) -> str:
    """The cluster namespace's nft script: pods' and guests' connections to ClusterIPs DNATed as they arrive from
    the node bridges, and masqueraded; a ClusterIP:port without endpoints stays unroutable there (ICMP unreachable)."""
    destinations = guarded(service_cidr, ports)
    rules, chains = _service_chains(ports)
    lines = _header(table)
    lines += [
        "\tchain nat-prerouting {",
        "\t\ttype nat hook prerouting priority -100; policy accept;",
        f"\t\tip daddr {destinations} jump services",
        "\t}",
        "\tchain services {",
        *rules,
        "\t}",
        "\tchain nat-postrouting {",
        "\t\ttype nat hook postrouting priority 100; policy accept;",
        f"\t\tct original ip daddr {destinations} masquerade",
        "\t}",
        *chains,
        "}",
    ]
    return "\n".join(lines) + "\n"
