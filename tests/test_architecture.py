"""The layout keeps the flow visible: configuration -> repro -> search -> isolation -> clauses -> report -> run -> faces.

Read from the source (``ast``), not by importing: an import cycle (function-level and
``TYPE_CHECKING`` imports included), an engine that reaches up into the clauses or the
faces, a core that imports the reference wrappers, or a package that imports anything
under tests/ shows up here as a failing test rather than as a surprise in a later refactoring.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from charged import run as run_charged

PACKAGE = Path(__file__).resolve().parents[1] / "stateful_contract"
#: Modules at most this long: each should read in one sitting.
MAX_LINES = 400


def _module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(package: Path = PACKAGE) -> dict[str, dict[str, str]]:
    """Module -> {package module it imports: where (``path:line``, and how if not at module level)}.

    Every import counts, at any depth: at module level, inside a function (run later, but
    the two modules still need each other) and under ``if TYPE_CHECKING:`` (never run, but
    neither module can be read, type-checked or moved without the other).
    """
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        how: dict[int, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                how.update((id(n), "in a function") for n in ast.walk(node) if id(n) not in how)
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                how.update((id(n), "under TYPE_CHECKING") for n in ast.walk(node))
        found: dict[str, str] = {}
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and t.startswith(package.name) and t not in found:
                    where = f"{path.relative_to(package.parent)}:{node.lineno}"
                    found[t] = f"{where} ({how[id(node)]})" if id(node) in how else where
        graph[name] = found
    return graph


IMPORTS = _imports()
GRAPH = {module: set(targets) for module, targets in IMPORTS.items()}


def _cycles(imports: dict[str, dict[str, str]]) -> list[list[str]]:
    """The import cycles: each strongly connected set of modules, sorted (Tarjan's algorithm).

    A package's ``__init__`` importing its own submodules is how packages work, not a cycle;
    a submodule importing its package back is one (its ``__init__`` is half-run then).
    """
    edges = {m: sorted(t for t in ts if not t.startswith(m + ".")) for m, ts in imports.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for nxt in edges.get(module, ()):
            if nxt not in index:
                visit(nxt)
                low[module] = min(low[module], low[nxt])
            elif nxt in on_stack:
                low[module] = min(low[module], index[nxt])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(found)


def _describe(cycle: list[str], imports: dict[str, dict[str, str]]) -> str:
    members = set(cycle)
    return "\n".join(f"  {m} imports {t} at {where}" for m in cycle
                     for t, where in sorted(imports[m].items()) if t in members and not t.startswith(m + "."))


def test_no_import_cycles() -> None:
    cycles = _cycles(IMPORTS)
    assert not cycles, (
        "import cycles (function-level and TYPE_CHECKING imports count): break each by moving what "
        "both modules need into the lower one, or into a module both import:\n"
        + "\n\n".join(_describe(c, IMPORTS) for c in cycles)
    )


@pytest.mark.parametrize("how", ["module", "function", "type-only"])
def test_a_cycle_is_found_however_the_import_back_is_written(tmp_path: Path, how: str) -> None:
    """The cycle test is not blind to imports that run late or never."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import a, b\n", encoding="utf-8")
    (package / "a.py").write_text("from .b import B\n", encoding="utf-8")
    back = {
        "module": "from .a import A\n",
        "function": "def f():\n    from .a import A\n    return A\n",
        "type-only": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n",
    }[how]
    (package / "b.py").write_text(back, encoding="utf-8")
    imports = _imports(package)
    assert _cycles(imports) == [["pkg.a", "pkg.b"]]
    assert "pkg/b.py:" in _describe(["pkg.a", "pkg.b"], imports)
    # The package importing its own submodules is no cycle.
    (package / "b.py").write_text("B = 1\n", encoding="utf-8")
    assert _cycles(_imports(package)) == []


def _reaches(module: str) -> set[str]:
    out: set[str] = set()
    todo = [module]
    while todo:
        for nxt in GRAPH.get(todo.pop(), ()):
            if nxt not in out:
                out.add(nxt)
                todo.append(nxt)
    return out


#: The folders in the order a check flows through them (docs/architecture.md): each imports only the
#: folders before it and the configuration at the package's top. The scenario language (repro) comes
#: first because plans, examples and every executor speak it; the faces come last because nothing
#: below may know how a check was asked for or is shown.
FOLDERS = ("repro", "search", "isolation", "clauses", "report", "run", "faces")
#: What a user writes and the facts every layer shares (flag spellings, doc links), at the package's top:
#: they import no folder.
CONFIGURATION = ("config", "samplers", "profiles", "protocol", "trainer_view", "spellings", "links", "terms", "lazy",
                 "_version")
#: Public paths that only re-export (the package, its `python -m`, `.testing`, `.distributed`): they may
#: import anything, and nothing inside the package imports them.
FACADES = ("", "__main__", "testing", "distributed", "distributed.__main__")


def _place(module: str) -> tuple[str, int]:
    """Which part of the package a module is in, and its rank in the flow (-1: configuration)."""
    rest = module.removeprefix("stateful_contract").removeprefix(".")
    if rest in FACADES:
        return "facade", len(FOLDERS)
    head = rest.split(".")[0]
    if head in CONFIGURATION:
        return "configuration", -1
    if head == "reference":
        return "reference", -1
    assert head in FOLDERS, f"{module} is in no folder of the flow: add it to FOLDERS or CONFIGURATION"
    return head, FOLDERS.index(head)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_each_module_imports_only_what_comes_before_it_in_the_flow(module: str) -> None:
    where, rank = _place(module)
    if where == "facade":
        return
    up = {t: IMPORTS[module][t] for t in GRAPH[module] if (p := _place(t))[1] > rank
          or p[0] == "facade" or (where == "configuration" and p[0] != "configuration")}
    assert not up, (f"{module} ({where}) imports what comes after it in the flow {FOLDERS} "
                    f"(or a public facade): {up}")


def test_the_flow_check_is_not_blind() -> None:
    """Every folder holds modules, and a planted import upward would be found."""
    seen = {_place(m)[0] for m in GRAPH}
    assert set(FOLDERS) <= seen, sorted(set(FOLDERS) - seen)
    assert _place("stateful_contract.faces.cli")[1] > _place("stateful_contract.repro.steps")[1]
    assert _place("stateful_contract.config")[1] < _place("stateful_contract.repro.steps")[1]


def test_the_core_never_imports_the_reference_wrappers() -> None:
    outside = ("stateful_contract.reference",)
    core = [m for m in GRAPH if not m.startswith(outside)]
    bad = {m: sorted(t for t in _reaches(m) if t.startswith(outside)) for m in core}
    assert not {m: t for m, t in bad.items() if t}


TESTS = Path(__file__).resolve().parent
#: The project's evidence that does not ship (docs/architecture.md, "What ships"): run from the
#: repository's root as ``tests.<name>``, on the package alone.
EVIDENCE = ("compat", "scenarios", "stateful_dataloader_matrix", "mindspeed_production")
#: The names conftest.py makes importable (tests/ is on ``sys.path``): zoo, museum, compat, ...
HELPERS = {p.stem for p in TESTS.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}


def _absolute_imports(files: list[Path]) -> dict[str, set[str]]:
    """``path:line`` -> the top-level names it imports (relative imports stay inside their package)."""
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                found.setdefault(f"{path.relative_to(TESTS.parent)}:{node.lineno}", set()).add(name)
    return found


def test_the_package_never_imports_the_tests() -> None:
    """What ships is the package alone: nothing under tests/, by its ``tests.`` name or the name
    conftest.py gives it (``zoo``, ``compat``, ...), is needed to import or run it."""
    bad = {where: found for where, names in _absolute_imports(sorted(PACKAGE.rglob("*.py"))).items()
           if (found := sorted(n for n in names if n.split(".")[0] in HELPERS | {"tests"}))}
    assert not bad, f"the package imports modules under tests/, which do not ship: {bad}"


def test_the_evidence_under_tests_needs_only_the_package() -> None:
    """The compatibility matrix, the seed scenario and the StatefulDataLoader matrix run on an
    installed package from a fresh clone's root: none imports the test suite's own helpers."""
    files = [f for name in EVIDENCE for f in ([TESTS / f"{name}.py"] if (TESTS / f"{name}.py").is_file()
                                              else sorted((TESTS / name).rglob("*.py")))]
    assert len(files) > len(EVIDENCE), files
    allowed = tuple(f"tests.{name}" for name in EVIDENCE)
    bad = {where: found for where, names in _absolute_imports(files).items()
           if (found := sorted(n for n in names if (n.split(".")[0] == "tests" and not n.startswith(allowed))
                               or n.split(".")[0] in HELPERS))}
    assert not bad, f"the evidence imports the test suite's helpers (move what it needs into it): {bad}"


def test_modules_read_in_one_sitting() -> None:
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_graph_is_read_at_all() -> None:
    """The checks above are not vacuous: the reader sees the engine's real imports."""
    assert "stateful_contract.repro.steps" in GRAPH["stateful_contract.search.example"]
    assert "stateful_contract.clauses.registry" in GRAPH["stateful_contract.clauses.resume"]


def test_the_package_and_the_target_reader_import_without_torch() -> None:
    """`import stateful_contract` is lazy (0.03 s, docs/performance.md): the protocol and the
    target reader (what a face needs before it knows there is a check to run) must not pull torch in."""
    code = ("import sys, stateful_contract, stateful_contract.isolation.target\n"
            "from stateful_contract import StatefulLoader, TargetError\n"
            "print(sorted(m for m in ('torch', 'torchdata', 'hypothesis') if m in sys.modules))")
    out = run_charged([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


#: An issue or finding number at a docstring's opening ("Issue 13: ...", "... (issue 30, item 5).") tells
#: the tracker's history, not what the module does; the history may follow in a later sentence.
TRACKER_NUMBER = re.compile(r"\b(?:[Ii]ssues?|items?)\s+\d|^F\d+\b")


def _opening(docstring: str) -> str:
    """A docstring's first sentence: up to the first full stop that ends a sentence, or the blank line."""
    paragraph = docstring.strip().split("\n\n")[0]
    return re.split(r"(?<=\.)\s", paragraph, maxsplit=1)[0]


def test_each_module_opens_with_what_it_does() -> None:
    files = [*PACKAGE.rglob("*.py"), *TESTS.rglob("*.py"), *(TESTS.parent / "benchmarks").glob("*.py")]
    openings = {str(p.relative_to(TESTS.parent)): _opening(doc) for p in files
                if (doc := ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))))}
    assert len(openings) > 100, "the module docstrings were not read"
    bad = {path: opening for path, opening in openings.items() if TRACKER_NUMBER.search(opening)}
    assert not bad, f"module docstrings that open with the tracker's history, not what the module does: {bad}"
    assert TRACKER_NUMBER.search(_opening("Supervision (issue 9): nothing takes the check down."))
