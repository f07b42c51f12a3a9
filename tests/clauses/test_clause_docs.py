"""docs/clauses.md restates the registry: a section per clause, its tier table, its version.

The registry (`stateful_contract.clauses.registry`) is where a clause is defined; the
page is what a user reads. Each check here fails with what to write where, so a new
clause cannot be merged without its section.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stateful_contract.clauses import CONTRACT_VERSION
from stateful_contract.clauses.registry import all_clauses

PAGE = Path(__file__).resolve().parents[2] / "docs" / "clauses.md"
TEXT = PAGE.read_text(encoding="utf-8")
CLAUSES = all_clauses()
#: ``### SC10 resume-continues-the-stream``: a clause's section heading.
SECTION = re.compile(r"^### (SC\d+) (\S+)\s*$", re.MULTILINE)
#: The tier table's rows: ``| core | SC10–SC18 | always |``.
TIER_ROW = re.compile(r"^\| *([a-z]+) *\| *(SC[^|]*?) *\|", re.MULTILINE)


def _ids(cell: str) -> set[str]:
    """``SC01–SC03`` (or ``SC01-SC03``), ``SC30, SC31``: every ID the cell names."""
    ids: set[str] = set()
    for part in re.split(r"\s*,\s*", cell.strip()):
        bounds = re.fullmatch(r"SC(\d+)\s*[–-]\s*SC(\d+)", part)
        if bounds:
            low, high = (int(b) for b in bounds.groups())
            ids.update(f"SC{n:02d}" for n in range(low, high + 1))
        elif re.fullmatch(r"SC\d+", part):
            ids.add(part)
        else:
            raise AssertionError(f"{PAGE.name}: tier table cell {cell!r}: write IDs as 'SC40', 'SC30, SC31' or 'SC10–SC18'")
    return ids


def test_the_registry_is_read_at_all() -> None:
    assert len(CLAUSES) >= 20 and {c.id for c in CLAUSES} >= {"SC01", "SC10", "SC40"}


@pytest.mark.parametrize("clause", CLAUSES, ids=lambda c: c.id)
def test_every_registered_clause_has_its_section(clause) -> None:  # type: ignore[no-untyped-def]
    sections = dict(SECTION.findall(TEXT))
    assert clause.id in sections, (
        f"{clause.id} ({clause.name}, tier {clause.tier}) is registered but docs/clauses.md has no section "
        f"for it: add '### {clause.id} {clause.name}' under its tier, with its statement, why it is there, "
        "how the suite checks it and what StatefulDataLoader does (docs/contributing.md)")
    assert sections[clause.id] == clause.name, (
        f"docs/clauses.md names {clause.id} {sections[clause.id]!r}, the registry {clause.name!r}: "
        "clause names are public, so the page follows the registry")


def test_every_section_is_a_registered_clause() -> None:
    registered = {c.id for c in CLAUSES}
    stale = [f"{cid} {name}" for cid, name in SECTION.findall(TEXT) if cid not in registered]
    assert not stale, f"docs/clauses.md has sections for clauses the registry does not have: {stale}"
    headings = [cid for cid, _ in SECTION.findall(TEXT)]
    assert len(headings) == len(set(headings)), f"docs/clauses.md has a clause section twice: {sorted(headings)}"


def test_the_tier_table_matches_the_registry() -> None:
    table = {tier: _ids(cell) for tier, cell in TIER_ROW.findall(TEXT)}
    assert table, "docs/clauses.md has no tier table ('| tier | clauses | in the verdict |')"
    registry: dict[str, set[str]] = {}
    for c in CLAUSES:
        registry.setdefault(c.tier, set()).add(c.id)
    assert table == registry, (
        "docs/clauses.md's tier table says which clauses each tier holds, and it differs from the registry:\n"
        + "\n".join(f"  {tier}: table {sorted(table.get(tier, ()))}, registry {sorted(registry.get(tier, ()))}"
                    for tier in sorted(table.keys() | registry.keys()) if table.get(tier) != registry.get(tier)))


def test_the_page_states_the_contract_version_of_the_registry() -> None:
    stated = re.search(r"The StatefulLoader contract, version (\S+?)\.(?:\s|$)", TEXT)
    assert stated, "docs/clauses.md should open with 'The StatefulLoader contract, version N.'"
    assert stated.group(1) == CONTRACT_VERSION, (
        f"docs/clauses.md states contract version {stated.group(1)}, "
        f"stateful_contract/clauses/registry.py's CONTRACT_VERSION is {CONTRACT_VERSION}")


def test_the_table_reader_fails_on_what_it_cannot_read() -> None:
    assert _ids("SC01–SC03") == {"SC01", "SC02", "SC03"}
    assert _ids("SC30, SC31") == {"SC30", "SC31"}
    with pytest.raises(AssertionError, match="write IDs as"):
        _ids("SC40 and up")
