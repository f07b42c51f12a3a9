"""SC31 on an endless stream (docs/clauses.md, SC31, "On an endless stream"): judged under a declared fixed global
batch, global epoch by global epoch; Megatron-LM's cyclic sampler (tests/megatron_cyclic.py) with
``data_sharding`` fails it naming the samples lost and repeated, without passes; and where SC31 is not judged,
every face says so beside the pass."""

from __future__ import annotations

import io
import sys
from collections import Counter
from pathlib import Path

import pytest
from megatron_cyclic import target
from reproductions import run_here
from world_checks import on_two_ranks

from stateful_contract import CLAUSES, ClauseResult, ConfigSpace, LoaderConfig, Report
from stateful_contract.clauses.registry import lookup
from stateful_contract.faces.badge import badge_color, badge_message
from stateful_contract.faces.distributed import check_world
from stateful_contract.faces.export import markdown_summary
from stateful_contract.report.render import render_report
from stateful_contract.repro.endless_world import epoch_steps, global_steps, judge_endless_world

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

#: Megatron's 8 samples on 2 ranks, micro-batch 1, 4 global steps an epoch (the sharded path's buckets 0-3 and 4-7,
#: each shuffled by the epoch): rank by rank, ids per batch over 3 epochs.
SAVED = [[[0], [1], [3], [2], [2], [0], [1], [3], [1], [3], [0], [2]],
         [[4], [5], [7], [6], [6], [4], [5], [7], [5], [7], [4], [6]]]


def _one_rank(*steps: list[int]) -> list[list[list[int]]]:
    return [list(steps)]


def test_the_epoch_of_a_global_stream_is_the_fewest_steps_that_deal_its_samples_again() -> None:
    assert epoch_steps(global_steps(SAVED)) == 4
    # A stream that drops another sample every epoch repeats no window: no epoch to cut it into.
    assert epoch_steps([Counter([0, 1]), Counter([2, 1]), Counter([0, 2])]) is None


def test_a_resume_that_takes_the_same_global_steps_holds_in_any_order_within_an_epoch() -> None:
    # After 2 global steps (0, 4, 1, 5 consumed), one rank of micro-batch 2 takes the rest and two whole epochs.
    resumed = _one_rank([7, 3], [2, 6], [2, 6], [0, 4], [1, 5], [3, 7], [5, 1], [7, 3], [0, 4], [2, 6])
    assert judge_endless_world(SAVED, resumed, None, at=2).impact is None


def test_megatrons_sharded_buckets_on_one_rank_lose_and_repeat_the_interrupted_epochs_samples() -> None:
    # The sharded path on 1 rank deals one bucket of all 8 and skips consumed // 1 = 4 of it: 1, 2, 5, 6.
    resumed = _one_rank([1, 2], [5, 6], [2, 6], [0, 4], [1, 5], [3, 7], [5, 1], [7, 3], [0, 4], [2, 6])
    verdict = judge_endless_world(SAVED, resumed, None, at=2)
    assert verdict.impact is not None and verdict.impact.describe() == "silent: 2 samples lost, 2 repeated in epoch 0"
    assert verdict.lines[0] == ("the rest of epoch 0 (global steps 3 to 4): the 1-rank world yielded [1, 2, 5, 6] "
                                "(4 samples); lost [3, 7] (2 samples), repeated [1, 5] (2 samples)"), verdict.lines
    assert any(line.startswith("what it costs:") for line in verdict.lines)


def test_a_stretch_of_one_global_step_is_named_as_one_step() -> None:
    # Resumed 3 steps into a 4-step epoch: the rest of the epoch is global step 4 alone ("steps 4 to 4" read as a typo).
    resumed = _one_rank([2, 2], [2, 0], [4, 5], [1, 7], [3, 6], [1, 5], [3, 7], [0, 4], [2, 6])
    verdict = judge_endless_world(SAVED, resumed, None, at=3)
    assert verdict.lines[0].startswith("the rest of epoch 0 (global step 4): "), verdict.lines


def test_an_epoch_not_yet_begun_may_follow_a_fresh_new_worlds_plan() -> None:
    # A world that re-deals the epochs after the interrupted one as a fresh 1-rank world does (other samples
    # dropped, say) loses nothing; the same epoch held to the saving world's alone would read as a loss.
    saved = [[[0], [1], [0], [1]], [[2], [3], [2], [3]]]
    fresh = _one_rank([0, 2], [1, 3], [0, 2], [1, 3])
    assert judge_endless_world(saved, _one_rank([1, 3], [0, 2], [1, 3]), fresh, at=1).impact is None
    lost = judge_endless_world(saved, _one_rank([1, 3], [0, 0], [1, 3]), fresh, at=1)
    assert lost.impact is not None and lost.impact.counts == {"lost": 1, "repeated": 1}, lost.lines


def test_worlds_whose_epochs_take_other_numbers_of_steps_are_not_judged_and_say_why() -> None:
    fresh = _one_rank(*([[0, 1, 2, 3, 4, 5, 6, 7]] * 6))  # 1 step an epoch, where the saving world takes 4
    verdict = judge_endless_world(SAVED, _one_rank(*([[0, 1]] * 10)), fresh, at=2)
    assert verdict.impact is None and "takes 1 global steps an epoch where the 2-rank world took 4" in verdict.skipped


def test_a_resumed_stream_that_ends_is_loud() -> None:
    verdict = judge_endless_world(SAVED, _one_rank([2, 6], [3, 7]), None, at=2)
    assert verdict.impact is not None and verdict.impact.kind == "loud", verdict.lines
    assert "rank 0 yielded 2 of the 10 batches of the horizon: its stream ended" in verdict.lines


def test_without_a_fixed_global_batch_sc31_is_not_judged_on_an_endless_stream_and_says_how_it_would_be() -> None:
    sc31 = lookup("SC31")
    why = sc31.unjudged_on_endless({"fixed_global_batch": False})
    assert why is not None and why.startswith("not judged on an endless stream: with the per-rank batch kept"), why
    assert "fixed_global_batch" in why or "--fixed-global-batch" in why, why
    assert sc31.unjudged_on_endless({"fixed_global_batch": True}) is None
    assert lookup("SC41").unjudged_on_endless({}) is None  # judged: its refusals need no epoch
    assert lookup("SC21").unjudged_on_endless({}).startswith("does not apply to an endless stream")  # type: ignore[union-attr]


def _endless_pass(unjudged: tuple[str, ...]) -> Report:
    results = [ClauseResult("passed" if c.tier in ("structure", "core") else "skipped", id=c.id, name=c.name,
                            tier=c.tier) for c in CLAUSES]
    for r in results:
        if r.id in unjudged:
            r.status, r.heading, r.detail = "not-judged", "", f"not judged on an endless stream: {r.id}'s reason"
            r.unjudged = "endless"  # as the clause loop records it (`Clause.unjudged_on_endless`)
    return Report(target="pkg:factory", results=results, endless="declared", world_size=2)


def test_every_face_shows_what_an_endless_pass_did_not_judge() -> None:
    gap = _endless_pass(("SC31",))
    assert gap.passed and gap.not_judged_on_endless == ["SC31"]
    assert gap.to_dict()["not_judged_on_endless"] == ["SC31"]
    out = io.StringIO()
    render_report(gap, out)
    assert "Verdict: PASS (SC31 not judged on an endless stream)" in out.getvalue(), out.getvalue()
    assert "✅ pass (SC31 not judged on an endless stream)" in markdown_summary(gap)
    for r in gap.results:
        r.tier = "distributed" if r.id == "SC31" else r.tier
    assert (badge_message(gap), badge_color(gap)) == ("passing, endless stream (SC31 not judged)", "yellowgreen")
    whole = _endless_pass(())
    assert (badge_message(whole), badge_color(whole)) == ("passing, endless stream", "brightgreen")
    assert Report.from_dict(gap.to_dict()).not_judged_on_endless == ["SC31"]


@pytest.mark.acceptance  # a world of rank processes (an interpreter importing torch per rank): docs/contributing.md
@linux_only
def test_megatrons_sharded_cyclic_sampler_fails_sc31_on_one_rank_naming_the_samples(tmp_path: Path) -> None:
    # docs/unseen.md: 8 samples, a global batch of 2, 2 global steps on 2 ranks, resumed on 1 rank (micro-batch 2).
    _, sc31 = on_two_ranks(target("sharded"), "SC31", LoaderConfig(dataset_size=8, batch_size=1, endless=True),
                           batches=2, fixed_global_batch=True)
    assert sc31.status == "failed", sc31.message
    assert sc31.impact is not None and sc31.impact.describe() == "silent: 2 samples lost, 2 repeated in epoch 0"
    assert "lost [3, 7] (2 samples), repeated [1, 5] (2 samples)" in sc31.got, sc31.got
    assert "after 2 batches of the endless stream" in sc31.context, sc31.context
    assert "--fixed-global-batch" in sc31.reproduction and "endless=True" in sc31.reproduction
    # Pasted, it fails the same judgement (tests/reproductions.py); the unsharded sampler runs it clean.
    assert run_here(sc31.reproduction, tmp_path / "sharded") == "AssertionError", sc31.reproduction
    correct = sc31.reproduction.replace("['sharded']", "['unsharded']")
    assert correct != sc31.reproduction and run_here(correct, tmp_path / "unsharded") == "ran clean"


@pytest.mark.acceptance
@linux_only
@pytest.mark.parametrize("clauses", [("SC31",), ("SC31", "SC41")])
def test_megatrons_unsharded_cyclic_sampler_passes_sc31_and_sc41_on_an_endless_stream(clauses: tuple[str, ...]) -> None:
    # Dataset sizes a multiple of every global batch the space draws (2, 4, 6): Megatron's datasets are built to
    # the steps' samples; other sizes leave its unsharded ranks uneven, which SC32 judges.
    report = check_world(target("unsharded"), world_size=2, profile="ci", clauses=list(clauses), endless=True,
                         fixed_global_batch=True, strict="SC41" in clauses,
                         space=ConfigSpace(num_workers=(0,), dataset_size=(12, 12), batch_size=(1, 3)))
    assert report.passed, [r.message for r in report.results if r.is_failure]
    assert report["SC31"].status == "passed" and report["SC31"].examples >= 5, report["SC31"].message
    assert not report.not_judged_on_endless
