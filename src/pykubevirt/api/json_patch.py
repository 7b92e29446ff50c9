"""RFC 6902 JSON Patch: applying a patch (with `test`) and computing one between two documents."""

from __future__ import annotations

from typing import Any

from pykubevirt.api.json_copy import copy_json

Patch = list[dict[str, Any]]


class JSONPatchError(ValueError):
    """A patch that is malformed or cannot be applied to the document."""


class JSONPatchTestFailed(JSONPatchError):
    """A `test` operation did not match; Kubernetes answers 422 (409 inside KubeVirt's subresources)."""


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JSONPatchError(f"invalid JSON pointer {pointer!r}: must start with '/'")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise JSONPatchError(f"invalid array index {token!r}")
    i = int(token)
    if i > len(container) or (i == len(container) and not allow_end):
        raise JSONPatchError(f"array index {i} out of range")
    return i


# The containers a sharing patch made itself, by id (the values keep them alive, so no id is reused meanwhile).
_Owned = dict[int, Any]


def _parent(doc: Any, tokens: list[str], path: str, owned: _Owned | None = None) -> Any:
    """The container the last token is in; with `owned`, each container on the way that the document shares with
    its source is replaced by a shallow copy first, so the change reaches only this patch's own objects."""
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise JSONPatchError(f"path {path!r} does not exist")
            step: str | int = token
        elif isinstance(node, list):
            step = _index(node, token, allow_end=False)
        else:
            raise JSONPatchError(f"path {path!r} does not exist")
        child = _own(node[step], owned)
        node[step] = child
        node = child
    return node


def _parent_or_none(doc: Any, tokens: list[str]) -> Any:
    try:
        return _parent(doc, tokens, "")
    except JSONPatchError:
        return None


def _get(doc: Any, path: str) -> Any:
    node = doc
    for token in _tokens(path):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise JSONPatchError(f"path {path!r} does not exist")
    return node


def _add(doc: Any, path: str, value: Any, owned: _Owned | None) -> Any:
    tokens = _tokens(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path, owned)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise JSONPatchError(f"path {path!r} does not exist")
    return doc


def _remove(doc: Any, path: str, owned: _Owned | None) -> tuple[Any, Any]:
    tokens = _tokens(path)
    if not tokens:
        raise JSONPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path, owned)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JSONPatchError(f"path {path!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, allow_end=False))
    raise JSONPatchError(f"path {path!r} does not exist")


# kube-apiserver's bounds on a JSON patch (maxJSONPatchOperations, and its request size for what `copy` adds).
MAX_OPERATIONS = 10000
DEFAULT_COPY_LIMIT = 3 * 1024 * 1024


def _encoded_size(value: Any, limit: int) -> int:
    """About the bytes of `value` as JSON, counting no further than just past `limit`."""
    if isinstance(value, dict):
        total = 2
        for key, child in value.items():
            total += len(key) + 4 + _encoded_size(child, limit - total)
            if total > limit:
                break
        return total
    if isinstance(value, list):
        total = 2
        for child in value:
            total += 1 + _encoded_size(child, limit - total)
            if total > limit:
                break
        return total
    return len(value) + 2 if isinstance(value, str) else 8


def apply_patch(document: Any, patch: Any, *, copy_limit: int = DEFAULT_COPY_LIMIT, share: bool = False) -> Any:
    """Apply `patch` to a copy of `document` and return the result.

    `copy` operations together may add at most `copy_limit` bytes, so a small patch cannot double an object forty
    times (evanphx/json-patch's AccumulatedCopySizeLimit, which kube-apiserver sets). `share`: the result shares
    what the operations do not reach with `document` (copies only along their paths), for a caller that changes
    none of it in place.
    """
    if not isinstance(patch, list):
        raise JSONPatchError("a JSON patch must be a list of operations")
    if len(patch) > MAX_OPERATIONS:
        raise JSONPatchError(f"The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {len(patch)}")
    copied = 0
    owned: _Owned | None = {} if share else None
    doc = document if share else copy_json(document)
    for op in patch:
        # The document itself, or a shared value a `move` to the root made the document.
        doc = _own(doc, owned)
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise JSONPatchError(f"invalid operation {op!r}")
        kind, path = op["op"], op["path"]
        if not isinstance(path, str):
            raise JSONPatchError(f"invalid path {path!r}")
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JSONPatchError(f"operation {kind!r} needs a value")
        if kind == "add":
            doc = _add(doc, path, copy_json(op["value"]), owned)
        elif kind == "remove":
            doc, _ = _remove(doc, path, owned)
        elif kind == "replace":
            tokens = _tokens(path)
            parent = _parent_or_none(doc, tokens) if tokens else None
            # kube-apiserver's json-patch (evanphx v4) replaces a missing member of an existing object like `add`.
            if isinstance(parent, dict) and tokens[-1] not in parent:
                doc = _add(doc, path, copy_json(op["value"]), owned)
                continue
            _get(doc, path)
            if path == "":
                doc = copy_json(op["value"])
            else:
                doc, _ = _remove(doc, path, owned)
                doc = _add(doc, path, copy_json(op["value"]), owned)
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise JSONPatchError(f"operation {kind!r} needs 'from'")
            if kind == "move":
                doc, value = _remove(doc, source, owned)
            else:
                source_value = _get(doc, source)
                copied += _encoded_size(source_value, copy_limit - copied)
                if copied > copy_limit:
                    raise JSONPatchError(
                        "Unable to complete the copy, the accumulated size increase of copy is "
                        f"{copied}, exceeding the limit {copy_limit}"
                    )
                value = copy_json(source_value)
            doc = _add(doc, path, value, owned)
        elif kind == "test":
            try:
                current = _get(doc, path)
            except JSONPatchError as exc:
                # kube-apiserver's json-patch (evanphx) treats a missing member of an existing object as null.
                tokens = _tokens(path)
                if op["value"] is None and tokens and isinstance(_parent_or_none(doc, tokens), dict):
                    continue
                raise JSONPatchTestFailed(f"testing value {path} failed: {exc}") from exc
            if current != op["value"] or (
                type(current) is not type(op["value"])
                and not (isinstance(current, int | float) and isinstance(op["value"], int | float))
            ):
                raise JSONPatchTestFailed(f"testing value {path} failed")
        else:
            raise JSONPatchError(f"unknown operation {kind!r}")
    return _own(doc, owned)


def _own(value: Any, owned: _Owned | None) -> Any:
    """`value` as a container this sharing patch may change: a shallow copy of one it shares with its source."""
    if owned is None or type(value) not in (dict, list) or id(value) in owned:
        return value
    copied = dict(value) if type(value) is dict else list(value)
    owned[id(copied)] = copied
    return copied


def make_patch(old: Any, new: Any, path: str = "") -> Patch:
    """A patch turning `old` into `new`: objects are diffed per key, lists and scalars are replaced whole."""
    if isinstance(old, dict) and isinstance(new, dict):
        ops: Patch = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            child = f"{path}/{escape(key)}"
            if key not in old:
                ops.append({"op": "add", "path": child, "value": copy_json(value)})
            elif old[key] != value or type(old[key]) is not type(value):
                ops.extend(make_patch(old[key], value, child))
        return ops
    if old == new and type(old) is type(new):
        return []
    return [{"op": "replace", "path": path, "value": copy_json(new)}]
