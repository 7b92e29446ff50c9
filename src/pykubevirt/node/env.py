"""A container's environment as the kubelet builds it: envFrom, then env with valueFrom and `$(VAR)` expansion."""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pykubevirt.api.quantity import QuantityError, parse_quantity
from pykubevirt.node.registration import NODE_IP

# (kind "ConfigMap"/"Secret", namespace, name) → the object, or None when it does not exist.
Fetch = Callable[[str, str, str], Awaitable[dict[str, Any] | None]]

_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


class ConfigError(Exception):
    """The container cannot be configured yet (kubelet's CreateContainerConfigError), e.g. a missing ConfigMap."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$` escapes, anything else stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i : end + 1])
                    i = end + 1
                    continue
        out.append(text[i])
        i += 1
    return "".join(out)


def field_value(pod: Mapping[str, Any], path: str) -> str:
    """A downward-API fieldRef of the pod (the kubelet's supported set)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": NODE_IP,
        "status.hostIPs": NODE_IP,
        "status.podIP": NODE_IP,
        "status.podIPs": NODE_IP,
    }
    if path in simple:
        return str(simple[path] or "")
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{key}="{values[key]}"' for key in sorted(values))
    match = _FIELD_LABEL.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any], node_capacity: Mapping[str, str]) -> str:
    """A resourceFieldRef: the container's limit (the node's capacity when unlimited) or request, over the divisor."""
    resource = str(ref.get("resource") or "")
    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "limits":
        raw = node_capacity.get(name)
    if raw is None:
        raw = "0"
    try:
        amount = parse_quantity(raw).value
        divisor = parse_quantity(ref.get("divisor") or "1").value
    except QuantityError as exc:
        raise ConfigError(f"resourceFieldRef {resource}: {exc}") from exc
    if divisor == 0:
        raise ConfigError(f"resourceFieldRef {resource}: divisor is zero")
    return str(math.ceil(amount / divisor))


def config_data(obj: Mapping[str, Any], kind: str) -> dict[str, bytes]:
    """The keys of a ConfigMap (data and base64 binaryData) or a Secret (base64 data) with their bytes."""
    if kind == "Secret":
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    values = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    values.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    return values


async def fetch_config(fetch: Fetch, kind: str, namespace: str, name: str, optional: bool) -> dict[str, Any] | None:
    """The ConfigMap or Secret; None when an optional one is missing, ConfigError when a required one is."""
    obj = await fetch(kind, namespace, name)
    if obj is None and not optional:
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    return obj


async def _source(fetch: Fetch, kind: str, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    obj = await fetch_config(fetch, kind, namespace, name, optional)
    if obj is None:
        return None
    return {k: v.decode("utf-8", "replace") for k, v in config_data(obj, kind).items()}


async def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    fetch: Fetch,
    node_capacity: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables spec.env/envFrom give the container, in the kubelet's order and precedence."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            values = await _source(fetch, kind, namespace, str(ref.get("name") or ""), bool(ref.get("optional")))
            for name, value in (values or {}).items():
                if _ENV_NAME.match(prefix + name):
                    env[prefix + name] = value
    for entry in container.get("env") or []:
        name = str(entry.get("name") or "")
        if not name:
            continue
        value_from = entry.get("valueFrom")
        if value_from is None:
            env[name] = expand(str(entry.get("value") or ""), env)
            continue
        if (ref := value_from.get("fieldRef")) is not None:
            env[name] = field_value(pod, str(ref.get("fieldPath") or ""))
        elif (ref := value_from.get("resourceFieldRef")) is not None:
            env[name] = resource_value(container, ref, node_capacity or {})
        else:
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                ref = value_from.get(key)
                if ref is None:
                    continue
                optional = bool(ref.get("optional"))
                values = await _source(fetch, kind, namespace, str(ref.get("name") or ""), optional)
                wanted = str(ref.get("key") or "")
                if values is not None and wanted in values:
                    env[name] = values[wanted]
                elif not optional:
                    raise ConfigError(f"couldn't find key {wanted} in {kind} {namespace}/{ref.get('name')}")
    return env
