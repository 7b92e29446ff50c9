"""Reading Kubernetes manifests from files, directories and stdin, with one readable error per bad document."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a manifest file: its source, index (0-based) and parsed content or parse error."""

    source: str
    index: int
    content: Any = None
    error: str = ""

    @property
    def where(self) -> str:
        return f"{self.source} (document {self.index})"


def manifest_files(path: str) -> list[Path]:
    """The files named by `path`: the file itself or every manifest under a directory, sorted."""
    p = Path(path)
    if p.is_dir():
        return sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
    return [p]


def _parse(text: str, source: str) -> Iterator[Document]:
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            yield Document(source, 0, error=f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
            return
        items = data.get("items") if isinstance(data, dict) and data.get("kind", "").endswith("List") else None
        for i, item in enumerate(items if isinstance(items, list) else [data]):
            yield Document(source, i, item)
        return
    index = 0
    try:
        for content in yaml.safe_load_all(text):
            if content is not None:
                yield Document(source, index, content)
            index += 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        yield Document(source, index, error=f"invalid YAML{where}: {problem}")


def read_documents(paths: list[str]) -> Iterator[Document]:
    """Every document in `paths` ('-' is stdin), in order; unreadable files give a Document with an error."""
    for path in paths:
        if path == "-":
            yield from _parse(sys.stdin.read(), "<stdin>")
            continue
        files = manifest_files(path)
        if not files or not files[0].exists():
            yield Document(path, 0, error="no such file or directory")
            continue
        for file in files:
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                yield Document(str(file), 0, error=f"cannot read: {exc}")
                continue
            yield from _parse(text, str(file))
