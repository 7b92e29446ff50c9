"""Server-owned metadata: names, uids, timestamps, generation, and which parts of an object a write may change."""

from __future__ import annotations

import os
import random
import threading
from typing import Any

from pykubevirt.api.json_copy import copy_json
from pykubevirt.api.timestamps import now_rfc3339

# Kubernetes' generateName alphabet: no vowels (no words), no confusable characters.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RANDOM_LENGTH = 5
_MAX_GENERATE_PREFIX = 63 - _RANDOM_LENGTH


# Fields of metadata only the server sets; client values are replaced on create and kept from storage on update.
SYSTEM_FIELDS = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)


# Random bytes for new uids, read from the kernel a page at a time rather than with a system call for each object.
_UID_POOL_BYTES = 4096
_uid_pool = b""
_uid_at = 0
_uid_lock = threading.Lock()


def _forget_uid_pool() -> None:
    # A forked child must not hand out the uids its parent will (nor inherit a lock held at the fork).
    global _uid_pool, _uid_at, _uid_lock
    _uid_pool, _uid_at, _uid_lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_uid_pool)


def new_uid() -> str:
    """A random (version 4) UUID, as kube-apiserver gives every new object."""
    global _uid_pool, _uid_at
    with _uid_lock:
        if _uid_at + 16 > len(_uid_pool):
            _uid_pool, _uid_at = os.urandom(_UID_POOL_BYTES), 0
        raw = bytearray(_uid_pool[_uid_at : _uid_at + 16])
        _uid_at += 16
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def generate_name(prefix: str) -> str:
    return prefix[:_MAX_GENERATE_PREFIX] + "".join(random.choices(_NAME_ALPHABET, k=_RANDOM_LENGTH))


def stamp_new(obj: dict[str, Any], *, track_generation: bool) -> None:
    """Set what the server owns on a new object (in place)."""
    metadata = obj.setdefault("metadata", {})
    for field in SYSTEM_FIELDS:
        metadata.pop(field, None)
    metadata["uid"] = new_uid()
    metadata["creationTimestamp"] = now_rfc3339()
    if track_generation:
        metadata["generation"] = 1
    metadata.pop("resourceVersion", None)


def spec_part(obj: dict[str, Any], *, status_is_separate: bool) -> dict[str, Any]:
    """Everything whose change bumps `generation`: all but metadata (and status when it has its own subresource)."""
    skip = {"metadata", "status"} if status_is_separate else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def carry_over_system_fields(new: dict[str, Any], old: dict[str, Any]) -> None:
    """Keep server-owned metadata from the stored object in an update (in place)."""
    metadata = new.setdefault("metadata", {})
    old_metadata = old.get("metadata") or {}
    for field in SYSTEM_FIELDS:
        if field in old_metadata:
            metadata[field] = copy_json(old_metadata[field])
        else:
            metadata.pop(field, None)
    metadata["name"] = old_metadata.get("name")
    if "namespace" in old_metadata:
        metadata["namespace"] = old_metadata["namespace"]


def bump_generation(new: dict[str, Any], old: dict[str, Any], *, status_is_separate: bool) -> None:
    if "generation" not in (old.get("metadata") or {}):
        return
    if spec_part(new, status_is_separate=status_is_separate) != spec_part(old, status_is_separate=status_is_separate):
        new["metadata"]["generation"] = int(old["metadata"]["generation"]) + 1


def only_status_changes(new: dict[str, Any], old: dict[str, Any], *, share: bool = False) -> dict[str, Any]:
    """The stored object with only `status` taken from `new` (what a write to /status may change).

    `new` is this write's own decoded object, so its status is moved rather than copied; `old` is not changed.
    `share`: everything but the status and metadata is `old`'s own, not a copy, for a write that changes the object
    in place only where it differs from `old` (its metadata is a new dict, its values shared too).
    """
    if share:
        result = {k: None if k == "status" else v for k, v in old.items()}
        if isinstance(old.get("metadata"), dict):
            result["metadata"] = dict(old["metadata"])
    else:
        # The stored status is not copied: a placeholder keeps its place among the keys.
        result = {k: None if k == "status" else copy_json(v) for k, v in old.items()}
    if "status" in new:
        result["status"] = new["status"]
    else:
        result.pop("status", None)
    return result


def without_status_changes(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """`new` with the stored `status` (what a write to the main resource may change when status is separate).

    `new` is this write's own decoded object and is changed in place; `old` is not changed.
    """
    if "status" in old:
        new["status"] = copy_json(old["status"])
    else:
        new.pop("status", None)
    return new
