"""The Kubernetes JSONPath subset used by CRD printer columns (k8s.io/client-go/util/jsonpath, missing keys allowed)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


class JSONPathError(ValueError):
    """An expression that does not parse."""


# A compiled step turns the current values into the next ones; it never raises on data it cannot walk.
Step = Callable[[list[Any]], list[Any]]

_TERMINATORS = frozenset(" \t\r\n.,[]$@{}")
_SLICE_RE = re.compile(r"(-?\d*)(:-?\d*)?(:-?\d*)?")
_NUMBER_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_FILTER_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
_MISSING = object()


def _field(name: str) -> Step:
    def step(values: list[Any]) -> list[Any]:
        out = []
        for value in values:
            if isinstance(value, dict):
                found = value.get(name, _MISSING)
                if found is not _MISSING:
                    out.append(found)
        return out

    return step


def _wildcard(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        if isinstance(value, dict):
            out.extend(value.values())
        elif isinstance(value, list):
            out.extend(value)
    return out


def _containers(value: Any) -> Iterator[Any]:
    # Pre-order like the Go walker: a non-empty map or list, then everything below it.
    if isinstance(value, dict):
        children: list[Any] = list(value.values())
    elif isinstance(value, list):
        children = value
    else:
        return
    if children:
        yield value
        for child in children:
            yield from _containers(child)


def _recursive(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in values:
        out.extend(_containers(value))
    return out


def _slice(start: int | None, end: int | None, step: int | None, single: bool) -> Step:
    def apply(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if not isinstance(value, list):
                continue  # Go reports "not array or slice"; a missing match here
            length = len(value)
            first = 0 if start is None else start
            if first < 0:
                first += length
            last = length if end is None else end
            if single:
                last = first + 1
            elif last < 0:
                last += length
            if last == first:
                continue
            # Out-of-range indexes are errors in Go (no clamping), so they match nothing.
            if first >= length or first < 0 or last > length or last < 0 or first > last:
                continue
            out.extend(value[first : last : step or 1])
        return out

    return apply


def _union(branches: list[list[Step]]) -> Step:
    def apply(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        for branch in branches:
            out.extend(_run(branch, values))
        return out

    return apply


def _compare(left: Any, operator: str, right: Any) -> bool:
    """Go template's eq/ne/lt/le/gt/ge: same basic kind only (ints and floats mix here), else no match."""
    if isinstance(left, bool) or isinstance(right, bool):
        if not (isinstance(left, bool) and isinstance(right, bool)) or operator not in ("==", "!="):
            return False
    elif isinstance(left, int | float) and isinstance(right, int | float):
        pass
    elif not (isinstance(left, str) and isinstance(right, str)):
        return False
    if operator == "==":
        return bool(left == right)
    if operator == "!=":
        return bool(left != right)
    if operator == "<":
        return bool(left < right)
    if operator == "<=":
        return bool(left <= right)
    if operator == ">":
        return bool(left > right)
    return bool(left >= right)


Operand = Callable[[Any], list[Any]]


def _filter(left: Operand, operator: str, right: Operand | None) -> Step:
    def apply(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        for value in values:
            if not isinstance(value, list):
                continue
            for item in value:
                lefts = left(item)
                if right is None:  # [?(@.x)]: the path exists
                    if lefts:
                        out.append(item)
                    continue
                rights = right(item)
                # Go skips items missing either side, and fails on several values; both are no match here.
                if len(lefts) == 1 and len(rights) == 1 and _compare(lefts[0], operator, rights[0]):
                    out.append(item)
        return out

    return apply


def _run(steps: Sequence[Step], values: list[Any]) -> list[Any]:
    for step in steps:
        if not values:
            return values
        values = step(values)
    return values


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str) -> JSONPathError:
        return JSONPathError(f"{message} in {self.text!r}")

    def peek(self, ahead: int = 0) -> str:
        index = self.pos + ahead
        return self.text[index] if index < len(self.text) else ""

    def parse_path(self, stop: str = "") -> list[Step]:
        """Steps until the end of input or a character in `stop`."""
        steps: list[Step] = []
        first = True
        while self.pos < len(self.text) and self.peek() not in stop:
            ch = self.peek()
            if ch in " \t":
                self.pos += 1
            elif ch in "$@" and first:
                self.pos += 1
            elif self.text.startswith("..", self.pos):
                self.pos += 2
                steps.append(_recursive)
                if self.peek() and self.peek() not in _TERMINATORS:
                    steps.append(self.field_name())
            elif ch == ".":
                self.pos += 1
                steps.append(self.field_name())
            elif ch == "[":
                steps.append(self.bracket())
            elif first and ch not in _TERMINATORS:
                steps.append(self.field_name())  # kubectl's relaxed form: "metadata.name"
            else:
                raise self.error(f"unrecognized character {ch!r} at {self.pos}")
            first = False
        return steps

    def field_name(self) -> Step:
        start = self.pos
        while self.pos < len(self.text) and self.peek() not in _TERMINATORS:
            self.pos += 2 if self.peek() == "\\" else 1
        name = self.text[start : min(self.pos, len(self.text))].replace("\\", "")
        if not name:
            raise self.error(f"missing field name at {start}")
        return _wildcard if name == "*" else _field(name)

    def closing(self, start: int, closer: str, unterminated: str) -> int:
        """The index of the first closer at or after start that is outside a quoted string."""
        for index, ch in _unquoted(self.text, start):
            if ch == closer:
                return index
        raise self.error(unterminated)

    def bracket(self) -> Step:
        if self.text.startswith("[?(", self.pos):
            return self.filter()
        end = self.closing(self.pos + 1, "]", "unterminated array")
        inner = self.text[self.pos + 1 : end].strip()
        self.pos = end + 1
        parts = _split_top_level(inner)
        if len(parts) > 1:
            return _union([[self.subscript(part.strip())] for part in parts])
        return self.subscript(inner)

    def subscript(self, inner: str) -> Step:
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            return _field(_unquote(inner, self))
        if inner == "*":
            return _slice(None, None, None, single=False)
        match = _SLICE_RE.fullmatch(inner)
        if not match or not inner:
            raise self.error(f"invalid array index {inner}")
        start, end, step = match.groups()
        if end is None and step is None:
            return _slice(int(start), None, None, single=True)
        if step is not None and step[1:] and int(step[1:]) <= 0:
            raise self.error("step must be > 0")
        return _slice(
            int(start) if start else None,
            int(end[1:]) if end and end[1:] else None,
            int(step[1:]) if step and step[1:] else None,
            single=False,
        )

    def filter(self) -> Step:
        start = self.pos + 3
        end = self.closing(start, ")", "unterminated filter")
        if self.text[end + 1 : end + 2] != "]":
            raise self.error("unclosed array expect ]")
        body = self.text[start:end]
        self.pos = end + 2
        match = re.fullmatch(r"([^!<>=]+)([!<>=]+)(.+?)", body, flags=re.DOTALL)
        if match is None:
            return _filter(self.operand(body), "exists", None)
        operator = match.group(2)
        if operator not in _FILTER_OPERATORS:
            raise self.error(f"unrecognized filter operator {operator}")
        return _filter(self.operand(match.group(1)), operator, self.operand(match.group(3)))

    def operand(self, text: str) -> Operand:
        text = text.strip()
        if not text:
            raise self.error("empty filter operand")
        if text[0] in "'\"":
            if len(text) < 2 or text[-1] != text[0]:
                raise self.error(f"unterminated quote {text}")
            literal: Any = _unquote(text, self)
            return lambda _item: [literal]
        if _NUMBER_RE.fullmatch(text):
            number: int | float = float(text) if any(c in text for c in ".eE") else int(text)
            return lambda _item: [number]
        if text in ("true", "false"):
            flag = text == "true"
            return lambda _item: [flag]
        if text[0] not in "@$":
            raise self.error(f"unrecognized filter operand {text}")
        steps = _Parser(text).parse_path()
        return lambda item: _run(steps, [item])


def _unquoted(text: str, start: int = 0) -> Iterator[tuple[int, str]]:
    """(index, character) of each character from `start` on that is outside quotes; the quotes themselves excluded."""
    i, quote = start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch
        i += 1


def _split_top_level(text: str) -> list[str]:
    """`text` split at the commas outside quotes."""
    cuts = [i for i, ch in _unquoted(text) if ch == ","]
    return [text[start + 1 : end] for start, end in zip([-1, *cuts], [*cuts, len(text)], strict=True)]


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "/": "/", "0": "\0"}


def _unquote(text: str, parser: _Parser) -> str:
    out, i, body = [], 0, text[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            i += 1
            out.append(_ESCAPES.get(body[i], "\\" + body[i]))
        elif ch == text[0]:
            raise parser.error(f"unescaped quote in {text}")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class CompiledPath:
    """A parsed expression; evaluate it against as many objects as needed."""

    expression: str
    steps: tuple[Step, ...]

    def evaluate(self, obj: Any) -> list[Any]:
        return _run(self.steps, [obj])

    def first(self, obj: Any) -> Any | None:
        found = self.evaluate(obj)
        return found[0] if found else None


@functools.lru_cache(maxsize=1024)
def compile_path(expression: str) -> CompiledPath:
    """Parse `{.a.b}` or `.a.b` once; raises JSONPathError when the expression is invalid."""
    text = expression.strip()
    if text.startswith("{"):
        if not text.endswith("}"):
            raise JSONPathError(f"unclosed action in {expression!r}")
        text = text[1:-1].strip()
        if "{" in _outside_quotes(text) or "}" in _outside_quotes(text):
            raise JSONPathError(f"only one {{...}} action is supported in {expression!r}")
    elif "{" in _outside_quotes(text) or "}" in _outside_quotes(text):
        raise JSONPathError(f"text around {{...}} is not supported in {expression!r}")
    if not text:
        raise JSONPathError(f"empty expression {expression!r}")
    if text.split()[0] in ("range", "end"):
        raise JSONPathError(f"range/end are not supported in {expression!r}")
    return CompiledPath(expression, tuple(_Parser(text).parse_path()))


def _outside_quotes(text: str) -> str:
    return "".join(ch for _, ch in _unquoted(text))


def evaluate(expression: str, obj: Any) -> list[Any]:
    """Every value the expression selects in `obj`, in document order; missing keys select nothing."""
    return compile_path(expression).evaluate(obj)


def first(expression: str, obj: Any) -> Any | None:
    """The first value selected, or None."""
    return compile_path(expression).first(obj)
