"""The rows of the page as last written: what ``python -m tests.compat ROW ... --keep-others`` keeps.

A run of some rows rewrites docs/compatibility.md with the others as they were measured: from
their saved reports (``reports/compat/``, this machine's earlier runs) or, where there is none,
from the page itself, each row's lines copied as the last full run wrote them. The page then
says which rows were measured when (`KeptRow` keeps the date of the run that wrote them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["KeptRow", "kept_rows"]


@dataclass
class KeptRow:
    """One row's lines in each section of a page written earlier."""

    name: str
    measured: str
    summary: str = ""
    clauses: str = ""
    reasons: list[str] = field(default_factory=list)
    note: str = ""
    not_run: str = ""

    @property
    def seconds(self) -> float:
        cells = [c.strip() for c in self.summary.strip().strip("|").split("|")]
        return float(cells[-1]) if cells and re.fullmatch(r"\d+(\.\d+)?", cells[-1]) else 0.0


def _date(page: str) -> str:
    """The oldest measurement date the page states (a page that kept rows names their older date too):
    a kept row is labelled no newer than it may be."""
    dates = sorted(re.findall(r"measured (\d{4}-\d{2}-\d{2})", page))
    return dates[0] if dates else "an earlier run"


def kept_rows(page: str) -> dict[str, KeptRow]:
    """Every row of ``page`` (a docs/compatibility.md written by `tests.compat.table.render`), by name."""
    date = _date(page)
    rows: dict[str, KeptRow] = {}

    def row(name: str) -> KeptRow:
        return rows.setdefault(name, KeptRow(name, date))

    section = ""
    current: KeptRow | None = None
    for line in page.splitlines():
        if line.startswith("## "):
            section, current = line[3:].strip(), None
            continue
        if section == "Rows" and (m := re.match(r"\| !\[([^\]]+)\]", line)):
            row(m.group(1)).summary = line
        elif section == "Every clause" and (m := re.match(r"\| `([^`]+)` \|", line)):
            row(m.group(1)).clauses = line
        elif section == "Why each row fails":
            if m := re.match(r"### `([^`]+)`", line):
                current = row(m.group(1))
            if current is not None:
                current.reasons.append(line)
        elif section == "Notes on rows without declared failures" and (m := re.match(r"- `([^`]+)`: ", line)):
            row(m.group(1)).note = line
        elif section == "Rows that could not run here" and (m := re.match(r"- `([^`]+)` \(", line)):
            row(m.group(1)).not_run = line
    for kept in rows.values():  # a block ends at the next row's heading: drop the blank lines it carried
        while kept.reasons and not kept.reasons[-1].strip():
            kept.reasons.pop()
    return rows
