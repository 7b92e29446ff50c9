"""A deep copy for JSON values (dicts, lists, scalars): several times faster than copy.deepcopy on API objects."""

from __future__ import annotations

import marshal
from typing import Any, TypeVar

T = TypeVar("T")

# Version 2 has no back-references, so a subtree that appears twice in the value is copied twice, as the walk does,
# rather than shared in the copy.
_MARSHAL_VERSION = 2


def copy_json(value: T) -> T:
    """An independent copy of a JSON-shaped value.

    marshal copies plain dicts, lists and scalars in C, about twice as fast as walking them. It refuses subclasses
    (and anything not JSON-like), which the walk then copies with them shared, as before.
    """
    try:
        return marshal.loads(marshal.dumps(value, _MARSHAL_VERSION))  # type: ignore[arg-type, no-any-return]
    except ValueError:
        return _copy(value)  # type: ignore[no-any-return]


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) if type(v) in (dict, list) else v for k, v in value.items()}
    if kind is list:
        return [_copy(v) if type(v) in (dict, list) else v for v in value]
    return value
