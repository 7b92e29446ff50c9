"""A node's virt-handler address (the Node annotation `constants.HANDLER_ADDRESS_ANNOTATION`) as a base URL: `host:port`
of a handler serving plain HTTP on an embedded node's loopback address, or the `https://` URL of one serving mutual
TLS on its pod's IP (a cluster)."""

from __future__ import annotations


def handler_url(address: str) -> str:
    """`host:port` → `http://host:port`; an explicit http(s) URL is kept (without a trailing slash)."""
    address = address.strip().rstrip("/")
    if address.startswith(("http://", "https://")):
        return address
    return f"http://{address}"
