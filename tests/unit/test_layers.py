"""The layer contracts of docs/architecture.md, read from every module's imports (those inside functions too).

A broken contract fails with the importing file and line and the module it imports.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO

SRC = REPO / "src"
ROOT_PACKAGE = "pykubevirt"

# Top to bottom: a package may import its own layer and the layers below it, never one above.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"cli", "virtctl", "images"}),
    frozenset({"virtapi", "controller", "node", "handler", "apiserver", "storage", "webconsole"}),
    frozenset({"launcher", "client", "admission", "pki"}),
    frozenset({"instancetype", "config", "metrics"}),
    frozenset({"api", "log"}),
)

# Edges the layers alone would allow (same layer, or downwards) but the design does not.
FORBIDDEN: dict[str, frozenset[str]] = {
    "api": frozenset({"log"}),
    "admission": frozenset({"client", "apiserver"}),
    "controller": frozenset({"apiserver"}),
    "handler": frozenset({"apiserver"}),
    "node": frozenset({"apiserver"}),
    "storage": frozenset({"apiserver", "controller", "node", "handler", "virtapi"}),
    "launcher": frozenset({"controller", "client", "apiserver", "handler"}),
    "virtctl": frozenset({"apiserver", "controller"}),
    "webconsole": frozenset({"apiserver", "controller", "node", "handler", "virtapi", "storage"}),
    "apiserver": frozenset({"controller", "virtapi"}),
}

# Modules (and everything under them) that must not reach I/O, not even through what they import.
PURE = ("api", "admission", "instancetype", "config", "launcher.converter")
IO_MODULES = frozenset({"aiohttp", "sqlite3", "libvirt", "socket", "subprocess", "asyncio"})


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    path: Path
    line: int
    imported: str

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}: {self.importer} imports {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in (SRC / ROOT_PACKAGE).rglob("*.py")}


def imports_of(name: str, path: Path, known: Iterable[str]) -> Iterator[Import]:
    """Every import statement in the module, wherever it stands, resolved to the module it loads."""
    modules = set(known)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield Import(name, path, node.lineno, submodule if submodule in modules else base)


def top_package(module: str) -> str | None:
    """`controller` for `pykubevirt.controller.vm_controller`; None outside pykubevirt."""
    parts = module.split(".")
    if parts[0] != ROOT_PACKAGE or len(parts) < 2:
        return None
    return parts[1]


def layer_of(package: str) -> int:
    for index, layer in enumerate(LAYERS):
        if package in layer:
            return index
    raise AssertionError(f"package {package!r} is in no layer; add it to LAYERS (and docs/architecture.md)")


def internal_imports() -> list[tuple[str, str, Import]]:
    """(importing package, imported package, import) for every import between two pykubevirt packages."""
    modules = all_modules()
    found = []
    for name, path in sorted(modules.items()):
        source = top_package(name)
        for imp in imports_of(name, path, modules):
            target = top_package(imp.imported)
            if source is not None and target is not None and target != source:
                found.append((source, target, imp))
    return found


def is_pure(module: str) -> bool:
    return any(module == f"{ROOT_PACKAGE}.{p}" or module.startswith(f"{ROOT_PACKAGE}.{p}.") for p in PURE)


def test_every_package_has_a_layer() -> None:
    packages = {top_package(name) for name in all_modules()} - {None}
    for package in sorted(p for p in packages if p is not None):
        layer_of(package)


def test_no_package_imports_a_layer_above_it() -> None:
    broken = [
        f"{imp.where()} ({source} may not import {target}, a layer above it)"
        for source, target, imp in internal_imports()
        if layer_of(target) < layer_of(source)
    ]
    assert not broken, "\n".join(broken)


def test_no_forbidden_edge() -> None:
    broken = [
        f"{imp.where()} ({source} → {target} is forbidden)"
        for source, target, imp in internal_imports()
        if target in FORBIDDEN.get(source, frozenset())
    ]
    assert not broken, "\n".join(broken)


def io_chain(start: str, imports: dict[str, list[Import]]) -> list[Import] | None:
    """The shortest chain of imports from `start` to an I/O library, or None when there is none."""
    chains: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        current = queue.pop(0)
        for imp in imports.get(current, []):
            if imp.imported.split(".")[0] in IO_MODULES:
                return [*chains[current], imp]
            if imp.imported in imports and imp.imported not in chains:
                chains[imp.imported] = [*chains[current], imp]
                queue.append(imp.imported)
    return None


def test_pure_modules_reach_no_io() -> None:
    """api, admission, instancetype, config and the converter import no I/O library, directly or through others."""
    modules = all_modules()
    imports = {name: list(imports_of(name, path, modules)) for name, path in modules.items()}
    broken = []
    for name in sorted(m for m in modules if is_pure(m)):
        for imp in imports[name]:
            if imp.imported.split(".")[0] in IO_MODULES:
                broken.append(f"{imp.where()} (pure modules do no I/O)")
            elif imp.imported in modules and not is_pure(imp.imported):
                chain = io_chain(imp.imported, imports)
                if chain is not None:
                    via = " → ".join(step.where() for step in chain)
                    broken.append(f"{imp.where()}, which reaches {chain[-1].imported}: {via}")
    assert not broken, "\n".join(broken)


def test_no_import_cycle_between_packages() -> None:
    edges: dict[str, dict[str, Import]] = {}
    for source, target, imp in internal_imports():
        edges.setdefault(source, {}).setdefault(target, imp)
    cycles = []
    for start in sorted(edges):
        # A path from one of start's targets back to start closes a cycle through start.
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for target in sorted(edges.get(node, {})):
                if target == start and min(path) == start:
                    hops = [*path, start]
                    steps = "\n".join(f"  {edges[a][b].where()}" for a, b in itertools.pairwise(hops))
                    cycles.append(" → ".join(hops) + "\n" + steps)
                elif target not in seen and target not in path:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    assert not cycles, "\n".join(cycles)
