"""A resume launch (``--phase resume``) judges the examples a save launch left, each clause on the world sizes
its fresh-process half takes: SC30 on the saving world's size, SC31 on another, nothing the save already judged."""

from __future__ import annotations

import pytest

from stateful_contract.clauses import clause
from stateful_contract.config import LoaderConfig
from stateful_contract.repro.steps import Position
from stateful_contract.run.resumed import Resumed
from stateful_contract.search.plans import Checkpoint

EXAMPLE = (LoaderConfig(dataset_size=9, batch_size=2), Checkpoint(Position(epoch=0, batches=1)))
SAVED = Resumed({"SC10": [EXAMPLE], "SC30": [EXAMPLE], "SC31": [EXAMPLE]}, saved_on=4, where="/shared")


@pytest.mark.parametrize(("cid", "size", "worlds"), [
    ("SC30", 4, (None,)),  # each rank resumes its own state, in this launch's fresh processes
    ("SC31", 2, (2,)),  # resumed on this launch's other world size
    ("SC31", 3, (3,)),  # any other size, not only those a self-launched check tries (2 and 5)
])
def test_a_clause_is_resumed_on_the_worlds_its_fresh_half_takes(cid: str, size: int,
                                                                 worlds: tuple[int | None, ...]) -> None:
    assert SAVED.worlds(clause(cid), size) == worlds


@pytest.mark.parametrize(("cid", "size", "said"), [
    ("SC30", 2, "SC30 resumes each rank's own state: the save ran on 4 ranks, this launch has 2"),
    ("SC31", 4, "SC31 resumes on another world size: the save ran on 4 ranks, as does this launch"),
    ("SC01", 4, "SC01 has no half that resumes in fresh processes on 4 ranks: the save launch judged it"),
    ("SC10", 2, "SC10 has no half that resumes in fresh processes on 4 ranks"),  # on several ranks SC30 does
    ("SC32", 2, "the save launch left no passing example of SC32 in /shared"),
])
def test_a_clause_the_launch_cannot_judge_says_why(cid: str, size: int, said: str) -> None:
    why = SAVED.worlds(clause(cid), size)
    assert isinstance(why, str) and why.startswith(said), why
