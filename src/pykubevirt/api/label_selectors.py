"""Label selectors, parsed and matched as apimachinery's labels package does (kube-apiserver, the scheduler)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pykubevirt.api.name_validation import label_value_errors, qualified_name_errors


class SelectorError(ValueError):
    """A label or field selector that does not parse, or uses a field the resource cannot select on."""


def _go_quote(value: str) -> str:
    """Go's %q for the strings selectors carry (printable ASCII is the common case)."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _invalid(path: str, value: str, detail: str) -> str:
    # field.Invalid(path, value, detail).Error(); a nil path prints as "<nil>" in kube-apiserver's messages.
    return f"{path}: Invalid value: {_go_quote(value)}: {detail}"


def _aggregate(messages: list[str]) -> str:
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "in", "notin", "=", "==", "!="
EXISTS, DOES_NOT_EXIST, GREATER_THAN, LESS_THAN = "exists", "!", "gt", "lt"
_BINARY_OPERATORS = ", ".join((IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN))
_INT_RE = re.compile(r"[+-]?[0-9]+")


def _requirement_errors(key: str, operator: str, values: Iterable[str], path: str = "") -> list[str]:
    """NewRequirement's validation; `path` prefixes field paths as the metav1.LabelSelector conversion does."""
    values = list(values)
    errors: list[str] = []
    key_errors = qualified_name_errors(key)
    if key_errors:
        errors.append(_invalid(f"{path}key", key, "; ".join(key_errors)))
    values_path = f"{path}values"
    # field.Invalid prints a []string bad value with Go's %#v.
    bad = f"{values_path}: Invalid value: []string{{{', '.join(_go_quote(v) for v in values)}}}"
    if operator in (IN, NOT_IN):
        if not values:
            errors.append(f"{bad}: for 'in', 'notin' operators, values set can't be empty")
    elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS):
        if len(values) != 1:
            errors.append(f"{bad}: exact-match compatibility requires one single value")
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if values:
            errors.append(f"{bad}: values set must be empty for exists and does not exist")
    elif operator in (GREATER_THAN, LESS_THAN):
        if len(values) != 1:
            errors.append(f"{bad}: for 'Gt', 'Lt' operators, exactly one value is required")
        for i, value in enumerate(values):
            if not _INT_RE.fullmatch(value):
                errors.append(
                    _invalid(f"{values_path}[{i}]", value, "for 'Gt', 'Lt' operators, the value must be an integer")
                )
    for i, value in enumerate(values):
        value_errors = label_value_errors(value)
        if value_errors:
            errors.append(_invalid(f"{values_path}[{i}][{key}]", value, "; ".join(value_errors)))
    return errors


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `key op values` term; values are kept sorted and de-duplicated."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op in (EQUALS, DOUBLE_EQUALS, IN):
            return self.key in labels and labels[self.key] in self.values
        if op in (NOT_EQUALS, NOT_IN):
            return self.key not in labels or labels[self.key] not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        value = labels.get(self.key)
        if value is None or not _INT_RE.fullmatch(value) or len(self.values) != 1:
            return False
        limit = int(next(iter(self.values)))
        return int(value) > limit if op == GREATER_THAN else int(value) < limit

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(sorted(self.values))
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({joined})"
        symbol = {GREATER_THAN: ">", LESS_THAN: "<"}.get(self.operator, self.operator)
        return f"{self.key}{symbol}{joined}"


def _make_requirement(key: str, operator: str, values: Iterable[str], path: str = "") -> Requirement:
    values = list(values)
    errors = _requirement_errors(key, operator, values, path)
    if errors:
        raise SelectorError(_aggregate(errors))
    return Requirement(key, operator, frozenset(values))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A conjunction of requirements; `nothing` is the selector that matches no object (a nil metav1.LabelSelector)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    @property
    def empty(self) -> bool:
        """True when the selector selects everything."""
        return not self.requirements and not self.nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.nothing:
            return False
        if not isinstance(labels, dict):
            labels = {}  # none, or not a map (stored before labels were validated): no labels to match
        for requirement in self.requirements:
            if not requirement.matches(labels):
                return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


NOTHING = LabelSelector(nothing=True)

# Lexer tokens (labels/selector.go).
_ID, _EOS, _COMMA, _NOT, _EQ, _DEQ, _NEQ, _GT, _LT, _IN, _NOTIN, _OPEN, _CLOSE, _ERROR = range(14)
_SYMBOLS = {
    ")": _CLOSE,
    ",": _COMMA,
    "!": _NOT,
    "==": _DEQ,
    "=": _EQ,
    ">": _GT,
    "in": _IN,
    "<": _LT,
    "!=": _NEQ,
    "notin": _NOTIN,
    "(": _OPEN,
}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[int, str]]:
    tokens: list[tuple[int, str]] = []
    pos, end = 0, len(text)
    if "\x00" in text:  # the Go lexer reads NUL as the end of input
        end = text.index("\x00")
    while True:
        while pos < end and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= end:
            tokens.append((_EOS, ""))
            return tokens
        if text[pos] in _SPECIAL:
            buffer, last, last_len = "", None, 0
            while pos + len(buffer) < end and text[pos + len(buffer)] in _SPECIAL:
                buffer += text[pos + len(buffer)]
                token = _SYMBOLS.get(buffer)
                if token is not None:
                    last, last_len = token, len(buffer)
                elif last is not None:
                    break
            if last is None:
                tokens.append((_ERROR, f"error expected: keyword found '{buffer}'"))
                pos += len(buffer)
            else:
                tokens.append((last, buffer[:last_len]))
                pos += last_len
            continue
        start = pos
        while pos < end and text[pos] not in _SPECIAL and text[pos] not in _WHITESPACE:
            pos += 1
        word = text[start:pos]
        tokens.append((_SYMBOLS.get(word, _ID), word))


class _LabelParser:
    def __init__(self, text: str) -> None:
        self.tokens = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[int, str]:
        token, literal = self.tokens[self.pos]
        # In a values context the keywords "in"/"notin" are plain identifiers.
        if values and token in (_IN, _NOTIN):
            token = _ID
        return token, literal

    def consume(self, values: bool = True) -> tuple[int, str]:
        token = self.lookahead(values)
        if self.pos < len(self.tokens) - 1:
            self.pos += 1
        return token

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self.lookahead()
            if token in (_ID, _NOT):
                try:
                    requirements.append(self.requirement())
                except SelectorError as err:
                    raise SelectorError(f"unable to parse requirement: {err}") from None
                token, literal = self.consume()
                if token == _EOS:
                    return requirements
                if token != _COMMA:
                    raise SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
                token, literal = self.lookahead()
                if token not in (_ID, _NOT):
                    raise SelectorError(f"found '{literal}', expected: identifier after ','")
            elif token == _EOS:
                return requirements
            else:
                raise SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> Requirement:
        operator = ""
        token, literal = self.consume()
        if token == _NOT:
            operator = DOES_NOT_EXIST
            token, literal = self.consume()
        if token != _ID:
            raise SelectorError(f"found '{literal}', expected: identifier")
        key = literal
        key_errors = qualified_name_errors(key)
        if key_errors:
            raise SelectorError(_invalid("<nil>", key, "; ".join(key_errors)))
        if self.lookahead()[0] in (_EOS, _COMMA) and operator != DOES_NOT_EXIST:
            operator = EXISTS
        if operator in (EXISTS, DOES_NOT_EXIST):
            return _make_requirement(key, operator, ())
        token, literal = self.consume(values=False)
        operator = {
            _IN: IN,
            _NOTIN: NOT_IN,
            _EQ: EQUALS,
            _DEQ: DOUBLE_EQUALS,
            _NEQ: NOT_EQUALS,
            _GT: GREATER_THAN,
            _LT: LESS_THAN,
        }.get(token, "")
        if not operator:
            raise SelectorError(f"found '{literal}', expected: {_BINARY_OPERATORS}")
        values = self.set_values() if operator in (IN, NOT_IN) else self.exact_value()
        return _make_requirement(key, operator, values)

    def set_values(self) -> set[str]:
        token, literal = self.consume()
        if token != _OPEN:
            raise SelectorError(f"found '{literal}' expected: '('")
        token, literal = self.lookahead()
        if token == _CLOSE:  # "()" is the set holding the empty value
            self.consume()
            return {""}
        if token not in (_ID, _COMMA):
            raise SelectorError(f"found '{literal}', expected: ',', ')' or identifier")
        values = self.identifiers()
        if self.consume()[0] != _CLOSE:
            raise SelectorError(f"found '{literal}', expected: ')'")
        return values

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            token, literal = self.consume()
            if token == _ID:
                values.add(literal)
                next_token, next_literal = self.lookahead()
                if next_token == _COMMA:
                    continue
                if next_token == _CLOSE:
                    return values
                raise SelectorError(f"found '{next_literal}', expected: ',' or ')'")
            if token == _COMMA:  # "(," ",," and ",)" each stand for the empty value
                if not values:
                    values.add("")
                next_token, _ = self.lookahead()
                if next_token == _CLOSE:
                    values.add("")
                    return values
                if next_token == _COMMA:
                    self.consume()
                    values.add("")
                continue
            raise SelectorError(f"found '{literal}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        token, _ = self.lookahead()
        if token in (_EOS, _COMMA):
            return {""}
        token, literal = self.consume()
        if token == _ID:
            return {literal}
        raise SelectorError(f"found '{literal}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a labelSelector query parameter; the empty string selects everything."""
    requirements = _LabelParser(text).parse()
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))


_EXPRESSION_OPERATORS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels + matchExpressions); None selects nothing, {} selects everything."""
    if selector is None:
        return NOTHING
    match_labels: Mapping[str, Any] = selector.get("matchLabels") or {}
    expressions: list[Mapping[str, Any]] = selector.get("matchExpressions") or []
    requirements: list[Requirement] = []
    for key, value in match_labels.items():
        requirements.append(_make_requirement(str(key), EQUALS, [str(value)]))
    for expression in expressions:
        raw_operator = expression.get("operator", "")
        operator = _EXPRESSION_OPERATORS.get(raw_operator)
        if operator is None:
            raise SelectorError(f'"{raw_operator}" is not a valid label selector operator')
        values = [str(v) for v in expression.get("values") or ()]
        requirements.append(_make_requirement(str(expression.get("key", "")), operator, values))
    requirements.sort(key=lambda r: r.key)
    return LabelSelector(tuple(requirements))


def stored_selector(selector: object) -> LabelSelector:
    """A selector as a stored object carries it: not a map (None included) or invalid selects nothing, since
    validation refuses an invalid one and an object stored before that must not select everything."""
    if not isinstance(selector, Mapping):
        return NOTHING
    try:
        return label_selector_from_dict(selector)
    except SelectorError:
        return NOTHING
