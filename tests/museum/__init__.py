"""The bug museum: publicly reported resume bugs of dataloaders, each rebuilt as a small loader.

Every exhibit is a `Piece` in `MUSEUM`: the report (``owner/repo#number`` and its title),
the mechanism in one sentence and the usage that triggers it (all three read from the
loader's docstring), the clause of CONTRACT.md v2 that should kill it, its factory and
any ``check()`` arguments it needs. The loaders are written here from each report's
mechanism; none copies code from the report or its project.

``benchmarks/museum_table.py`` measures every piece (the ci profile, and the torchdata
test pattern of `baseline.py`) and writes ``docs/museum.md``; ``test_museum.py`` keeps
the verdicts current.
"""

from __future__ import annotations

from stateful_contract.clauses import CLAUSES

from . import (
    from_accelerate,
    from_datasets,
    from_energon,
    from_litdata,
    from_others,
    from_streaming,
    from_torchdata,
    from_verl,
    ranked,
)
from ._base import Piece

__all__ = ["BY_ID", "CI_MISSES", "CONTRACT_V2", "MUSEUM", "Piece", "implemented_clauses"]

#: Clause IDs that CONTRACT.md version 2 specifies: the registry's (docs/clauses.md restates each).
CONTRACT_V2 = frozenset(c.id for c in CLAUSES)

#: Every exhibit, grouped by project.
MUSEUM: list[Piece] = [
    *from_accelerate.PIECES,
    *ranked.PIECES,
    *from_torchdata.PIECES,
    *from_datasets.PIECES,
    *from_litdata.PIECES,
    *from_streaming.PIECES,
    *from_energon.PIECES,
    *from_verl.PIECES,
    *from_others.PIECES,
]

BY_ID: dict[str, Piece] = {p.id: p for p in MUSEUM}
assert len(BY_ID) == len(MUSEUM), "piece ids must be unique"

#: Pieces whose should-catch clause exists today but which the ci profile misses, and why
#: (measured; `test_museum.py` holds them as strict expected failures, so a search that
#: starts catching one turns into an error asking to move it).
CI_MISSES: dict[str, str] = {
}

for _id in CI_MISSES:
    assert _id in BY_ID, _id
assert all(p.should_catch in CONTRACT_V2 for p in MUSEUM)


def implemented_clauses() -> frozenset[str]:
    """Clause IDs the installed stateful_contract implements."""
    return CONTRACT_V2
