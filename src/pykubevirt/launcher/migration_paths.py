"""Domain XML paths across a migration: each launcher pod keeps its files under directories of its own. Pure.

In KubeVirt both launcher pods mount their volumes at the same in-pod paths, so the source's domain XML is valid on
the target. Here a pod's volumes are host directories named after the pod, so the XML says which directory is which
(`<pykubevirt:paths>` in the domain metadata) and the target's libvirt hook rewrites the incoming XML's paths to the
target pod's directories before the domain is created there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from xml.etree import ElementTree

if TYPE_CHECKING:
    # Only a type here: the migration hook imports this module in its own short-lived process, inside libvirt's job.
    from pykubevirt.launcher.converter.context import ConverterContext

NAMESPACE = "http://pykubevirt.io/migration"
# Our element as libvirt writes it back: with our prefix, another one, or none (a default namespace).
_BLOCK_PATTERN = re.compile(r"(<(?:([\w.-]+):)?paths\b[^>]*>)(.*?)(</(?:\2:)?paths>)", re.S)


def of_context(ctx: ConverterContext) -> dict[str, str]:
    """The pod directories a converted domain refers to, by role."""
    paths = {
        "private": ctx.private_dir,
        "ephemeralDisks": ctx.ephemeral_disk_dir,
        "containerDisks": ctx.container_disk_dir,
        "libvirtRuntime": ctx.libvirt_runtime_dir,
        "pvcDisks": ctx.pvc_disk_dir,
        "share": ctx.share_dir,
    }
    if ctx.block_device_dir != "/dev":
        paths["blockDevices"] = ctx.block_device_dir
    return paths


def annotate(xml: str, paths: Mapping[str, str]) -> str:
    """`xml` with the pod directories recorded in its metadata (JSON inside one element of our namespace)."""
    block = f'<pykubevirt:paths xmlns:pykubevirt="{NAMESPACE}">{_escape(json.dumps(dict(paths)))}</pykubevirt:paths>'
    if "</metadata>" in xml:
        return xml.replace("</metadata>", block + "</metadata>", 1)
    return xml.replace("</domain>", f"<metadata>{block}</metadata></domain>", 1)


def recorded(xml: str) -> dict[str, str]:
    """The pod directories an XML records (libvirt may re-prefix our element; the namespace is what counts)."""
    root = ElementTree.fromstring(xml)
    element = root.find(f"metadata/{{{NAMESPACE}}}paths")
    if element is None or not element.text:
        return {}
    value = json.loads(element.text)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def retarget(xml: str, target: Mapping[str, str]) -> str:
    """The incoming `xml` with every attribute or element text (a kernel boot's `<kernel>`, `<initrd>`) under a source
    pod directory moved to the target's same directory."""
    source = recorded(xml)
    mapping = {source[role]: target[role] for role in source if role in target and source[role] != target[role]}
    if not mapping:
        return xml
    # One pass, longest prefix first, so a replaced path is never replaced again.
    alternatives = "|".join(re.escape(prefix) for prefix in sorted(mapping, key=len, reverse=True))
    pattern = re.compile(r"(=['\"]|>)(" + alternatives + r")(?=[/'\"<])")
    moved = pattern.sub(lambda m: m.group(1) + mapping[m.group(2)], xml)
    # The metadata now describes the target pod.
    described = _escape(json.dumps(dict(target)))
    return _BLOCK_PATTERN.sub(lambda m: m.group(1) + described + m.group(4), moved, 1)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
