"""Whether part of an update is what the stored object held: the walks of a write skip such parts.

A stored object passed the walks (decoding, pruning, defaulting, validation) when it was written, so a part of an
update equal to it has nothing in it to drop, default or report; only the caller can say the stored object did pass
them (under the same schema, in this process). Errors in what an update did not change are then not reported, as
kube-apiserver's CRD validation ratcheting does.
"""

from __future__ import annotations

from typing import Any

from pykubevirt.api import json_codec

# What a value of an update has no stored counterpart for (None is a JSON value).
ABSENT: Any = object()


def same_json(value: Any, stored: Any) -> bool:
    """Whether `value` is the JSON `stored` is, to the type: `1 == True` in Python, so equal values are encoded too.

    A write that shares a part with the stored object (a status write, a status patch) passes that part itself.
    """
    if value is stored:
        return True
    return stored == value and json_codec.dumps(stored) == json_codec.dumps(value)
