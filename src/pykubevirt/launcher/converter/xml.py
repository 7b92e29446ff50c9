"""A tiny ordered XML builder over ElementTree: children and attributes come out in the order they were added."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

Element = ET.Element
AttrValue = str | int | None


def _attrs(attrs: Mapping[str, AttrValue] | None) -> dict[str, str]:
    # None means "leave the attribute out", so callers can pass optional values without branching.
    return {key: str(value) for key, value in (attrs or {}).items() if value is not None}


def element(tag: str, attrs: Mapping[str, AttrValue] | None = None, text: str | int | None = None) -> Element:
    """A new detached element."""
    node = ET.Element(tag, _attrs(attrs))
    if text is not None:
        node.text = str(text)
    return node


def sub(
    parent: Element, tag: str, attrs: Mapping[str, AttrValue] | None = None, text: str | int | None = None
) -> Element:
    """Append a child element and return it."""
    node = ET.SubElement(parent, tag, _attrs(attrs))
    if text is not None:
        node.text = str(text)
    return node


def yes_no(value: bool) -> str:
    return "yes" if value else "no"


def on_off(value: bool) -> str:
    return "on" if value else "off"


def to_string(root: Element) -> str:
    """Serialise with two-space indentation and a trailing newline (stable for golden files)."""
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode") + "\n"
