"""The embedded cluster's Service proxy, as kube-proxy's nftables mode: on the host, connections to a ClusterIP:port
are DNATed to one of the Service's ready endpoints, picked at random, in an nft table of pykubevirt's own.

The whole table is rendered from the Services and Endpoints and replaced in one `nft -f` transaction whenever it
changes. Anything else sent to the service range (a port no Service has, a Service without endpoints) is rejected
on the host, so it never leaves it; `pykubevirt down --all` deletes the table.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.client.api import KubeClient, Object
from pykubevirt.client.controller import Controller, Result, run_until_failure
from pykubevirt.client.informer import Informer, object_key
from pykubevirt.client.resources import ENDPOINTS, SERVICES

log = logging.getLogger("pykubevirt.node.service_proxy")

NFT = "nft"
FAMILY = "ip"
KEY = "all"


@dataclass(frozen=True, slots=True)
class ServicePort:
    """One ClusterIP:port and the endpoints (ip, port) it balances over."""

    name: str
    cluster_ip: str
    port: int
    protocol: str
    endpoints: tuple[tuple[str, int], ...]


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
            found.append(
                ServicePort(f"{key}:{port_name}", cluster_ip, int(port["port"]), protocol, tuple(sorted(targets)))
            )
    return sorted(found, key=lambda p: (p.cluster_ip, p.protocol, p.port))


def guarded(service_cidr: str, ports: list[ServicePort]) -> str:
    """The destinations the proxy answers for: its range, and any ClusterIP outside it (an API server given another
    range), so that no Service address is ever routed off the host, whatever the API server allocated."""
    network = ipaddress.IPv4Network(service_cidr)
    outside = sorted({p.cluster_ip for p in ports if ipaddress.IPv4Address(p.cluster_ip) not in network})
    return "{ " + ", ".join([service_cidr, *outside]) + " }" if outside else service_cidr


def render_table(table: str, service_cidr: str, ports: list[ServicePort]) -> str:
    """The nft script that replaces the table atomically with these Services' rules."""
    destinations = guarded(service_cidr, ports)
    lines = [f"table {FAMILY} {table}", f"delete table {FAMILY} {table}", f"table {FAMILY} {table} {{"]
    lines += [
        "\tchain nat-output {",
        "\t\ttype nat hook output priority -100; policy accept;",
        f"\t\tip daddr {destinations} jump services",
        "\t}",
        "\tchain services {",
    ]
    chains: list[str] = []
    for port in ports:
        if not port.endpoints:
            continue
        service_chain = f"svc-{_chain_id(port.name, port.protocol, port.port)}"
        lines.append(
            f"\t\tip daddr {port.cluster_ip} {port.protocol} dport {port.port} goto {service_chain}"
            f' comment "{port.name}"'
        )
        endpoint_chains = [f"ep-{_chain_id(port.name, port.protocol, ip, number)}" for ip, number in port.endpoints]
        if len(endpoint_chains) == 1:
            chains += [f"\tchain {service_chain} {{", f"\t\tgoto {endpoint_chains[0]}", "\t}"]
        else:
            choices = ", ".join(f"{i} : goto {chain}" for i, chain in enumerate(endpoint_chains))
            chains += [
                f"\tchain {service_chain} {{",
                f"\t\tnumgen random mod {len(endpoint_chains)} vmap {{ {choices} }}",
                "\t}",
            ]
        for chain, (ip, number) in zip(endpoint_chains, port.endpoints, strict=True):
            chains += [f"\tchain {chain} {{", f"\t\tmeta l4proto {port.protocol} dnat to {ip}:{number}", "\t}"]
    lines.append("\t}")
    lines += chains
    # After DNAT only what matched no Service still has a service-range destination: refused here, on the host.
    lines += [
        "\tchain filter-output {",
        "\t\ttype filter hook output priority 0; policy accept;",
        f"\t\tip daddr {destinations} meta l4proto tcp reject with tcp reset",
        f"\t\tip daddr {destinations} reject",
        "\t}",
        "}",
    ]
    return "\n".join(lines) + "\n"


async def nft(script: str) -> None:
    """Run an nft script as one transaction; RuntimeError with nft's message when it is refused."""
    process = await asyncio.create_subprocess_exec(
        NFT, "-f", "-", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await process.communicate(script.encode())
    if process.returncode != 0:
        raise RuntimeError(f"nft -f: {err.decode(errors='replace').strip()}")


async def delete_table(table: str) -> None:
    """Remove the proxy's table (no-op when it is not there)."""
    await nft(f"table {FAMILY} {table}\ndelete table {FAMILY} {table}\n")


class ServiceProxy:
    """Watches Services and Endpoints; rewrites the table whenever the rules it renders change."""

    def __init__(self, client: KubeClient, *, table: str, service_cidr: str) -> None:
        self.client = client
        self.table = table
        self.service_cidr = service_cidr
        self.services = Informer(client, SERVICES)
        self.endpoints = Informer(client, ENDPOINTS)
        self.applied = ""
        self.controller = Controller("service-proxy", self).watch(self.services, self._all)
        self.controller.watch(self.endpoints, self._all)

    @staticmethod
    def _all(obj: Object) -> list[str]:
        # One key: the table is rendered whole, and bursts of changes coalesce into one rewrite.
        return [KEY]

    def render(self) -> str:
        by_key = {object_key(e): e for e in self.endpoints.items()}
        return render_table(self.table, self.service_cidr, service_ports(self.services.items(), by_key))

    async def reconcile(self, key: str) -> Result | None:
        script = self.render()
        if script != self.applied:
            await nft(script)
            self.applied = script
            log.info("service rules updated in nft table %s %s", FAMILY, self.table)
        return None

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self.services.run(), name="informer-services-proxy"),
            asyncio.create_task(self.endpoints.run(), name="informer-endpoints-proxy"),
            asyncio.create_task(self.controller.run(), name="service-proxy"),
        ]
        # An empty cluster still gets its reject rules.
        self.controller.queue.add(KEY)
        await run_until_failure(tasks)
