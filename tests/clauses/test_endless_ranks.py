"""Endless streams on several ranks are judged, and messages name the user's class under a declared
consumption.

An endless stream on several ranks is judged natively: SC30 compares each rank's resumed stream with its
uninterrupted one over the endless horizon, SC32 counts each rank's batches stretch by stretch (docs/clauses.md,
SC30-SC32 and "Endless streams"). Multi-rank runs take seconds each: one example each, replayed, except the
correct loader's search and the 2 -> 3 resume (``acceptance``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from ranked_loaders import target
from world_checks import IN_PROCESS as WORLD_SPACE
from world_checks import on_two_ranks

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.clauses.in_step import RankSteps, Stretch, every_rank_takes_as_many_steps
from stateful_contract.faces.badge import badge_message
from stateful_contract.faces.distributed import check_world
from stateful_contract.faces.export import markdown_summary
from stateful_contract.repro.endless import cycle_length
from stateful_contract.repro.outcome import ClauseViolation

IN_PROCESS = ConfigSpace(num_workers=(0,))
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")


def _batches(*ids: int) -> list[dict[str, list[int]]]:
    return [{"index": [i]} for i in ids]


def test_a_cycle_is_the_period_an_endless_stream_repeats_with_past_its_first_quarter() -> None:
    assert cycle_length(_batches(0, 2, 4, 6) * 4) == 4
    assert cycle_length(_batches(1, 3, 5) * 5 + _batches(1)) == 3
    # Resumed mid-cycle, or re-dealt on another world: its start is not held to the period.
    assert cycle_length(_batches(5, 9) + _batches(1, 3, 5) * 4) == 3
    # Reshuffled every cycle: no period, so no rank is compared on it.
    assert cycle_length(_batches(0, 1, 2, 2, 0, 1, 1, 2, 0, 0, 2, 1)) is None


@settings(max_examples=60, database=None, derandomize=True)
@given(config=ConfigSpace(num_workers=(0,), dataset_size=(1, 6), batch_size=(1, 4), endless=True)
       .configs(workers=False, ranks=2))
def test_an_endless_search_on_2_ranks_draws_configs_that_give_every_rank_a_batch(config: LoaderConfig) -> None:
    # drop_last, 4 samples, batches of 4: one epoch of 2 samples a rank makes no batch, and a cycle over it spins;
    # so does 1 sample on 2 ranks (DistributedSampler with drop_last deals none).
    share = config.dataset_size // 2
    assert (share // config.batch_size if config.drop_last else share) > 0, config


def test_cycles_of_different_lengths_fail_silent_and_a_cycle_one_rank_did_not_observe_is_not_compared() -> None:
    def ranks(*periods: int | None) -> list[RankSteps]:
        return [RankSteps(r, [Stretch("the 20 steps after the resume", 20)]
                          + ([] if p is None else [Stretch("each cycle of the data after the resume", p, cycle=True)]))
                for r, p in enumerate(periods)]

    with pytest.raises(ClauseViolation) as caught:
        every_rank_takes_as_many_steps(ranks(4, 3), what="fresh endless streams on 2 ranks")
    v = caught.value
    assert v.impact is not None and v.impact.describe() == (
        "silent: ranks out of step: rank 1 trains its samples 4 times for every 3 of the others'")
    assert "rank 1 starts its next cycle at step 4, the others at step 5" in v.got, v.got
    assert v.reproduce_on == 1  # type: ignore[attr-defined]
    every_rank_takes_as_many_steps(ranks(4, None), what="a reshuffled stream on rank 1")
    every_rank_takes_as_many_steps(ranks(4, 4), what="in step")


class NoLoad:
    """Lacks ``load_state_dict`` (SC01): a StatefulDataLoader's iteration and state, and nothing else."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]


class NoEpochHook(NoLoad):
    """A correct loader with no ``set_epoch``, drawn through a consumption below."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


def plain(loader: Any) -> Iterator[Any]:
    """The trainer draws from ``iter(loader)``: the consumption changes nothing but how the check draws."""
    return iter(loader)


def test_with_a_declared_consumption_messages_name_the_users_class_not_the_adapter() -> None:
    sc21 = check(NoEpochHook, consume=plain, clauses=["SC21"], space=IN_PROCESS)["SC21"]
    assert sc21.status == "not-judged" and sc21.message.startswith("NoEpochHook has no set_epoch"), sc21.message
    hooked = check(NoEpochHook, consume=plain, clauses=["SC21"], epoch_hook="reshuffle", space=IN_PROCESS)["SC21"]
    assert hooked.status == "failed" and "NoEpochHook has no reshuffle" in hooked.got, hooked.got
    assert "Drawn" not in hooked.message + hooked.reproduction
    assert "factory = drawn_through(factory, consume)" in hooked.reproduction  # the reproduction draws as the trainer
    sc01 = check(NoLoad, consume=plain, clauses=["SC01"], space=IN_PROCESS)["SC01"]
    assert sc01.status == "failed" and "NoLoad has no callable load_state_dict" in sc01.got, sc01.got
    assert "Drawn" not in sc01.message


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_an_endless_stream_that_deals_rank_0_one_more_batch_per_cycle_fails_sc32_and_the_faces_say_endless() -> None:
    # 7 samples, unpadded: rank 0 cycles every 4 batches, rank 1 every 3. No declaration: the recorded example
    # is an endless stream's.
    report, sc32 = on_two_ranks(target("endless_uneven_shards"), "SC32",
                                LoaderConfig(dataset_size=7, batch_size=1, endless=True))
    assert report.endless == "found" and sc32.status == "failed", sc32.message
    assert sc32.impact is not None and sc32.impact.describe() == (
        "silent: ranks out of step: rank 1 trains its samples 4 times for every 3 of the others'")
    assert "each cycle of the data in the uninterrupted stream: rank 0 every 4 batches, rank 1 every 3" in sc32.got
    assert "rank=1, world_size=2" in sc32.reproduction and "endless=True" in sc32.reproduction
    assert "endless stream (found)" in markdown_summary(report)
    assert "endless stream" in badge_message(report)


@pytest.mark.acceptance  # three worlds (2 ranks, then 3 resumed); SC32's fresh kill on an endless stream stays in the README's suite
@linux_only
def test_the_same_stream_even_on_2_ranks_fails_sc32_after_a_2_to_3_resume() -> None:
    # 8 samples: 4 a cycle on each of 2 ranks; the 3 ranks resumed from their states cycle every 3, 3 and 2.
    _, sc32 = on_two_ranks(target("endless_uneven_shards"), "SC32",
                           LoaderConfig(dataset_size=8, batch_size=1, endless=True))
    assert sc32.status == "failed", sc32.message
    assert "a fresh world of 3 ranks resumed" in sc32.message, sc32.message
    assert "each cycle of the data after the resume on 3 ranks: rank 0 every 3 batches, rank 1 every 3 batches, " \
           "rank 2 every 2 batches" in sc32.got, sc32.got
    # An endless stream has no epoch to save in: the save is named as a point in the stream.
    assert "every one of 2 ranks saved its state after 1 batch of the endless stream" in sc32.message, sc32.message
    assert "of epoch 0 (its iterator open)" not in sc32.message, sc32.message


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_joining_uneven_inputs_does_not_waive_sc32_on_an_endless_stream() -> None:
    # DDP's Join handles a rank that runs out of batches; no rank of an endless stream does, and ranks whose
    # cycles differ (7 samples on 2 ranks, unpadded) drift apart whatever the trainer joins.
    report, sc32 = on_two_ranks(target("endless_uneven_shards"), "SC32",
                                LoaderConfig(dataset_size=7, batch_size=1, endless=True), joins_uneven_inputs=True)
    assert sc32.status == "failed", sc32.message
    assert "rank 0 every 4 batches, rank 1 every 3" in sc32.got, sc32.got
    assert "SC32 is judged though joins_uneven_inputs is declared: the stream is endless" in " ".join(report.notes)


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_an_endless_stream_whose_rank_1_loses_its_buffer_at_resume_fails_sc30_with_the_sample_lost() -> None:
    report, sc30 = on_two_ranks(target("rank1_runs_ahead"), "SC30",
                                LoaderConfig(dataset_size=5, batch_size=1, endless=True), batches=3)
    assert report.endless == "found" and sc30.status == "failed", sc30.message
    assert sc30.impact is not None and sc30.impact.describe() == "silent: 1 sample lost", sc30.impact
    assert "after 3 batches of the endless stream" in sc30.context, sc30.context
    assert "rank 1: over the 9 samples of its endless stream after the checkpoint, lost 1, repeated 0" in sc30.got
    assert "another order" not in sc30.got  # a stream resumed ahead is a loss, not a reshuffle
    assert "rank 0 (" not in sc30.got  # rank 0 resumed exactly


@pytest.mark.acceptance
@linux_only
def test_a_cycling_stateful_dataloader_on_2_ranks_passes_the_multi_rank_clauses_with_no_declaration() -> None:
    report = check_world(target("cycling_stateful_dataloader"), world_size=2, profile="ci",
                         clauses=["SC30", "SC31", "SC32"], space=WORLD_SPACE)
    assert report.endless == "found" and report.passed, [r.message for r in report.results if r.is_failure]
    for cid in ("SC30", "SC32"):
        assert report[cid].status == "passed" and report[cid].examples >= 5, report[cid].message
    assert "endless stream" in badge_message(report)
