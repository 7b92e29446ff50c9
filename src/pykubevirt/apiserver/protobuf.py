"""Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`), decoded to JSON objects.

kubectl's typed clients (`kubectl create namespace|configmap|secret|serviceaccount|service|pdb|priorityclass`,
`drain`'s evictions) send protobuf and have no JSON fallback for request bodies, so the server must read it. The
envelope is the magic `k8s\\x00` followed by a `runtime.Unknown` message whose `raw` field holds the object; objects
are decoded with the field tables below (from k8s.io/api and k8s.io/apimachinery `generated.proto`). Responses stay
JSON: clients accept it. Zero values are left out, as Go's `omitempty` JSON encoding leaves them out.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.timestamps import format_time

CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class ProtobufError(ValueError):
    """The body is not a well-formed Kubernetes protobuf message."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: its JSON name and how to read it.

    `kind` is string, bytes (base64 in JSON), int64, int32, bool, time (metav1.Time), json (raw JSON bytes),
    message (`message` names the table) or map (`value` is the map's value kind, or a message table's name).
    """

    name: str
    kind: str
    message: str = ""
    repeated: bool = False
    value: str = "string"


def _f(name: str, kind: str = "string", **extra: Any) -> Field:
    return Field(name, kind, **extra)


# Message tables by name: field number → Field.
MESSAGES: dict[str, dict[int, Field]] = {
    "TypeMeta": {1: _f("apiVersion"), 2: _f("kind")},
    "Unknown": {
        1: _f("typeMeta", "message", message="TypeMeta"),
        2: _f("raw", "rawbytes"),
        3: _f("contentEncoding"),
        4: _f("contentType"),
    },
    "ObjectMeta": {
        1: _f("name"),
        2: _f("generateName"),
        3: _f("namespace"),
        4: _f("selfLink"),
        5: _f("uid"),
        6: _f("resourceVersion"),
        7: _f("generation", "int64"),
        8: _f("creationTimestamp", "time"),
        9: _f("deletionTimestamp", "time"),
        10: _f("deletionGracePeriodSeconds", "int64"),
        11: _f("labels", "map"),
        12: _f("annotations", "map"),
        13: _f("ownerReferences", "message", message="OwnerReference", repeated=True),
        14: _f("finalizers", repeated=True),
        17: _f("managedFields", "message", message="ManagedFieldsEntry", repeated=True),
    },
    "OwnerReference": {
        5: _f("apiVersion"),
        1: _f("kind"),
        3: _f("name"),
        4: _f("uid"),
        6: _f("controller", "bool"),
        7: _f("blockOwnerDeletion", "bool"),
    },
    "ManagedFieldsEntry": {
        1: _f("manager"),
        2: _f("operation"),
        3: _f("apiVersion"),
        4: _f("time", "time"),
        6: _f("fieldsType"),
        7: _f("fieldsV1", "message", message="FieldsV1"),
        8: _f("subresource"),
    },
    "FieldsV1": {1: _f("Raw", "json")},
    "Preconditions": {1: _f("uid"), 2: _f("resourceVersion")},
    "DeleteOptions": {
        1: _f("gracePeriodSeconds", "int64"),
        2: _f("preconditions", "message", message="Preconditions"),
        3: _f("orphanDependents", "bool"),
        4: _f("propagationPolicy"),
        5: _f("dryRun", repeated=True),
        6: _f("ignoreStoreReadErrorWithClusterBreakingPotential", "bool"),
    },
    "Namespace": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="NamespaceSpec"),
        3: _f("status", "message", message="NamespaceStatus"),
    },
    "NamespaceSpec": {1: _f("finalizers", repeated=True)},
    "NamespaceStatus": {1: _f("phase"), 2: _f("conditions", "message", message="NamespaceCondition", repeated=True)},
    "NamespaceCondition": {
        1: _f("type"),
        2: _f("status"),
        4: _f("lastTransitionTime", "time"),
        5: _f("reason"),
        6: _f("message"),
    },
    "ConfigMap": {
        1: _f("metadata", "message", message="ObjectMeta"),
        4: _f("immutable", "bool"),
        2: _f("data", "map"),
        3: _f("binaryData", "map", value="bytes"),
    },
    "Secret": {
        1: _f("metadata", "message", message="ObjectMeta"),
        5: _f("immutable", "bool"),
        2: _f("data", "map", value="bytes"),
        4: _f("stringData", "map"),
        3: _f("type"),
    },
    "ServiceAccount": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("secrets", "message", message="ObjectReference", repeated=True),
        3: _f("imagePullSecrets", "message", message="LocalObjectReference", repeated=True),
        4: _f("automountServiceAccountToken", "bool"),
    },
    "ObjectReference": {
        1: _f("kind"),
        2: _f("namespace"),
        3: _f("name"),
        4: _f("uid"),
        5: _f("apiVersion"),
        6: _f("resourceVersion"),
        7: _f("fieldPath"),
    },
    "LocalObjectReference": {1: _f("name")},
    # What `kubectl create service clusterip|nodeport|loadbalancer|externalname` sends.
    "Service": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="ServiceSpec"),
    },
    "ServiceSpec": {
        1: _f("ports", "message", message="ServicePort", repeated=True),
        2: _f("selector", "map"),
        3: _f("clusterIP"),
        18: _f("clusterIPs", repeated=True),
        4: _f("type"),
        5: _f("externalIPs", repeated=True),
        7: _f("sessionAffinity"),
        8: _f("loadBalancerIP"),
        9: _f("loadBalancerSourceRanges", repeated=True),
        10: _f("externalName"),
        11: _f("externalTrafficPolicy"),
        12: _f("healthCheckNodePort", "int32"),
        13: _f("publishNotReadyAddresses", "bool"),
        14: _f("sessionAffinityConfig", "message", message="SessionAffinityConfig"),
        19: _f("ipFamilies", repeated=True),
        17: _f("ipFamilyPolicy"),
        20: _f("allocateLoadBalancerNodePorts", "bool"),
        21: _f("loadBalancerClass"),
        22: _f("internalTrafficPolicy"),
        23: _f("trafficDistribution"),
    },
    "ServicePort": {
        1: _f("name"),
        2: _f("protocol"),
        6: _f("appProtocol"),
        3: _f("port", "int32"),
        4: _f("targetPort", "message", message="IntOrString"),
        5: _f("nodePort", "int32"),
    },
    "SessionAffinityConfig": {1: _f("clientIP", "message", message="ClientIPConfig")},
    "ClientIPConfig": {1: _f("timeoutSeconds", "int32")},
    # util/intstr: read as the int or the string it holds (type 1 is a string).
    "IntOrString": {1: _f("type", "int64"), 2: _f("intVal", "int32"), 3: _f("strVal")},
    # What `kubectl create poddisruptionbudget` and `kubectl create priorityclass` send.
    "PodDisruptionBudget": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="PodDisruptionBudgetSpec"),
    },
    "PodDisruptionBudgetSpec": {
        1: _f("minAvailable", "message", message="IntOrString"),
        2: _f("selector", "message", message="LabelSelector"),
        3: _f("maxUnavailable", "message", message="IntOrString"),
        4: _f("unhealthyPodEvictionPolicy"),
    },
    "PriorityClass": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("value", "int32"),
        3: _f("globalDefault", "bool"),
        4: _f("description"),
        5: _f("preemptionPolicy"),
    },
    "Eviction": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("deleteOptions", "message", message="DeleteOptions"),
    },
    # authorization.k8s.io/v1 and authentication.k8s.io/v1: what `kubectl auth can-i|whoami` sends.
    "SubjectAccessReview": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="SubjectAccessReviewSpec"),
    },
    "SubjectAccessReviewSpec": {
        1: _f("resourceAttributes", "message", message="ResourceAttributes"),
        2: _f("nonResourceAttributes", "message", message="NonResourceAttributes"),
        3: _f("user"),
        4: _f("groups", repeated=True),
        6: _f("uid"),
    },
    "SelfSubjectAccessReview": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="SelfSubjectAccessReviewSpec"),
    },
    "SelfSubjectAccessReviewSpec": {
        1: _f("resourceAttributes", "message", message="ResourceAttributes"),
        2: _f("nonResourceAttributes", "message", message="NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: _f("namespace"),
        2: _f("verb"),
        3: _f("group"),
        4: _f("version"),
        5: _f("resource"),
        6: _f("subresource"),
        7: _f("name"),
    },
    "NonResourceAttributes": {1: _f("path"), 2: _f("verb")},
    "SelfSubjectRulesReview": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="SelfSubjectRulesReviewSpec"),
    },
    "SelfSubjectRulesReviewSpec": {1: _f("namespace")},
    "SelfSubjectReview": {1: _f("metadata", "message", message="ObjectMeta")},
    "TokenReview": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="TokenReviewSpec"),
    },
    "TokenReviewSpec": {1: _f("token"), 2: _f("audiences", repeated=True)},
    # What `kubectl create token` sends to serviceaccounts/<name>/token.
    "TokenRequest": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("spec", "message", message="TokenRequestSpec"),
    },
    "TokenRequestSpec": {
        1: _f("audiences", repeated=True),
        3: _f("boundObjectRef", "message", message="BoundObjectReference"),
        4: _f("expirationSeconds", "int64"),
    },
    "BoundObjectReference": {1: _f("kind"), 2: _f("apiVersion"), 3: _f("name"), 4: _f("uid")},
    # rbac.authorization.k8s.io/v1: what `kubectl create role|clusterrole|rolebinding|clusterrolebinding` sends.
    "Role": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("rules", "message", message="PolicyRule", repeated=True),
    },
    "ClusterRole": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("rules", "message", message="PolicyRule", repeated=True),
        3: _f("aggregationRule", "message", message="AggregationRule"),
    },
    "PolicyRule": {
        1: _f("verbs", repeated=True),
        2: _f("apiGroups", repeated=True),
        3: _f("resources", repeated=True),
        4: _f("resourceNames", repeated=True),
        5: _f("nonResourceURLs", repeated=True),
    },
    "AggregationRule": {1: _f("clusterRoleSelectors", "message", message="LabelSelector", repeated=True)},
    "LabelSelector": {
        1: _f("matchLabels", "map"),
        2: _f("matchExpressions", "message", message="LabelSelectorRequirement", repeated=True),
    },
    "LabelSelectorRequirement": {1: _f("key"), 2: _f("operator"), 3: _f("values", repeated=True)},
    "RoleBinding": {
        1: _f("metadata", "message", message="ObjectMeta"),
        2: _f("subjects", "message", message="Subject", repeated=True),
        3: _f("roleRef", "message", message="RoleRef"),
    },
    "Subject": {1: _f("kind"), 2: _f("apiGroup"), 3: _f("name"), 4: _f("namespace")},
    "RoleRef": {1: _f("apiGroup"), 2: _f("kind"), 3: _f("name")},
}

# The kinds a protobuf body may carry: (apiVersion, kind) → message table.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "Service"): "Service",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("scheduling.k8s.io/v1", "PriorityClass"): "PriorityClass",
    ("meta.k8s.io/v1", "DeleteOptions"): "DeleteOptions",
    ("v1", "DeleteOptions"): "DeleteOptions",
    ("policy/v1", "Eviction"): "Eviction",
    ("authorization.k8s.io/v1", "SubjectAccessReview"): "SubjectAccessReview",
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): "SubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
    ("authentication.k8s.io/v1", "SelfSubjectReview"): "SelfSubjectReview",
    ("authentication.k8s.io/v1", "TokenReview"): "TokenReview",
    ("authentication.k8s.io/v1", "TokenRequest"): "TokenRequest",
    ("rbac.authorization.k8s.io/v1", "Role"): "Role",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "RoleBinding",
}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def _fields(data: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of every field in a message, in order."""
    found: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == _VARINT:
            value, pos = _varint(data, pos)
        elif wire == _LENGTH:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == _FIXED64:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == _FIXED32:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
        if number == 0 or pos > len(data):
            raise ProtobufError("malformed field")
        found.append((number, wire, value))
    return found


def _signed(value: int, bits: int) -> int:
    """Two's complement: negative int32 and int64 values travel as 64-bit varints."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _time(data: bytes) -> str | None:
    parts = decode_message(data, {1: _f("seconds", "int64"), 2: _f("nanos", "int32")})
    seconds = int(parts.get("seconds", 0))
    if not seconds and not parts.get("nanos"):
        return None
    return format_time(datetime.fromtimestamp(seconds, UTC))


def _scalar(kind: str, wire: int, value: int | bytes) -> Any:
    if kind in ("string", "bytes", "json", "rawbytes", "time", "message"):
        if wire != _LENGTH or not isinstance(value, bytes):
            raise ProtobufError(f"expected a length-delimited {kind}")
        if kind == "string":
            return value.decode("utf-8")
        if kind == "bytes":
            return base64.b64encode(value).decode()
        if kind == "json":
            return json.loads(value) if value else None
        if kind == "time":
            return _time(value)
        return value
    if wire != _VARINT or not isinstance(value, int):
        raise ProtobufError(f"expected a varint {kind}")
    if kind == "bool":
        return bool(value)
    return _signed(value, 32 if kind == "int32" else 64)


def _is_zero(value: Any) -> bool:
    return value is None or value == "" or value is False or (value == 0 and not isinstance(value, bool))


def decode_message(data: bytes, table: dict[int, Field]) -> dict[str, Any]:
    """A message's fields as a JSON object, by its table; unknown fields are skipped like any protobuf decoder."""
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        field = table.get(number)
        if field is None:
            continue
        if field.kind == "map":
            if not isinstance(value, bytes):
                raise ProtobufError(f"{field.name}: expected a map entry")
            entry = decode_message(value, {1: _f("key"), 2: _f("value", field.value)})
            out.setdefault(field.name, {})[entry.get("key", "")] = entry.get("value", "")
            continue
        if field.kind == "message":
            if not isinstance(value, bytes):
                raise ProtobufError(f"{field.name}: expected a message")
            decoded: Any = decode_message(value, MESSAGES[field.message])
            if field.message == "FieldsV1":
                # FieldsV1 is its raw JSON in the JSON form of an object (metadata.managedFields[].fieldsV1).
                decoded = decoded.get("Raw") or {}
            elif field.message == "IntOrString":
                decoded = decoded.get("strVal", "") if decoded.get("type") == 1 else decoded.get("intVal", 0)
        else:
            decoded = _scalar(field.kind, wire, value)
        if field.repeated:
            out.setdefault(field.name, []).append(decoded)
        elif not _is_zero(decoded) or field.kind == "message":
            out[field.name] = decoded
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The object a protobuf request body carries; 400 when malformed, 415 when the kind has no table here."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("the protobuf body does not start with the Kubernetes magic number")
    try:
        envelope = decode_message(body[len(MAGIC) :], MESSAGES["Unknown"])
        type_meta = envelope.get("typeMeta") or {}
        api_version, kind = str(type_meta.get("apiVersion", "")), str(type_meta.get("kind", ""))
        table = KINDS.get((api_version, kind))
        if table is None:
            raise errors.unsupported_media_type(CONTENT_TYPE, ["application/json", "application/yaml"])
        raw = envelope.get("raw", b"")
        obj = decode_message(raw if isinstance(raw, bytes) else b"", MESSAGES[table])
    except (ProtobufError, UnicodeDecodeError, ValueError, KeyError) as exc:
        if isinstance(exc, errors.APIError):
            raise
        raise errors.bad_request(f"error decoding protobuf: {exc}") from exc
    return {"apiVersion": api_version, "kind": kind, **obj}


# ------------------------------------------------------------------------------------------------ encoding (tests)


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _length_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LENGTH) + _encode_varint(len(payload)) + payload


def encode_message(obj: dict[str, Any], table: dict[int, Field]) -> bytes:
    """The inverse of decode_message, for tests and tools (fields in table order)."""
    out = bytearray()
    for number, field in table.items():
        if field.name not in obj:
            continue
        value = obj[field.name]
        values = value if field.repeated else [value]
        if field.kind == "map":
            for key, item in value.items():
                entry = encode_message({"key": key, "value": item}, {1: _f("key"), 2: _f("value", field.value)})
                out += _length_field(number, entry)
            continue
        for item in values:
            if field.kind == "message" and field.message == "FieldsV1":
                out += _length_field(number, encode_message({"Raw": item}, MESSAGES["FieldsV1"]))
            elif field.kind == "message" and field.message == "IntOrString":
                parts = {"type": 1, "strVal": item} if isinstance(item, str) else {"type": 0, "intVal": item}
                out += _length_field(number, encode_message(parts, MESSAGES["IntOrString"]))
            elif field.kind == "message":
                out += _length_field(number, encode_message(item, MESSAGES[field.message]))
            elif field.kind == "string":
                out += _length_field(number, str(item).encode())
            elif field.kind == "bytes":
                out += _length_field(number, base64.b64decode(item))
            elif field.kind in ("json", "rawbytes"):
                out += _length_field(number, item if isinstance(item, bytes) else json.dumps(item).encode())
            elif field.kind == "time":
                moment = datetime.fromisoformat(str(item).replace("Z", "+00:00"))
                out += _length_field(number, _key(1, _VARINT) + _encode_varint(int(moment.timestamp())))
            else:
                out += _key(number, _VARINT) + _encode_varint(int(item))
    return bytes(out)


def encode(obj: dict[str, Any]) -> bytes:
    """A protobuf request body for `obj` (one of KINDS), as client-go's protobuf serializer writes it."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    raw = encode_message(obj, MESSAGES[KINDS[(api_version, kind)]])
    envelope = encode_message({"typeMeta": {"apiVersion": api_version, "kind": kind}, "raw": raw}, MESSAGES["Unknown"])
    return MAGIC + envelope
