"""Ranks whose epochs differ in length (uneven shards): every rank runs the one drawn plan on its own stream.

A plan is drawn from the shortest rank's epoch lengths; `on_rank` turns it into the same
collective step on a longer rank. Before it did, a correct loader over 3 samples on 2
ranks (rank 0: 2 batches per epoch, rank 1: 1) failed SC11 ("after -1 more batches") and
SC15 (a StopIteration expected mid-epoch on rank 0).
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ranked_loaders import target

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.faces.distributed import check_world
from stateful_contract.repro import Position
from stateful_contract.search.plans import Checkpoint, Hops, RankLengths, StateCalls, on_rank

# --- the translation, in one process ----------------------------------------------------------

SHORT, LONG = [1, 1, 1, 1], [2, 2, 2, 2]


def test_a_step_past_the_short_rank_s_stop_iteration_is_mid_epoch_on_a_longer_rank() -> None:
    end = Position(epoch=0, batches=1, after_stop=True)
    assert on_rank(Checkpoint(end), RankLengths(SHORT, LONG)) == Checkpoint(Position(epoch=0, batches=1))
    assert on_rank(Checkpoint(end), RankLengths(SHORT, SHORT)) == Checkpoint(end)


def test_hop_stops_become_the_same_epoch_and_batch_on_a_longer_rank() -> None:
    # Drawn: checkpoint at the end of epoch 0 (stream index 1), then stops at 1 (no batch) and at 3:
    # after the one batch of epoch 2, which is after 1 batch of epoch 2 on a rank with 2 per epoch.
    hops = Hops(Position(epoch=0, batches=1, after_stop=True), stops=(1, 3))
    moved = on_rank(hops, RankLengths(SHORT, LONG))
    assert moved.position == Position(epoch=0, batches=1)
    assert moved.stops == (1, 5)  # a hop of no batches stays one


def test_plans_without_positions_are_the_same_on_every_rank() -> None:
    calls = StateCalls(at=(0, 3), every=False, before_iter=True)
    assert on_rank(calls, RankLengths(SHORT, LONG)) is calls
    assert on_rank(None, RankLengths(SHORT, LONG)) is None


@given(st.data())
def test_translated_hops_stay_in_order_and_inside_the_rank_s_own_stream(data: st.DataObject) -> None:
    drawn = data.draw(st.lists(st.integers(0, 4), min_size=4, max_size=4), label="shortest lengths")
    own = [n + data.draw(st.integers(0, 2)) for n in drawn]
    epoch = data.draw(st.integers(0, 1))
    batches = data.draw(st.integers(0, drawn[epoch]))
    start = sum(drawn[:epoch]) + batches
    stops = tuple(sorted(data.draw(st.lists(st.integers(start, sum(drawn[:3])), min_size=1, max_size=3))))
    position = Position(epoch=epoch, batches=batches, after_stop=batches == drawn[epoch])
    moved = on_rank(Hops(position, stops), RankLengths(drawn, own))
    first = moved.position.absolute(own)
    assert list(moved.stops) == sorted(moved.stops) and moved.stops[0] >= first
    assert moved.stops[-1] <= sum(own)
    # A rank's epochs are at least as long as the shortest rank's: no hop gets shorter.
    assert all(b - a >= d - c for a, b, c, d in zip((first, *moved.stops), moved.stops, (start, *stops), stops))


# --- on real ranks ------------------------------------------------------------------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

UNEVEN = LoaderConfig(dataset_size=3, batch_size=1)  # rank 0: 2 batches per epoch, rank 1: 1


@linux_only
@pytest.mark.parametrize("clause, plan", [
    ("SC11", Hops(Position(epoch=0, batches=1, after_stop=True), stops=(2,))),
    ("SC15", Checkpoint(Position(epoch=0, batches=1, after_stop=True), more=2)),
    ("SC10", Checkpoint(Position(epoch=1, batches=1, after_stop=True))),
])
@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
def test_the_examples_that_failed_a_correct_uneven_loader_now_pass(clause: str, plan: object) -> None:
    report = check(target("refuses_another_world"), world_size=2, clauses=[clause], replay=(UNEVEN, plan))
    assert report[clause].status == "passed", report[clause].message


@pytest.mark.acceptance
@linux_only
def test_a_correct_loader_with_uneven_shards_passes_every_clause_on_two_ranks() -> None:
    # Uneven shards leave a rank without a batch at the end of an epoch: under a trainer that joins
    # uneven inputs (DDP's Join), declared; without it SC32 fails them (tests/clauses/test_ranks_in_step.py).
    report = check_world(target("refuses_another_world"), world_size=2, profile="dev", joins_uneven_inputs=True,
                         space=ConfigSpace(num_workers=(0,), dataset_size=(1, 16)))
    failed = {r.id: r.message for r in report.results if r.status == "failed"}
    assert failed == {}
    assert report["SC32"].status == "not-judged" and "does not apply" in report["SC32"].message
    assert {r.id for r in report.results if r.status == "passed"} >= {"SC10", "SC11", "SC15", "SC20", "SC30", "SC31"}
