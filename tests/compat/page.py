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


#: The sentence of a page's header that dates the rows measured before its newest ones (`tests.compat.table`):
#: "Rows measured earlier are kept as they were: `a`, `b` on 2026-12-02; `c` on 2026-12-04."
EARLIER = "Rows measured earlier are kept as they were: "
_DAY = r"\d{4}-\d{2}-\d{2}"


def _dates(page: str) -> tuple[str, dict[str, str]]:
    """The date of the page's rows (its header's "measured DATE"), and the rows measured on another date, each
    with its own.

    Pages before rows were dated one by one said "This run measured `x`; the other rows are kept as the
    page measured DATE, ... had them": the other rows take the oldest date named, no newer than they may be."""
    found = re.search(rf"measured ({_DAY})", page)
    newest = found.group(1) if found else "an earlier run"
    if (old := re.search(rf"This run measured ([^;]*); the other rows are kept as the page measured ((?:{_DAY}"
                         rf"(?:, )?)+) had them", page)) is not None:
        return min(re.findall(_DAY, old.group(2))), dict.fromkeys(re.findall(r"`([^`]+)`", old.group(1)), newest)
    other: dict[str, str] = {}
    if (sentence := re.search(re.escape(EARLIER) + r"(.*?)\.(?:\s|$)", page)) is not None:
        for names, day in re.findall(rf"((?:`[^`]+`(?:, )?)+) on ({_DAY})", sentence.group(1)):
            other |= dict.fromkeys(re.findall(r"`([^`]+)`", names), day)
    return newest, other


def kept_rows(page: str) -> dict[str, KeptRow]:
    """Every row of ``page`` (a docs/compatibility.md written by `tests.compat.table.render`), by name."""
    date, other = _dates(page)
    rows: dict[str, KeptRow] = {}

    def row(name: str) -> KeptRow:  # each row keeps the date it was measured on, not the page's oldest
        return rows.setdefault(name, KeptRow(name, other.get(name, date)))

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
