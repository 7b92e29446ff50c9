"""kube-apiserver's ConfigMap and Secret strategies: their keys, their base64, the keys a Secret's type requires, and
what `immutable: true` (and a Secret's type) keeps from changing (ValidateConfigMap, ValidateSecret and their
Update forms)."""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from typing import TYPE_CHECKING, Any

from pykubevirt.api import errors
from pykubevirt.apiserver.object_meta_validation import Cause, forbidden, invalid, required
from pykubevirt.apiserver.resources import Resource

if TYPE_CHECKING:
    from pykubevirt.apiserver.request_context import RequestContext

_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  "
    "or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# The keys each Secret type must have in data (at least one of, for basic-auth).
_REQUIRED_KEYS = {
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
}
IMMUTABLE = "field is immutable when `immutable` is set"


def config_key_errors(key: str) -> list[str]:
    """IsConfigMapKey."""
    found = []
    if len(key) > 253:
        found.append("must be no more than 253 characters")
    if not _KEY.fullmatch(key):
        found.append(_KEY_MESSAGE)
    if key == ".":
        found.append("must not be '.'")
    elif key == "..":
        found.append("must not be '..'")
    elif key.startswith(".."):
        found.append("must not start with '..'")
    return found


def base64_error(value: str) -> str | None:
    """Go's StdEncoding error for `value` ("illegal base64 data at input byte N"), None when it decodes."""
    text = value.replace("\r", "").replace("\n", "")
    matched = _BASE64.match(text)
    end = matched.end() if matched else 0
    if end == len(text):
        try:
            b64decode(text, validate=True)
            return None
        except (binascii.Error, ValueError):
            end = len(text) - len(text) % 4 if len(text) % 4 else max(len(text) - 1, 0)
    return f"illegal base64 data at input byte {end}"


class ConfigDataAdmission:
    """Validation of ConfigMaps and Secrets on create and update."""

    def handles(self, resource: Resource) -> bool:
        return resource.builtin and not resource.group and resource.kind in ("ConfigMap", "Secret")

    def mutate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> dict[str, Any]:
        return obj

    def validate(
        self, resource: Resource, operation: str, obj: dict[str, Any], old: dict[str, Any] | None, ctx: RequestContext
    ) -> list[str]:
        name = str((obj.get("metadata") or {}).get("name") or "")
        encoded = ("binaryData",) if resource.kind == "ConfigMap" else ("data",)
        for bag in encoded:
            for value in (obj.get(bag) or {}).values():
                if isinstance(value, str) and (problem := base64_error(value)) is not None:
                    raise errors.bad_request(
                        f'{resource.kind} in version "v1" cannot be handled as a {resource.kind}: {problem}'
                    )
        causes = _config_map_causes(obj) if resource.kind == "ConfigMap" else _secret_causes(obj)
        if old is not None:
            causes += _update_causes(resource.kind, obj, old)
        if causes:
            raise errors.invalid(resource.kind, "", name, causes)
        return []


def _key_causes(bag: str, keys: Any) -> list[Cause]:
    return [invalid(f"{bag}[{key}]", key, message) for key in keys or {} for message in config_key_errors(str(key))]


def _config_map_causes(obj: dict[str, Any]) -> list[Cause]:
    data, binary = obj.get("data") or {}, obj.get("binaryData") or {}
    causes = _key_causes("data", data)
    causes += [invalid(f"data[{key}]", key, "duplicate of key present in binaryData") for key in data if key in binary]
    return causes + _key_causes("binaryData", binary)


def _secret_causes(obj: dict[str, Any]) -> list[Cause]:
    data = obj.get("data") or {}
    causes = _key_causes("data", data)
    secret_type = str(obj.get("type") or "")
    if secret_type == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            causes.append(required("data[username]", ""))
    for key in _REQUIRED_KEYS.get(secret_type, ()):
        if key not in data:
            causes.append(required(f"data[{key}]", ""))
    if secret_type == "kubernetes.io/service-account-token":
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if not annotations.get("kubernetes.io/service-account.name"):
            causes.append(required("metadata.annotations[kubernetes.io/service-account.name]", ""))
    return causes


def _update_causes(kind: str, obj: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    if kind == "Secret" and obj.get("type") != old.get("type"):
        causes.append(invalid("type", str(obj.get("type") or ""), "field is immutable"))
    if not old.get("immutable"):
        return causes
    if not obj.get("immutable"):
        causes.append(forbidden("immutable", IMMUTABLE))
    bags = ("data", "binaryData") if kind == "ConfigMap" else ("data",)
    causes += [forbidden(bag, IMMUTABLE) for bag in bags if (obj.get(bag) or {}) != (old.get(bag) or {})]
    return causes
