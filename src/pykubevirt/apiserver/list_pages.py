"""Listing a collection: label and field selectors, reads at a past revision, and limit/continue pages."""

from __future__ import annotations

import base64
import json
from typing import Any

from pykubevirt.api import errors
from pykubevirt.api.label_selectors import LabelSelector
from pykubevirt.apiserver.resources import Resource
from pykubevirt.apiserver.selectors import FieldSelector, check_fields
from pykubevirt.apiserver.store import Store
from pykubevirt.apiserver.store_records import Compacted

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)


def list_page(
    store: Store,
    resource: Resource,
    namespace: str | None,
    *,
    label_selector: LabelSelector | None,
    field_selector: FieldSelector | None,
    limit: int,
    continue_token: str,
    exact_revision: int | None,
) -> tuple[list[dict[str, Any]], int, str]:
    """Matching objects (sorted by key), the list revision and a continue token when `limit` cut the list."""
    if field_selector is not None:
        allowed = {"metadata.name", "metadata.namespace", *resource.selectable_fields}
        try:
            check_fields(field_selector, allowed)
        except ValueError as exc:
            raise errors.bad_request(str(exc)) from exc
    revision = store.revision
    start_after = ""
    if exact_revision is not None and not continue_token:
        if exact_revision > revision:
            raise errors.too_large_resource_version(exact_revision, revision)
        revision = exact_revision
    if continue_token:
        # Later pages come from the same snapshot as the first one, as etcd ranges at the list's revision.
        revision, start_after = _decode_continue(continue_token, store.revision)
    if revision != store.revision:
        try:
            records = store.records_at(resource.collection, revision, resource.namespace_prefix(namespace))
        except Compacted as exc:
            raise errors.expired(CONTINUE_EXPIRED if continue_token else str(exc)) from exc
    else:
        records = store.records(resource.collection, resource.namespace_prefix(namespace))
    items: list[dict[str, Any]] = []
    next_token = ""
    for record in records:
        if start_after and record.key <= start_after:
            continue
        obj = record.value
        if label_selector is not None and not label_selector.matches((obj.get("metadata") or {}).get("labels")):
            continue
        if field_selector is not None and not field_selector.matches(obj):
            continue
        if limit and len(items) >= limit:
            next_token = _encode_continue(revision, _key_of(resource, items[-1]))
            break
        items.append(obj)
    return items, revision, next_token


def _key_of(resource: Resource, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return resource.key(meta.get("namespace"), str(meta.get("name")))


def _encode_continue(revision: int, key: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": revision, "start": key}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str, current_revision: int) -> tuple[int, str]:
    """The revision and start key of a continue token; 400 with storage's DecodeContinue texts for any other."""

    def invalid(detail: str) -> errors.APIError:
        return errors.bad_request(f"invalid continue token: continue key is not valid{detail}")

    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
    except ValueError as exc:
        raise invalid(f": {exc}") from exc
    if not isinstance(data, dict):
        raise invalid(": json: cannot unmarshal into Go value of type storage.continueToken")
    version = data.get("v")
    if version != "meta.k8s.io/v1":
        raise invalid(f": server does not recognize this encoded version {version}")
    revision, start = data.get("rv"), data.get("start")
    # A token this server did not issue: no revision, one it has not reached, or no start key.
    if type(revision) is not int or not 0 < revision <= current_revision:
        raise invalid(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise invalid(": encoded start key empty (version meta.k8s.io/v1)")
    return revision, start
