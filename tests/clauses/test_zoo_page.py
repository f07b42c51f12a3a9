"""docs/zoo.md is the table of tests/zoo.py as it stands: a row per loader, a column per clause, each broken
loader killed by the clause it was built to break.

The page is generated (``python benchmarks/zoo_table.py > docs/zoo.md``, which runs every loader against every
clause, minutes of CPU); this reads the page against the generator's own lists (its loaders, columns and
targets, from `zoo.KILLS` and the registry) without running a check, so a loader or a clause added without
regenerating the page fails here, saying what to run.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import zoo

from stateful_contract.clauses import CLAUSES, TIERS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "zoo.md"
REGENERATE = "regenerate it: python benchmarks/zoo_table.py > docs/zoo.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zoo_table", ROOT / "benchmarks" / "zoo_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _table() -> tuple[list[str], dict[str, list[str]]]:
    """The page's clause columns, and each loader's row: its target, then one cell per column."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert header[:2] == ["loader", "built to break"], header
    return header[2:], {row[0]: row[1:] for row in body}


def test_the_zoo_page_has_a_row_per_loader_and_a_column_per_clause() -> None:
    generator = _generator()
    columns, rows = _table()
    assert columns == generator.COLUMNS, f"docs/zoo.md's columns are {columns}, the clauses {generator.COLUMNS}: " \
                                         + REGENERATE
    loaders = [*generator.CORRECT, *generator.BROKEN]
    assert list(rows) == loaders, (f"docs/zoo.md's loaders differ from tests/zoo.py's: missing "
                                   f"{sorted(set(loaders) - set(rows))}, gone {sorted(set(rows) - set(loaders))}: "
                                   + REGENERATE)
    named = {row.split(" (")[0] for row in rows}  # "EpochLoader (hand-written, correct core)"
    assert {cls.__name__ for cls in zoo.KILLS} <= named, sorted({cls.__name__ for cls in zoo.KILLS} - named)


def test_each_broken_loader_is_killed_by_its_clause_and_no_correct_one_by_a_default_clause() -> None:
    generator = _generator()
    columns, rows = _table()
    for name, (target, *cells) in rows.items():
        assert target == generator.TARGETS.get(name, "none"), (name, target, REGENERATE)
        by_clause = dict(zip(columns, cells))
        if target != "none":
            assert by_clause[target].startswith("**killed**"), (name, target, by_clause[target])
    strict = {c.id for c in CLAUSES if not TIERS[c.tier].default}
    for name in generator.CORRECT:
        killed = [c for c, cell in zip(columns, rows[name][1:]) if cell.startswith("**killed**") and c not in strict]
        assert not killed, f"the correct {name} is killed by {killed} in docs/zoo.md"
