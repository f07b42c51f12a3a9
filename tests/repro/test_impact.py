"""Each failure says what it does to a training run; failures of one cause tell one story; the order message."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
import zoo
import zoo_kills

from stateful_contract import CLAUSES, LoaderConfig, Report, check
from stateful_contract.faces.badge import badge_message
from stateful_contract.faces.export import junit_xml, markdown_summary
from stateful_contract.report.render import render_report, summary_line
from stateful_contract.report.results import REPORT_FORMAT, ClauseResult, same_causes
from stateful_contract.repro.compare import Segment, stream_difference
from stateful_contract.repro.impact import Impact, epochs_impact, stream_impact
from stateful_contract.repro.steps import Position
from stateful_contract.search.plans import Checkpoint

#: Every broken loader of the zoo, the clause that kills it, and the impact its failure must have:
#: the kind, and for a silent one the count it must carry, for a loud one the call that raises.
IMPACTS: dict[type, tuple[str, str, str]] = {
    zoo.NoLoadStateDict: ("SC01", "loud", "load"),
    zoo.KeywordOnlyLoad: ("SC02", "loud", "load"),
    zoo.IntKeyedState: ("SC03", "silent", "state"),
    zoo.IgnoresLoadedState: ("SC10", "silent", "repeated"),  # every resume restarts the epoch
    zoo.OffByOneResume: ("SC10", "silent", "lost"),  # resumes one batch ahead
    zoo.StopIterationStateStillFinishing: ("SC10", "silent", "epochs lost"),
    zoo.CountsSinceResume: ("SC11", "silent", "any"),
    zoo.NoStateBeforeIter: ("SC12", "loud", "iter()"),
    zoo.StaleStateAfterLoad: ("SC13", "silent", "repeated"),
    zoo.StateDictSkipsABatch: ("SC14", "silent", "lost"),
    zoo.LiveState: ("SC15", "silent", "state"),
    zoo.LoadConsumesArgument: ("SC16", "silent", "state"),
    zoo.CustomObjectInState: ("SC17", "silent", "state"),
    # "any": two unseeded shuffles of a tiny dataset agree now and then, and Hypothesis then reports
    # the example as not reproducible (no counts) instead of shrinking it to a reordering.
    zoo.UnseededShuffle: ("SC18", "silent", "any"),
    zoo.StartsOnTemplate: ("SC19", "silent", "repeated"),
    zoo.ReloadKeepsItsEpoch: ("SC20", "silent", "any"),
    zoo.LazyNewPass: ("SC22", "silent", "any"),
    zoo.EndsThePassAtTheStepLimit: ("SC22", "silent", "repeated"),  # the pass the state was taken in, again
    zoo.RescalesOffsetByWorkers: ("SC23", "silent", "any"),
    zoo.SkipsTheOffsetInTheNewOrder: ("SC23", "silent", "lost"),
    zoo.FailsAfterAWorkerChange: ("SC23", "loud", "next()"),
    zoo.RefusesWorkerChangeBare: ("SC41", "loud", "any"),  # refused, and nobody is told why
    zoo.ProcessLocalState: ("SC10", "silent", "any"),
    zoo.HashOrderedShards: ("SC10", "silent", "any"),
    zoo.EndOfEpochStateIgnoresSetEpoch: ("SC21", "silent", "any"),
    zoo.EpochLoader: ("SC40", "silent", "any"),  # a bad state accepted silently
    zoo.HangsOnResume: ("SC10", "loud", "iter()"),
    zoo.RaisesOnResume: ("SC10", "loud", "iter()"),
    zoo.EndlessWindowLosesBuffer: ("SC10", "silent", "lost"),  # an endless stream resumes past its window
    zoo.FirstPassStartsLate: ("SC42", "silent", "lost"),  # its first pass never yields two batches
}


def test_every_broken_loader_of_the_zoo_is_listed_here() -> None:
    assert set(zoo.KILLS) <= set(IMPACTS)


def _killed(tmp_path_factory: pytest.TempPathFactory, loader: type, clause_id: str) -> ClauseResult:
    """The zoo's kill of ``loader`` that test_clauses asserts on too (one search a session), or for the
    two loaders outside `zoo.KILLS` a search of their own (a hang needs a short timeout)."""
    if loader in zoo.KILLS:
        return zoo_kills.killed(tmp_path_factory, loader)[clause_id]
    timeout = {"timeout": 3} if loader is zoo.HangsOnResume else {}
    return check(loader, clauses=[clause_id], space=zoo_kills.space_for(clause_id),
                 strict=clause_id in zoo_kills.STRICT, **timeout)[clause_id]


@pytest.mark.parametrize(("loader", "expected"),
                         [pytest.param(loader, expected, marks=zoo_kills.group(loader) if loader in zoo.KILLS else ())
                          for loader, expected in IMPACTS.items()], ids=lambda v: getattr(v, "__name__", ""))
def test_every_failure_of_the_zoo_has_an_impact_of_the_right_kind(loader: type, expected: tuple[str, str, str],
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    clause_id, kind, what = expected
    assert zoo.KILLS.get(loader, clause_id) == clause_id, "the clause that kills it in test_clauses"
    result = _killed(tmp_path_factory, loader, clause_id)
    assert result.status == "failed", result.message
    impact = result.impact
    assert impact is not None and impact.kind == kind, (impact, result.message)
    assert impact.what and result.message.splitlines()[0].startswith(clause_id)
    if kind == "loud" and what != "any":
        assert impact.where == what, impact
    elif what == "state":
        assert impact.what.startswith("state unusable later"), impact
    elif what != "any":
        assert impact.counts.get(what, 0) >= 1, impact
    else:
        assert impact.counts or impact.what, impact
    # Shown first: in the table line and in the full story, before what was expected.
    assert len(impact.describe()) <= 90, impact  # a phrase: it leads the table line
    assert summary_line(result).startswith(impact.describe())
    out = io.StringIO()
    render_report(Report(target="t", results=[result]), out)
    story = out.getvalue()
    assert story.index(f"Impact: {impact.describe()}") < story.index("Expected:")


def _batches(*ids: tuple[int, ...]) -> list[dict[str, torch.Tensor]]:
    return [{"index": torch.tensor(list(i))} for i in ids]


def test_a_stream_one_batch_ahead_is_a_loss_and_one_behind_a_repeat() -> None:
    epoch = _batches((0, 1), (2, 3), (4, 5), (6, 7))
    reference = epoch * 4
    expected = Segment(reference[1:12], 1, [4, 4, 4, 4])
    ahead = stream_impact(expected, reference[2:13])
    assert (ahead.kind, ahead.counts, ahead.epoch, ahead.unit) == ("silent", {"lost": 2}, 0, "sample")
    assert ahead.describe() == "silent: 2 samples lost in epoch 0"
    behind = stream_impact(expected, reference[0:11])
    assert behind.counts == {"repeated": 2} and behind.at == 1


def test_the_resumed_passes_decide_between_a_loss_and_a_repeat() -> None:
    """On two samples without shuffling, [0], [1], [0] after a checkpoint after [0] reads either way;
    the resumed loader's own passes say which one it was."""
    reference = _batches((0,), (1,)) * 4
    expected = Segment(reference[1:6], 1, [2, 2, 2, 2])
    restarted = Segment(reference[0:5], 0, [2, 2, 1])  # the epoch again from its start
    skipped = Segment(reference[0:5], 0, [0, 2, 2, 1])  # an empty rest of epoch 0, then epoch 1
    assert stream_impact(expected, restarted).counts == {"repeated": 1}
    assert stream_impact(expected, skipped).counts == {"lost": 1}


def test_a_resumed_stream_that_goes_on_past_the_uninterrupted_one_counts_what_it_yields_again() -> None:
    """SC22's resumed cut-short run compares as one list: its batches past the reference's end were counted
    over an empty stretch and read "batch contents changed: 0 batches of the same samples differ"."""
    expected = _batches((6, 7), (0, 1), (2, 3))
    longer = stream_impact(expected, [*expected, *_batches((0, 1, 2), (3, 4, 5))])
    assert (longer.kind, longer.counts, longer.unit) == ("silent", {"repeated": 6}, "sample"), longer.describe()
    assert stream_impact([1, 2], [1, 2, 3]).counts == {"repeated": 1}


def test_batches_without_an_index_are_counted_as_batches() -> None:
    impact = stream_impact([1, 2, 3, 4], [1, 3, 4, 5])
    assert (impact.unit, impact.counts) == ("batch", {"lost": 1})


def test_the_same_samples_in_another_order_is_an_order_changed_and_the_message_says_so() -> None:
    """A skip-n-batches resume in a fresh process: the offset is right, the shuffle of the next
    epoch is not."""
    first, second, other = _batches((4, 1), (2, 5)), _batches((3, 1), (0, 2)), _batches((2, 0), (1, 3))
    expected = Segment([*second, *second], 2, [2, 2, 2])
    got = Segment([*other, *second], 0, [2, 2])
    impact = stream_impact(expected, got)
    assert impact.counts == {"reordered": 4} and impact.epoch == 1
    assert impact.describe() == "silent: order changed: 4 samples in another order in epoch 1"
    text = stream_difference(expected, got)
    assert text is not None and text.startswith("batch 0 after the checkpoint (batch 0 of epoch 1) differs")
    assert "same samples, another order: epoch 1 holds the expected samples in another order, so the epoch's " \
           "shuffle was not restored" in text
    lost = stream_difference(expected, Segment([*first, *second], 0, [2, 2]))
    assert lost is not None and "another order" not in lost  # other samples: not an order


def test_an_epoch_loop_counts_the_epoch_that_differs() -> None:
    e0, e1 = _batches((0,), (1,)), _batches((1,), (0,))
    assert epochs_impact({0: e0, 1: e1}, {0: [], 1: e1}) == Impact(
        "silent", "2 samples lost in epoch 0", counts={"lost": 2}, unit="sample", epoch=0)
    assert epochs_impact({0: e0}, {}) is not None and epochs_impact({0: e0}, {0: e0}) is None


def _failed(cid: str, *, got: str = "batch 0 differs", config: str = "LoaderConfig(dataset_size=2)",
            impact: Impact | None = None) -> ClauseResult:
    entry = next(c for c in CLAUSES if c.id == cid)
    return ClauseResult("failed", expected="the same batches", heading=f"{cid} {entry.name}", got=got,
                        config=config, reproduction=f"# the program of {cid}",
                        impact=impact or Impact("silent", "1 sample lost in epoch 0", counts={"lost": 1}, at=1),
                        id=cid, name=entry.name, tier=entry.tier)


def test_failures_with_one_cause_are_one_story_and_keep_their_reproductions() -> None:
    results = [_failed("SC10"), _failed("SC11"), _failed("SC13", config="LoaderConfig(dataset_size=3)"),
               _failed("SC17", impact=Impact("silent", "1 sample lost in epoch 0", counts={"lost": 1}, at=2)),
               _failed("SC19"), _failed("SC20", got="batch 1 differs")]
    report = Report(target="t", results=results)
    # Another config, another checkpoint position (``at``), another difference: another story.
    assert same_causes(report.results) == {"SC11": "SC10", "SC19": "SC10"}
    out = io.StringIO()
    render_report(report, out)
    text = out.getvalue()
    assert text.count("# the program of") == 4  # SC10, SC13, SC17, SC20 in full
    assert "--- SC11 resume-survives-several-hops: same cause as SC10" in text
    data = report.to_dict()
    assert data["same_cause"] == {"SC11": "SC10", "SC19": "SC10"}
    assert [c["reproduction"] for c in data["clauses"] if c["id"] == "SC19"] == ["# the program of SC19"]
    markdown = markdown_summary(report)
    assert "#### ❌ SC11 resume-survives-several-hops: same cause as SC10" in markdown
    assert markdown.index("**Impact: silent: 1 sample lost in epoch 0**") < markdown.index("# the program of SC10")
    assert 'message="silent: 1 sample lost in epoch 0; same cause as SC10"' in junit_xml(report)


def test_the_impact_round_trips_through_json_and_a_format_5_report_still_loads(tmp_path: Any) -> None:
    report = Report(target="t", results=[_failed("SC10")])
    report.to_json(tmp_path / "r.json")
    again = Report.from_json(tmp_path / "r.json")
    assert again.to_dict()["report_format"] == REPORT_FORMAT >= 9
    assert again["SC10"].impact == report["SC10"].impact
    old = report.to_dict()
    old["report_format"] = 5
    del old["same_cause"]
    for clause in old["clauses"]:
        del clause["impact"]
    five = Report.from_dict(old)
    assert five["SC10"].impact is None and summary_line(five["SC10"]) == "batch 0 differs"


@pytest.mark.parametrize(("impact", "hint"), [
    (Impact("loud", "load_state_dict() at resume raises TypeError", "load"), "crashes on resume"),
    (Impact("loud", "state_dict() at save raises TypeError", "save"), "crashes at save"),
    (Impact("silent", "2 samples lost in epoch 0", counts={"lost": 2}), "silent data loss"),
    (Impact("silent", "order changed", counts={"reordered": 2}), "silently reorders data"),
])
def test_the_badge_hints_at_what_the_failures_do(impact: Impact, hint: str) -> None:
    report = Report(target="t", results=[_failed("SC10", impact=impact)])
    assert badge_message(report) == f"failing SC10: {hint}"


def test_the_badge_names_a_crash_before_a_silent_loss() -> None:
    crash = _failed("SC02", impact=Impact("loud", "load_state_dict() at resume raises TypeError", "load"))
    report = Report(target="t", results=[crash, _failed("SC10")])
    assert badge_message(report) == "failing SC02 +1: crashes on resume, silent data loss"


def test_a_batch_holding_nan_counts_as_equal_to_itself() -> None:
    """The comparison treats NaN where the other side has NaN as equal (`compare.first_difference`);
    the accounting must too, or one batch lost reads as every batch lost and repeated."""
    def batch(i: int) -> dict[str, torch.Tensor]:
        return {"loss_mask": torch.tensor([float(i), float("nan")])}

    expected = [batch(i) for i in range(4)]
    impact = stream_impact(expected, [batch(i) for i in (0, 2, 3, 4)])
    assert (impact.unit, impact.counts) == ("batch", {"lost": 1}), impact.describe()
    floats = stream_impact([1.0, float("nan"), 2.0, 3.0], [1.0, float("nan"), 3.0, 4.0])
    assert floats.counts == {"lost": 1}, floats.describe()


def test_a_resume_into_the_next_epoch_loses_the_rest_of_the_interrupted_one() -> None:
    """Paired with the rest of epoch 0, the resumed pass (epoch 1) read as epoch 0's first batches "repeated":
    Hugging Face's Trainer resuming one epoch too far was told "8 samples repeated" where 1 was lost."""
    config = LoaderConfig(dataset_size=9, batch_size=2, shuffle=True, seed=3)
    sc10 = check(zoo.ResumesIntoTheNextEpoch, clauses=["SC10"], replay=(config, Checkpoint(Position(0, 2))))["SC10"]
    assert sc10.status == "failed", sc10.message
    assert sc10.impact is not None and sc10.impact.counts == {"lost": 5}, sc10.impact
    assert sc10.impact.describe() == "silent: 5 samples lost in epoch 0 (the resume skipped to epoch 1)", sc10.impact
    # Unshuffled, the next epoch is the interrupted one again: a restart reads the same, and stays a repeat.
    plain = check(zoo.IgnoresLoadedState, clauses=["SC10"],
                  replay=(LoaderConfig(dataset_size=9, batch_size=2), Checkpoint(Position(0, 2))))["SC10"]
    assert plain.impact is not None and "repeated" in plain.impact.counts, plain.impact
