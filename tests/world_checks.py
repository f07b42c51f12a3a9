"""Multi-rank checks that tests in several files assert on, each run once per session.

Every `check_world` starts a world of rank processes (and one per new world size for
SC31): about 8 s on 2 cores before the first example. Where two tests judge the same
loader on the same clauses and configurations, they read one run (`shared.once`).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from shared import once

from stateful_contract import ConfigSpace, LoaderConfig
from stateful_contract.faces.distributed import check_world
from stateful_contract.report.results import ClauseResult, Report
from stateful_contract.repro import Position

__all__ = ["IN_PROCESS", "STATEFUL_DATALOADER_SEARCH", "on_two_ranks", "searched"]

#: In-process configurations only: a world change starts fresh ranks per world size, and workers on
#: every rank of every world would multiply that by their start-up.
IN_PROCESS = ConfigSpace(num_workers=(0,), dataset_size=(1, 16))

#: The xdist group of the tests that read `searched` of StatefulDataLoader on SC30 and SC31
#: (tests/search/test_padding.py, tests/clauses/test_world_change.py): one worker runs the search and them.
STATEFUL_DATALOADER_SEARCH = "searched-stateful_dataloader-SC30-SC31"


def searched(tmp_path_factory: pytest.TempPathFactory, target: str, clauses: tuple[str, ...]) -> Report:
    """``target`` on 2 ranks, ``clauses`` judged over the dev search of `IN_PROCESS` configurations."""
    return once(tmp_path_factory, re.sub(r"\W", "_", f"searched-{target}-{'-'.join(clauses)}"),
                lambda: check_world(target, world_size=2, profile="dev", clauses=list(clauses), space=IN_PROCESS))


def on_two_ranks(target: str, clause: str, config: LoaderConfig, *, batches: int = 1,
                 **options: Any) -> tuple[Report, ClauseResult]:
    """``clause`` on 2 ranks of ``target``, on one example: ``config`` checkpointed after ``batches`` batches of
    epoch 0 (as a recorded failure is replayed). The report, and the clause's result in it."""
    report = check_world(target, world_size=2, clauses=[clause], replay=(config, Position(epoch=0, batches=batches)),
                         **options)
    return report, report[clause]
