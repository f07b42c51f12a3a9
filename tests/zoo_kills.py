"""The zoo's kills, each searched once per session and read by every test that asserts on it.

`test_clauses` (the clause kills its loader), `test_impact` (the failure's impact),
`test_engine` (the printed reproduction fails when run), `test_epochs` and
`test_report_and_recording` (what the message says) judge the same loader on the same
clause, space and profile: the ci profile is derandomized, so each of them ran the same
search to the same verdict (about a second of CPU each, shrinking included). They read
one run now (`shared.once`), on the worker their `xdist_group` puts them on.
"""

from __future__ import annotations

import pytest
import zoo
from shared import once

from stateful_contract import ConfigSpace, check
from stateful_contract.report.results import Report

__all__ = ["IN_PROCESS", "STRICT", "group", "killed", "space_for"]

IN_PROCESS = ConfigSpace(num_workers=(0,))
#: The clauses that change the worker count search 0, 1 and 2 workers (the zoo's hand-written
#: loaders run no worker processes, so it stays cheap); every other clause in-process.
WORKER_COUNTS = ConfigSpace(num_workers=(0, 1, 2))
#: The strict tier runs only when asked for.
STRICT = ("SC40", "SC41", "SC42")


def space_for(clause_id: str) -> ConfigSpace:
    """The space a zoo loader is searched in for ``clause_id``."""
    return WORKER_COUNTS if clause_id in ("SC23", "SC41") else IN_PROCESS


def killed(tmp_path_factory: pytest.TempPathFactory, loader: type) -> Report:
    """``check(loader)`` on the clause that kills it (`zoo.KILLS`), the ci profile, run once a session."""
    clause_id = zoo.KILLS[loader]
    return once(tmp_path_factory, f"zoo-kill-{loader.__name__}",
                lambda: check(loader, clauses=[clause_id], space=space_for(clause_id), strict=clause_id in STRICT))


def group(loader: type) -> pytest.MarkDecorator:
    """The xdist group of the tests that read ``killed(..., loader)``: one worker runs the search and them."""
    return pytest.mark.xdist_group(f"zoo-kill-{loader.__name__}")
