"""A resume launch's replay (``--phase resume``, docs/distributed.md): the examples an earlier launch saved, of
which `check`'s clause loop judges the fresh-process half alone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..clauses import Clause
from ..config import LoaderConfig
from .fresh import fresh_worlds

__all__ = ["Resumed"]


@dataclass(frozen=True)
class Resumed:
    """A replay of the examples an earlier launch searched, saved and judged (``--phase save``), by clause:
    here only their fresh-process half runs, on this launch's ranks, reading the states that launch left."""

    examples: dict[str, list[tuple[LoaderConfig, Any]]]
    #: The ranks that saved them: a clause that resumes each rank's own state needs as many here, one
    #: that resumes on another world size needs another number.
    saved_on: int
    #: Where they were saved (named in the reasons a clause is not judged).
    where: str

    def worlds(self, c: Clause, size: int) -> tuple[int | None, ...] | str:
        """The worlds ``c`` resumes on in a launch of ``size`` ranks (None: as saved), or why it is not judged."""
        saved, cid = self.saved_on, c.id
        fresh = fresh_worlds(c, saved)
        if not fresh:  # as the save launch's own clause loop had it (SC10 on several ranks: SC30 resumes)
            return f"{cid} has no half that resumes in fresh processes on {saved} ranks: the save launch judged it"
        if not self.examples.get(cid):
            return f"the save launch left no passing example of {cid} in {self.where}"
        if None in fresh:  # as saved: each rank resumes its own state (SC30)
            return (None,) if size == saved else (
                f"{cid} resumes each rank's own state: the save ran on {saved} ranks, this launch has {size}; "
                f"resume on {saved} ranks to judge it (on another number, SC31 is judged)")
        return (size,) if size != saved else (
            f"{cid} resumes on another world size: the save ran on {saved} ranks, as does this launch; resume "
            f"on another number of ranks to judge it (on {saved}, SC30 is judged)")
