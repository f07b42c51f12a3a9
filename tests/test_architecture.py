"""The layout keeps the flow visible: configuration -> engine -> clauses -> report -> faces.

Read from the source (``ast``), not by importing: an import cycle, an engine that reaches
up into the clauses or the faces, or a core that imports the reference wrappers shows
up here as a failing test rather than as a surprise in a later refactoring.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "stateful_contract"
#: Modules at most this long: each should read in one sitting.
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports() -> dict[str, set[str]]:
    """Module -> the package modules it imports, at any depth (TYPE_CHECKING blocks left out)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip.update(id(n) for n in ast.walk(node))
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith("stateful_contract"):
                    found.add(t)
        graph[name] = found
    return graph


GRAPH = _imports()


def _cycle_through(start: str) -> list[str] | None:
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in GRAPH.get(node, ()):
            # A package's __init__ importing its own submodules is how packages work, not a cycle.
            if nxt == start and not start.startswith(node + ".") and not node.startswith(start + "."):
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _parents_skipped(a: str, b: str) -> bool:
    return a.startswith(b + ".") or b.startswith(a + ".")


def test_no_module_imports_itself_back() -> None:
    cycles = []
    for module in GRAPH:
        cycle = _cycle_through(module)
        if cycle and not any(_parents_skipped(x, y) for x, y in itertools.pairwise(cycle)):
            cycles.append(" -> ".join(cycle))
    assert not cycles, "import cycles:\n" + "\n".join(sorted(cycles))


def _reaches(module: str) -> set[str]:
    out: set[str] = set()
    todo = [module]
    while todo:
        for nxt in GRAPH.get(todo.pop(), ()):
            if nxt not in out:
                out.add(nxt)
                todo.append(nxt)
    return out


LAYERS = {
    # The engine runs loaders; it knows nothing of clauses, reports or faces.
    "stateful_contract._engine": ("stateful_contract.clauses", "stateful_contract._checking",
                                  "stateful_contract.report", "stateful_contract.cli", "stateful_contract.testing",
                                  "stateful_contract.pytest_plugin"),
    # Clauses judge; they know nothing of how a run is put together or shown.
    "stateful_contract.clauses": ("stateful_contract._checking", "stateful_contract.report",
                                  "stateful_contract.cli", "stateful_contract.testing",
                                  "stateful_contract.pytest_plugin", "stateful_contract._render"),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_a_layer_does_not_reach_up(layer: str) -> None:
    modules = [m for m in GRAPH if m == layer or m.startswith(layer + ".")]
    bad = {m: sorted(t for t in _reaches(m) if t.startswith(LAYERS[layer])) for m in modules}
    assert not {m: t for m, t in bad.items() if t}


def test_the_core_never_imports_the_reference_wrappers_or_the_scenarios() -> None:
    outside = ("stateful_contract.reference", "stateful_contract.scenarios", "stateful_contract.compat")
    core = [m for m in GRAPH if not m.startswith(outside)]
    bad = {m: sorted(t for t in _reaches(m) if t.startswith(outside)) for m in core}
    assert not {m: t for m, t in bad.items() if t}


def test_modules_read_in_one_sitting() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_graph_is_read_at_all() -> None:
    """The checks above are not vacuous: the reader sees the engine's real imports."""
    assert "stateful_contract._engine.steps" in GRAPH["stateful_contract._engine.example"]
    assert "stateful_contract.clauses.registry" in GRAPH["stateful_contract.clauses.resume"]
