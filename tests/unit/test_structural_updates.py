"""An update's unchanged parts are not walked again: not reported, pruned or defaulted a second time."""

from __future__ import annotations

from typing import Any

from pykubevirt.api.structural import apply_defaults, prune, unknown_fields, validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "size": {"type": "integer", "maximum": 10},
                "color": {"type": "string", "default": "blue"},
                "parts": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"n": {"type": "integer"}}},
                },
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def test_a_value_the_stored_object_already_had_is_not_reported_again() -> None:
    # Stored when the bound was looser; an update that leaves spec alone is not refused for it (ratcheting).
    old = {"spec": {"size": 12, "color": "red"}, "status": {"phase": "A"}}
    new = {"spec": {"size": 12, "color": "red"}, "status": {"phase": "B"}}
    assert validate(new, SCHEMA, old=old) == []
    # The same value, written where it was not before, is.
    changed = {"spec": {"size": 12, "color": "green"}, "status": {"phase": "B"}}
    assert [e.field for e in validate(changed, SCHEMA, old=old)] == ["spec.size"]
    assert [e.field for e in validate(new, SCHEMA)] == ["spec.size"]


def test_equal_in_python_is_not_unchanged_in_json() -> None:
    # 1 == True and 1 == 1.0 in Python; a boolean where the integer was is a change, and a type error.
    old = {"spec": {"size": 1, "parts": [{"n": 1}]}}
    assert old == {"spec": {"size": True, "parts": [{"n": 1}]}}
    errors = validate({"spec": {"size": True, "parts": [{"n": 1}]}}, SCHEMA, old=old)
    assert [e.field for e in errors] == ["spec.size"]
    errors = validate({"spec": {"size": 1, "parts": [{"n": 1.5}]}}, SCHEMA, old=old)
    assert [e.field for e in errors] == ["spec.parts[0].n"]


def test_changed_parts_are_pruned_and_defaulted_and_their_unknown_fields_found() -> None:
    old = {"spec": {"size": 1, "color": "red", "parts": [{"n": 1}]}}
    new = {"spec": {"size": 2, "parts": [{"n": 1}, {"n": 2, "extra": True}], "more": 1}}
    assert unknown_fields(new, SCHEMA, old=old) == ["spec.parts[1].extra", "spec.more"]
    pruned = prune(new, SCHEMA, old=old)
    assert pruned == {"spec": {"size": 2, "parts": [{"n": 1}, {"n": 2}]}}
    apply_defaults(pruned, SCHEMA, old)
    assert pruned["spec"]["color"] == "blue"
