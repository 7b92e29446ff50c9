"""A manifest printed as sigs.k8s.io/yaml prints one: keys sorted, block style, multi-line strings as literals."""

from __future__ import annotations

from typing import Any

import yaml


class _ManifestDumper(yaml.SafeDumper):
    """go-yaml's layout: lists not indented under their key, `|` for strings with newlines."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_ManifestDumper.add_representer(str, _string)


def render(manifest: dict[str, Any]) -> str:
    return yaml.dump(manifest, Dumper=_ManifestDumper, sort_keys=True, default_flow_style=False, width=1 << 16)
