"""Where each component of the embedded cluster serves its Prometheus metrics (`pykubevirt status` prints them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pykubevirt.api import constants as c
from pykubevirt.api.handler_address import handler_url


def recorded_address(path: Path) -> str:
    """The HOST:PORT a component wrote to `path` when its endpoint started; empty when none is there."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def handler_addresses(nodes: list[Mapping[str, object]]) -> dict[str, str]:
    """Each node's virt-handler address, from the annotation its heartbeat writes."""
    found: dict[str, str] = {}
    for node in nodes:
        metadata = node.get("metadata")
        if not isinstance(metadata, Mapping):
            continue
        annotations = metadata.get("annotations")
        address = annotations.get(c.HANDLER_ADDRESS_ANNOTATION) if isinstance(annotations, Mapping) else None
        if address:
            found[str(metadata.get("name", ""))] = str(address)
    return found


def metrics_rows(api_server: str, controller: str, handlers: Mapping[str, str]) -> list[tuple[str, ...]]:
    """A table of component, metrics URL and how to authenticate."""
    rows: list[tuple[str, ...]] = [("COMPONENT", "METRICS", "ACCESS")]
    rows.append(("apiserver", f"{api_server}/metrics", "bearer token (kubectl get --raw /metrics)"))
    # Both check the bearer token with the API server (TokenReview, then SubjectAccessReview for `get /metrics`).
    token = "bearer token, checked by the API server"
    rows.append(("virt-controller", f"http://{controller}/metrics" if controller else "(not serving)", token))
    for node, address in sorted(handlers.items()):
        rows.append((f"virt-handler-{node}", f"{handler_url(address)}/metrics", token))
    return rows
