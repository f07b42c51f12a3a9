"""Which worlds a clause's fresh-process half resumes on, and the order that keeps an idle world short-lived."""

from __future__ import annotations

import pytest

from stateful_contract.clauses import CLAUSES, Clause, clause, default_selection, run_order
from stateful_contract.clauses.registry import LOAD
from stateful_contract.run.fresh import beside_their_worlds, fresh_worlds, worlds_still_needed


def _ids(order: list[Clause]) -> list[str]:
    return [c.id for c in order]


@pytest.mark.parametrize("world_size", [2, 4])
def test_sc32_is_judged_right_after_sc31_whose_world_of_one_more_rank_it_reuses(world_size: int) -> None:
    selected = [c.id for c in default_selection(world_size=world_size)]
    order = _ids(beside_their_worlds(run_order(selected), world_size))
    assert order[order.index("SC31") + 1] == "SC32", order
    assert worlds_still_needed([clause("SC32")], world_size) <= worlds_still_needed([clause("SC31")], world_size)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_the_order_keeps_every_clause_after_what_it_needs_and_moves_nothing_on_one_rank(world_size: int) -> None:
    every = run_order([c.id for c in CLAUSES])
    order = beside_their_worlds(every, world_size)
    assert sorted(_ids(order)) == sorted(_ids(every))
    for at, c in enumerate(order):
        assert all(need == LOAD or need in _ids(order[:at]) for need in c.needs), (c.id, _ids(order))
    if world_size == 1:  # no fresh half resumes on another size: the priority order stands
        assert order == every
    else:  # SC41 needs SC18, judged later: it is not moved before it
        assert _ids(order).index("SC41") > _ids(order).index("SC18")


def test_sc10_resumes_in_a_fresh_process_on_one_rank_only() -> None:
    assert fresh_worlds(clause("SC10"), 1) == (None,)
    assert fresh_worlds(clause("SC10"), 2) == ()  # SC30 resumes there
    assert fresh_worlds(clause("SC01"), 2) == ()  # no fresh half at all
    assert fresh_worlds(clause("SC31"), 2) == (1, 3)
