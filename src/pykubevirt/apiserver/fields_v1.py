"""managedFields' `fieldsV1` kept as its JSON text, as kube-apiserver keeps `FieldsV1.Raw`.

A field set mirrors the object it describes: a launcher pod's entries decode to 341 dicts and lists, three quarters
of the pod's containers. Stored as bytes they are one object each, which the garbage collector never walks, a deep
copy copies in one step and JSON encoding writes out as they are (`json_codec` takes bytes in an object as encoded
JSON). The field manager decodes a text when it needs the set, once for all the writes that carry the same text, and
keeps each set it encodes, so the object's next write finds it without decoding.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import json_codec
from pykubevirt.apiserver.field_sets import FieldSet

MANAGED_FIELDS = "/metadata/managedFields"


# Stored text → its decoded set, least recently used first. Sets are never changed in place (field_sets), so one
# decoded set can serve every write that reads the same text: objects made from one template share their creator's
# entry, and most writes carry entries unchanged since the last one. Kept small: every set held here is objects the
# garbage collector walks again, which keeping the text as bytes avoids.
_DECODED: dict[bytes, FieldSet] = {}
_DECODED_LIMIT = 512


def encoded(fields: FieldSet, *, remember: bool = False) -> bytes:
    """The text of a field set; `remember` keeps the set for the write that reads this text back next."""
    text = json_codec.dumps(fields)
    if remember:
        _keep(text, fields)
    return text


def decoded(value: Any) -> Any:
    """The field set of a `fieldsV1` value, whichever form it is in (sent ones are decoded JSON)."""
    if type(value) is not bytes:
        return value
    fields = _DECODED.get(value)
    if fields is None:
        fields = json_codec.loads(value)
    _keep(value, fields)
    return fields


def _keep(text: bytes, fields: FieldSet) -> None:
    """Make `text` the most recently used entry."""
    _DECODED.pop(text, None)
    if len(_DECODED) >= _DECODED_LIMIT:
        del _DECODED[next(iter(_DECODED))]
    _DECODED[text] = fields


def same_text(fields: dict[str, Any], text: bytes) -> bool:
    """Whether a sent set encodes to the stored text (a client sending back what it read)."""
    try:
        return json_codec.dumps(fields) == text
    except (TypeError, ValueError):
        return False


def compact_entries(obj: dict[str, Any]) -> None:
    """Turn the object's decoded `fieldsV1` values into their text (in place): objects read back from the database."""
    entries = (obj.get("metadata") or {}).get("managedFields")
    if not isinstance(entries, list):
        return
    for entry in entries:
        if isinstance(entry, dict) and isinstance(entry.get("fieldsV1"), dict):
            entry["fieldsV1"] = encoded(entry["fieldsV1"])


def patch_target(obj: dict[str, Any], ops: Any) -> dict[str, Any]:
    """The object a JSON patch applies to: a shallow copy with its field sets decoded when an op reaches them, else
    `obj` itself. (Merge patches replace managedFields whole, so they never need them decoded.)"""
    pointers = (
        [op.get(k) for op in ops if isinstance(op, dict) for k in ("path", "from")] if isinstance(ops, list) else []
    )
    # The list itself, inside it, or a document holding it (a `test` of /metadata compares the field sets too).
    if not any(
        isinstance(p, str) and (p in ("", "/metadata", MANAGED_FIELDS) or p.startswith(MANAGED_FIELDS + "/"))
        for p in pointers
    ):
        return obj
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("managedFields"), list):
        return obj
    entries = [
        {**e, "fieldsV1": decoded(e["fieldsV1"])} if isinstance(e, dict) and "fieldsV1" in e else e
        for e in meta["managedFields"]
    ]
    return {**obj, "metadata": {**meta, "managedFields": entries}}
