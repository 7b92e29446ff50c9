"""NodeSelectorRequirements (`{key, operator, values}` with In, NotIn, Exists, DoesNotExist, Gt, Lt) as label
requirements: what node affinity, and a VM pool's node selection policy, match node labels with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykubevirt.api.label_selectors import DOES_NOT_EXIST, EXISTS, GREATER_THAN, IN, LESS_THAN, NOT_IN, Requirement

_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST, "Gt": GREATER_THAN}
_OPERATORS["Lt"] = LESS_THAN


def node_requirement(expression: Mapping[str, Any]) -> Requirement | None:
    """One requirement; None when invalid (kube: an invalid term matches nothing)."""
    operator = _OPERATORS.get(str(expression.get("operator") or ""))
    key = str(expression.get("key") or "")
    values = [str(v) for v in expression.get("values") or []]
    if operator is None or not key:
        return None
    if operator in (IN, NOT_IN) and not values:
        return None
    if operator in (EXISTS, DOES_NOT_EXIST) and values:
        return None
    if operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            return None
        try:
            int(values[0])
        except ValueError:
            return None
    return Requirement(key, operator, frozenset(values))


def node_requirements_match(expressions: Sequence[Mapping[str, Any]], values: Mapping[str, str]) -> bool | None:
    """True/False for the ANDed requirements over `values`; None when one of them is invalid."""
    for expression in expressions:
        requirement = node_requirement(expression)
        if requirement is None:
            return None
        if not requirement.matches(values):
            return False
    return True
