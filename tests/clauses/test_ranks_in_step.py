"""SC32 ranks-stay-in-step: every rank yields as many batches as every other, stretch by stretch.

The judgement is pure (`every_rank_takes_as_many_steps` over labelled stretches) and is tested here without
ranks; the clause itself on real ranks, a broken loader replayed on one example each (fresh, and after a
2 -> 3 resume, with the correct ones searched, in ``acceptance``).
"""

from __future__ import annotations

import sys

import pytest
from ranked_loaders import target
from world_checks import IN_PROCESS, on_two_ranks

from stateful_contract import LoaderConfig
from stateful_contract.clauses import clause
from stateful_contract.clauses.in_step import RankSteps, Stretch, every_rank_takes_as_many_steps
from stateful_contract.faces.distributed import check_world
from stateful_contract.repro.outcome import ClauseViolation

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")


def _ranks(*counts: tuple[int, ...], labels: tuple[str, ...] = ("epoch 0", "epoch 1")) -> list[RankSteps]:
    return [RankSteps(rank, [Stretch(label, n) for label, n in zip(labels, of_rank)]) for rank, of_rank in enumerate(counts)]


def test_the_judgement_names_the_rank_that_runs_out_and_the_step_every_collective_waits_at() -> None:
    with pytest.raises(ClauseViolation) as caught:
        every_rank_takes_as_many_steps(_ranks((4, 4), (3, 3)), what="fresh loaders on 2 ranks")
    v = caught.value
    assert v.impact is not None and v.impact.describe() == "loud: rank 1 has no batch at step 4: every collective waits"
    assert "in epoch 0, rank 0 yielded 4 batches, rank 1 yielded 3 batches" in v.got
    assert v.reproduce_on == 1  # type: ignore[attr-defined]


def test_the_judgement_passes_ranks_in_step_and_takes_any_labelled_stretch() -> None:
    every_rank_takes_as_many_steps(_ranks((4, 3), (4, 3), (4, 3)), what="3 ranks")
    # An endless stream's stretches between saves are judged alike: the first uneven one fails.
    between = ("the stretch between save 1 and save 2", "the stretch between save 2 and save 3")
    with pytest.raises(ClauseViolation) as caught:
        every_rank_takes_as_many_steps(_ranks((5, 2), (5, 3), (5, 2), labels=between), what="an endless stream")
    assert caught.value.impact is not None and caught.value.impact.what == (
        "rank 0 and rank 2 have no batch at step 3 of the stretch between save 2 and save 3: every collective waits")


def test_a_rank_whose_resume_raised_is_left_to_the_resume_clauses() -> None:
    ranks = _ranks((4,), (3,))
    ranks[1].error = "ValueError: the state was saved on world size 2"
    every_rank_takes_as_many_steps(ranks, what="a world of 3 ranks")


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_a_loader_that_deals_4_batches_to_rank_0_and_3_to_rank_1_fails_fresh() -> None:
    _, sc32 = on_two_ranks(target("uneven_shards"), "SC32", LoaderConfig(dataset_size=7, batch_size=1))
    assert sc32.status == "failed", sc32.message
    assert sc32.message.startswith("SC32 ranks-stay-in-step"), sc32.message
    assert sc32.impact is not None and sc32.impact.describe() == (
        "loud: rank 1 has no batch at step 4: every collective waits")
    assert "rank=1, world_size=2" in sc32.reproduction and "assert_ranks_in_step(ranks, resumed" in sc32.reproduction
    assert "--clause SC32" in sc32.reproduction
    assert "joins_uneven_inputs=True" in sc32.got


@pytest.mark.acceptance  # three worlds (2 ranks, then 3 resumed): 18 s of CPU; the fresh kill above stays in the README's suite
@linux_only
def test_the_same_loader_even_on_2_ranks_fails_after_a_2_to_3_resume() -> None:
    # 8 samples: 4 batches each on 2 ranks; the 3 ranks resumed from their states deal the rest 2, 2 and 1.
    _, sc32 = on_two_ranks(target("uneven_shards"), "SC32", LoaderConfig(dataset_size=8, batch_size=1))
    assert sc32.status == "failed", sc32.message
    assert "a fresh world of 3 ranks resumed" in sc32.message, sc32.message
    assert sc32.impact is not None and sc32.impact.describe() == (
        "loud: rank 2 has no batch at step 2 of pass 1 after the resume on 3 ranks: every collective waits")


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_a_trainer_that_joins_uneven_inputs_declares_it_and_the_clause_does_not_apply() -> None:
    report, sc32 = on_two_ranks(target("uneven_shards"), "SC32",
                                LoaderConfig(dataset_size=7, batch_size=1), joins_uneven_inputs=True)
    assert sc32.status == "not-judged"  # shown with its reason, neither a pass nor a failure
    assert report.judged_nothing and not report.passed  # the one clause selected does not apply: no verdict
    assert sc32.message == "does not apply: the trainer handles ranks with uneven batch counts (DDP's Join) (declared)"
    assert "SC32 does not apply" in " ".join(report.notes)


def test_it_runs_by_default_from_two_ranks() -> None:
    from stateful_contract.clauses import default_selection

    assert clause("SC32") in default_selection(world_size=2)
    assert clause("SC32") not in default_selection(world_size=1)


@pytest.mark.acceptance
@linux_only
@pytest.mark.parametrize("name", [target("global_batches"), "stateful_contract.reference.factories:stateful_dataloader"])
def test_loaders_that_deal_every_rank_as_many_batches_pass(name: str) -> None:
    # StatefulDataLoader's DistributedBatchSampler pads (or cuts) as DistributedSampler does, and refuses 3 ranks.
    # PaddedReshard passes it in tests/search/test_padding.py's default-profile run.
    report = check_world(name, world_size=2, profile="dev", clauses=["SC32"], space=IN_PROCESS)
    sc32 = report["SC32"]
    assert sc32.status == "passed", sc32.message
    assert sc32.examples >= 15 and "examples resumed again in 3 ranks" in sc32.notes[-1], sc32.notes
