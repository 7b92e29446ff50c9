"""kube-apiserver's strategic merge patch of a built-in object, directives included.

Lists merge by their patch merge key, or as sets of scalars (finalizers), where the kind's schema says so, and are
replaced whole otherwise. The directives kubectl sends are honoured: `$patch: replace | delete` on a map or in a list,
`$deleteFromPrimitiveList/<field>`, `$retainKeys` and `$setElementOrder/<field>`. Neither input is changed: the result
is new along the patch's paths and shares the rest with the original.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.apiserver.patch_meta import PatchMeta, PatchSchema

DIRECTIVE = "$patch"
DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList"
RETAIN_KEYS = "$retainKeys"
SET_ELEMENT_ORDER = "$setElementOrder"

# kube's mergepatch errors that its patcher answers with 400 and with 422; any other it answers with a 500 carrying
# the message, which is the client's mistake all the same, so it is a 400 here.
BAD_PRIMITIVE_LIST = "invalid patch format of primitive list"
BAD_RETAIN_KEYS = "invalid patch format of retainKeys"
BAD_SET_ELEMENT_ORDER = "invalid patch format of setElementOrder list"
NO_LIST_OF_LISTS = "lists of lists are not supported"


class StrategicMergeError(Exception):
    """A patch kube's strategic merge refuses; `code` is the HTTP status kube-apiserver answers with."""

    def __init__(self, message: str, code: int = 400) -> None:
        super().__init__(message)
        self.code = code


def strategic_merge(original: dict[str, Any], patch: dict[str, Any], schema: PatchSchema) -> dict[str, Any]:
    """`patch` merged into `original` as kube-apiserver merges it (StrategicMergeMapPatch)."""
    return _merge_map(original, patch, schema)


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], schema: PatchSchema) -> dict[str, Any]:
    if DIRECTIVE in patch:
        directive = patch[DIRECTIVE]
        if directive == "replace":
            return {k: v for k, v in patch.items() if k != DIRECTIVE}
        if directive == "delete":
            return {}
        raise StrategicMergeError(f"unknown patch type: {go_text(directive)} in map: {go_text(patch)}")
    result = dict(original) if original else {}
    patch = dict(patch)
    _retain_keys(result, patch)
    _set_element_orders(result, patch, schema)
    for key, value in patch.items():
        deleting = key.startswith(DELETE_FROM_PRIMITIVE_LIST)
        if deleting:
            key = _field_of(key, DELETE_FROM_PRIMITIVE_LIST, BAD_PRIMITIVE_LIST)
        elif key.startswith("$"):
            continue  # not a field, and no directive a server merge reads
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if key not in result or not _same_type(current, value):
            if not deleting:
                _put(result, key, value)
            continue
        if isinstance(current, dict):
            sub, meta = schema.for_struct(key)
            result[key] = dict(value) if _strategy(meta) == "replace" else _merge_map(current, value, sub)
        elif isinstance(current, list):
            sub, meta = schema.for_slice(key)
            result[key] = _merge_list_field(current, value, sub, meta, deleting)
        else:
            result[key] = value
    return result


def _put(result: dict[str, Any], key: str, value: Any) -> None:
    cleaned, keep = _without_directives(value)
    if keep:
        result[key] = cleaned
    else:
        result.pop(key, None)


def _without_directives(value: Any) -> tuple[Any, bool]:
    """A patch value as it lands where the original has nothing to merge with: nulls in maps and maps carrying a
    `$patch` dropped (kube's discardNullValuesFromPatch and removeDirectives)."""
    if isinstance(value, dict):
        if value.get(DIRECTIVE) is not None:
            return None, False
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            if item is None or key.startswith("$"):
                continue
            item, keep = _without_directives(item)
            if keep:
                cleaned[key] = item
        return cleaned, True
    if isinstance(value, list):
        items = (_without_directives(item) for item in value)
        return [item for item, keep in items if keep], True
    return value, True


def _strategy(meta: PatchMeta) -> str:
    """The strategy besides retainKeys (kube's extractRetainKeysPatchStrategy)."""
    others = [s for s in meta.strategies if s != "retainKeys"]
    if len(meta.strategies) > 2 or len(others) > 1:
        raise StrategicMergeError(f"unexpected patch strategy: [{' '.join(meta.strategies)}]")
    return others[0] if others else ""


def _field_of(key: str, prefix: str, error: str) -> str:
    head, slash, field = key.partition("/")
    if not slash or head != prefix:
        raise StrategicMergeError(error)
    return field


def _retain_keys(result: dict[str, Any], patch: dict[str, Any]) -> None:
    if RETAIN_KEYS not in patch:
        return
    retained = patch.pop(RETAIN_KEYS)
    if not isinstance(retained, list) or not all(_hashable(k) for k in retained):
        raise StrategicMergeError(BAD_RETAIN_KEYS)
    keep = set(retained)
    for key, value in patch.items():
        if value is None or key.startswith((DELETE_FROM_PRIMITIVE_LIST, SET_ELEMENT_ORDER)):
            continue
        if key not in keep:
            raise StrategicMergeError(BAD_RETAIN_KEYS)
    for key in [k for k in result if k not in keep]:
        del result[key]


def _set_element_orders(result: dict[str, Any], patch: dict[str, Any], schema: PatchSchema) -> None:
    """Each `$setElementOrder/<field>`: the field's list merged, then put in the order the directive lists."""
    for directive in [k for k in patch if k.startswith(SET_ELEMENT_ORDER)]:
        order = patch.pop(directive)
        if not isinstance(order, list):
            raise StrategicMergeError(_bad_arg_type([], order))
        field = _field_of(directive, SET_ELEMENT_ORDER, BAD_SET_ELEMENT_ORDER)
        in_original, in_patch = field in result, field in patch
        original_list, patch_list = result.get(field), patch.get(field)
        for value in (original_list if in_original else [], patch_list if in_patch else []):
            if not isinstance(value, list):
                raise StrategicMergeError(_bad_arg_type([], value))
        sub, meta = schema.for_slice(field)
        merge_key = meta.merge_key
        _check_against_order(patch_list or [], order, merge_key)
        # Go's merge edits the original list's array in place, and the order below reads that array again: its
        # deletions and appends show through, and kube's results depend on them.
        server_order = list(original_list or [])
        if in_original and in_patch:
            merged = _merge_list_field(original_list or [], patch_list or [], sub, meta, False, server_order)
        elif in_original:
            merged = list(original_list or [])
        elif in_patch:
            merged = _without_directives(patch_list)[0]
        else:
            continue
        kind = _element_type(original_list or [], patch_list or [])
        listed, server_only = _partition(merged, order, merge_key)
        result[field] = _normalize_order(listed, server_only, order, server_order, merge_key, kind)
        patch.pop(field, None)


def _check_against_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """Every item the patch lists must appear in the order it sets (kube's validatePatchWithSetOrderList)."""
    if not order or not patch_list:
        return
    items = _kept_and_deleted(patch_list)[0] if merge_key else patch_list
    i = j = 0
    while i < len(items) and j < len(order):
        if isinstance(items[i], dict) and DIRECTIVE in items[i]:
            i += 1
            continue
        if _merge_values_equal(items[i], order[j], merge_key):
            i += 1
        j += 1
    if i < len(items) and j >= len(order):
        raise StrategicMergeError(
            f"The order in patch list:\n{go_text(patch_list)}\n doesn't match {SET_ELEMENT_ORDER} list:\n"
            f"{go_text(order)}\n"
        )


def _merge_values_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _same(left, right)
    for item in (left, right):
        if not isinstance(item, dict):
            raise StrategicMergeError(_bad_arg_type({}, item))
        if merge_key not in item:
            raise StrategicMergeError(_no_merge_key(item, merge_key))
    return _same(left[merge_key], right[merge_key])


def _merge_list_field(
    original: list[Any],
    patch: list[Any],
    schema: PatchSchema,
    meta: PatchMeta,
    deleting: bool,
    in_place: list[Any] | None = None,
) -> list[Any]:
    """`in_place`: a copy of `original` that ends as Go's merge leaves the original's array."""
    if _strategy(meta) == "merge" or deleting:
        return _merge_list(original, patch, schema, meta.merge_key, deleting, in_place)
    replaced: list[Any] = _without_directives(patch)[0]  # atomic: the patch's list replaces the original's
    return replaced


def _merge_list(
    original: list[Any],
    patch: list[Any],
    schema: PatchSchema,
    merge_key: str,
    deleting: bool,
    in_place: list[Any] | None = None,
) -> list[Any]:
    if not original and not patch:
        return list(original)
    kind = _element_type(original, patch)
    if kind is not dict:
        if deleting:
            return [item for item in original if not any(_same(item, gone) for gone in patch)]
        merged = _deduplicated(original + patch)
    else:
        if not merge_key:
            raise StrategicMergeError(f"cannot merge lists without merge key for {schema.name}")
        original, patch = _apply_list_directives(original, patch, merge_key, in_place)
        merged = list(original)
        for item in patch:
            if merge_key not in item:
                raise StrategicMergeError(_no_merge_key(item, merge_key))
            position = _position(merged, merge_key, item[merge_key])
            if position is None:
                if in_place is not None and len(merged) < len(in_place):
                    in_place[len(merged)] = item  # an append within the array's capacity
                merged.append(_without_directives(item)[0])
            else:
                merged[position] = _merge_map(merged[position], item, schema)
    listed, server_only = _partition(merged, patch, merge_key)
    return _normalize_order(listed, server_only, patch, original, merge_key, kind)


def _apply_list_directives(
    original: list[Any], patch: list[Any], merge_key: str, in_place: list[Any] | None
) -> tuple[list[Any], list[Any]]:
    """The original without the items the patch deletes, and the patch without its directive items; a
    `{"$patch": "replace"}` item makes the rest of the patch the whole list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[DIRECTIVE]
        if directive == "delete":
            if merge_key not in item:
                raise StrategicMergeError(_no_merge_key(item, merge_key))
            while (position := _position(original, merge_key, item[merge_key])) is not None:
                if in_place is not None:  # Go's deletion shifts the rest of the array left
                    in_place[position : len(original) - 1] = in_place[position + 1 : len(original)]
                original = original[:position] + original[position + 1 :]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise StrategicMergeError("merging lists cannot yet be specified in the patch")
        else:
            raise StrategicMergeError(f"unknown patch type: {go_text(directive)} in map: {go_text(item)}")
    if replace:
        return plain, []
    return original, plain


def _matches(item: Any, merge_key: str, value: Any) -> bool:
    if not isinstance(item, dict):
        raise StrategicMergeError("value for key is not a map")
    return merge_key in item and _same(item[merge_key], value)


def _position(items: list[Any], merge_key: str, value: Any) -> int | None:
    for i, item in enumerate(items):
        if _matches(item, merge_key, value):
            return i
    return None


def _partition(merged: list[Any], by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """The merged items that `by` lists, and the ones only the server has."""
    listed: list[Any] = []
    server_only: list[Any] = []
    for item in merged:
        if merge_key:
            if not isinstance(item, dict):
                raise StrategicMergeError(_bad_arg_type({}, item))
            if merge_key not in item:
                raise StrategicMergeError(_no_merge_key(item, merge_key))
            found = _position(by, merge_key, item[merge_key]) is not None
        else:
            found = any(_same(item, other) for other in by)
        (listed if found else server_only).append(item)
    return listed, server_only


def _normalize_order(
    listed: list[Any], server_only: list[Any], listed_order: list[Any], server_order: list[Any], key: str, kind: type
) -> list[Any]:
    """The patch's items in the patch's order and the server's in the server's, interleaved by where the server had
    them (kube's normalizeElementOrder and mergeSortedSlice)."""
    listed = _sorted_by(listed, listed_order, key, kind)
    server_only = _sorted_by(server_only, server_order, key, kind)
    result: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(listed):
        if j >= len(listed):
            result.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            result.append(listed[j])
            j += 1
        else:
            left = _index(server_order, server_only[i], key, kind)
            right = _index(server_order, listed[j], key, kind)
            if left >= 0 and right >= 0 and left < right:
                result.append(server_only[i])
                i += 1
            else:
                result.append(listed[j])
                j += 1
    return result


def _sorted_by(items: list[Any], order: list[Any], key: str, kind: type) -> list[Any]:
    deleted: list[Any] = []
    if kind is dict:
        for item in [*items, *order]:
            if not isinstance(item, dict):
                raise StrategicMergeError(_bad_arg_type({}, item))
            if key not in item:
                raise StrategicMergeError(_no_merge_key(item, key))
        items, deleted = _kept_and_deleted(items)

    def position(item: Any) -> int:
        found = _index(order, item, key, kind)
        return found if found >= 0 else len(order)

    return sorted(items, key=position) + deleted


def _kept_and_deleted(items: list[Any]) -> tuple[list[Any], list[Any]]:
    kept: list[Any] = []
    deleted: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            raise StrategicMergeError(_bad_arg_type({}, item))
        (deleted if item.get(DIRECTIVE) == "delete" else kept).append(item)
    return kept, deleted


def _index(items: list[Any], wanted: Any, key: str, kind: type) -> int:
    def value(item: Any) -> Any:
        if kind is dict:
            return item.get(key) if isinstance(item, dict) else None
        return item

    target = value(wanted)
    for i, item in enumerate(items):
        if _same(value(item), target):
            return i
    return -1


def _deduplicated(items: list[Any]) -> list[Any]:
    """kube's deduplicateScalars, order included: a later duplicate's place is taken by the last item."""
    items = list(items)
    last = len(items) - 1
    i = 0
    while i < last:
        j = i + 1
        while j <= last:
            if _same(items[i], items[j]):
                items[j] = items[last]
                items = items[:last]
                last -= 1
                j -= 1
            j += 1
        i += 1
    return items


def _element_type(*lists: list[Any]) -> type:
    found: type | None = None
    for items in lists:
        for item in items:
            if found is None:
                found = type(item)
                if found is list:
                    raise StrategicMergeError(NO_LIST_OF_LISTS, 422)
            elif type(item) is not found:
                raise StrategicMergeError(f"list element types are not identical: {go_text(list(lists))}")
    if found is None or found is type(None):
        raise StrategicMergeError("no elements in any of the given slices")
    return found


def _same_type(left: Any, right: Any) -> bool:
    return type(left) is type(right)


def _same(left: Any, right: Any) -> bool:
    """Go's comparison of two decoded JSON values: an int is never equal to a float or a bool."""
    return type(left) is type(right) and left == right


def _hashable(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _no_merge_key(item: dict[str, Any], merge_key: str) -> str:
    return f"map: {go_text(item)} does not contain declared merge key: {merge_key}"


_GO_TYPES = {dict: "map[string]interface {}", list: "[]interface {}", str: "string", int: "int64", float: "float64"}


def _bad_arg_type(expected: Any, actual: Any) -> str:
    def name(value: Any) -> str:
        return "bool" if isinstance(value, bool) else _GO_TYPES.get(type(value), "<nil>")

    return f"expected a {name(expected)}, but received a {name(actual)}"


def go_text(value: Any) -> str:
    """A decoded JSON value as Go's %v prints it, for kube's messages that quote a patch."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_text(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_text(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
