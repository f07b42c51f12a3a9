"""Reports across format versions, structured failures, recorded reproductions, progress events."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import zoo
import zoo_kills

from stateful_contract import ConfigSpace, Report, check
from stateful_contract.clauses import clause
from stateful_contract.clauses.registry import violated
from stateful_contract.report.render import render_result
from stateful_contract.report.results import REPORT_FORMAT, ClauseResult
from stateful_contract.repro.outcome import ClauseViolation, Outcome

IN_PROCESS = ConfigSpace(num_workers=(0,))
DATA = Path(__file__).parents[1] / "data"


def test_a_report_written_by_format_1_still_loads() -> None:
    """Written by the version before the redesign (tests/data/report-format-1.json)."""
    report = Report.from_json(DATA / "report-format-1.json")
    assert report.target == "zoo:OffByOneResume"
    assert report["SC10"].status == "failed" and "SC10 resume-continues-the-stream" in report["SC10"].message
    assert report["SC10"].got == ""  # format 1 had no structured fields: their defaults
    assert not report.passed


@pytest.mark.parametrize("version", [2, 3])
def test_a_report_written_by_format_2_or_3_still_loads(version: int) -> None:
    """Written before coverage and the seed were recorded (tests/data/report-format-N.json)."""
    report = Report.from_json(DATA / f"report-format-{version}.json")
    assert report["SC10"].status == "failed" and report["SC10"].plan.startswith("Checkpoint(")
    assert report["SC10"].coverage == {} and report.seed is None  # format 4's fields: their defaults
    assert report.to_dict()["report_format"] == REPORT_FORMAT


def test_a_report_records_coverage_per_clause_and_the_seed(tmp_path: Path) -> None:
    report = check(zoo.epoch_loader, clauses=["SC10", "SC11"], space=ConfigSpace(num_workers=(0, 1)), profile="dev",
                   seed=7)
    assert report.seed == 7
    sc10, sc11 = report["SC10"].coverage, report["SC11"].coverage
    points = ("mid-window", "window-boundary", "epoch-end", "after-stop-iteration", "before-first-iter")
    # One checkpoint point per SC10 example that drew its plan (Hypothesis may abandon a draw);
    # SC11 adds its hops (one or two per example); worker examples are counted.
    assert 0.8 * report["SC10"].examples <= sum(sc10.get(k, 0) for k in points) <= report["SC10"].examples
    assert sc11["hops"] >= 0.8 * report["SC11"].examples and sc10["with-workers"] >= 1
    report.to_json(tmp_path / "r.json")
    again = Report.from_json(tmp_path / "r.json")
    assert again["SC11"].coverage == sc11 and again.seed == 7


def test_the_same_seed_runs_the_same_search() -> None:
    def run(seed: int) -> list[tuple[str, int, dict[str, int], str]]:
        report = check(zoo.OffByOneResume, clauses=["SC10", "SC11"], space=IN_PROCESS, profile="dev", seed=seed)
        return [(r.id, r.examples, r.coverage, r.plan) for r in report.results if r.status != "skipped"]

    assert run(3) == run(3)


def test_a_report_round_trips_through_json_with_its_structured_fields(tmp_path: Path) -> None:
    report = check(zoo.OffByOneResume, clauses=["SC10"], space=IN_PROCESS, profile="dev")
    report.to_json(tmp_path / "r.json")
    again = Report.from_json(tmp_path / "r.json")
    sc10 = again["SC10"]
    assert again.to_dict()["report_format"] == REPORT_FORMAT >= 9
    assert sc10.expected.startswith("the resumed loader to yield exactly")
    assert sc10.got.startswith("batch 0 after the checkpoint (batch 1 of epoch 0) differs")
    assert sc10.context == "after 1 of the 2 batches of epoch 0 (its iterator open)"
    assert sc10.config.startswith("LoaderConfig(") and sc10.plan.startswith("Checkpoint(position=Position(")
    assert sc10.rank is None


@zoo_kills.group(zoo.OffByOneResume)
def test_the_reproduction_is_the_program_that_ran(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Recorded by the steps as they ran: the same calls, values and names, ending on the assertion."""
    result = zoo_kills.killed(tmp_path_factory, zoo.OffByOneResume)["SC10"]  # test_clauses' kill, searched once
    lines = result.reproduction.splitlines()
    assert lines[0].startswith("from stateful_contract.repro import ")
    assert "from zoo import OffByOneResume; factory = OffByOneResume" in lines
    assert any(line.startswith("state = checkpoint(loader, Position(epoch=0, batches=1))") for line in lines)
    assert lines[-1] == "assert_same_stream(expected, batches)"  # the failing line: the epoch check never ran
    # Every name a line uses is imported or assigned before it.
    imported = set(lines[0].removeprefix("from stateful_contract.repro import ").split(", "))
    assert {"fresh", "checkpoint", "take_epochs", "uninterrupted", "assert_same_stream"} <= imported


def test_a_failure_raises_with_its_reproduction_as_a_note() -> None:
    result = check(zoo.OffByOneResume, clauses=["SC10"], space=IN_PROCESS, profile="dev")["SC10"]
    error = result.to_exception()
    assert isinstance(error, AssertionError)
    assert str(error).startswith("SC10 resume-continues-the-stream")
    assert error.__notes__ == ["Reproduce with:\n" + result.reproduction]
    with pytest.raises(AssertionError):
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})


def test_progress_fires_when_each_clause_ends() -> None:
    events = []
    # One job: in several, SC10 and SC12 would be judged side by side, their ends in either order.
    check(zoo.epoch_loader, clauses=["SC10", "SC12"], space=IN_PROCESS, profile="dev", progress=events.append,
          jobs=1)
    ends = [(i, e.clause_id) for i, e in enumerate(events) if e.status is not None]
    # SC01 and SC18 run first, as what the two need (and are reported skipped, not selected);
    # then the likelier to fail first (`Clause.priority`).
    assert [cid for _, cid in ends] == ["SC01", "SC18", "SC10", "SC12"]
    first_end = ends[2][0]
    # SC10 is reported finished before SC12's first example runs, not all at the end.
    assert all(e.clause_id in ("SC01", "SC18", "SC10") for e in events[:first_end])
    assert any(e.clause_id == "SC12" and e.status is None for e in events[first_end:])
    assert events[first_end].status == "passed" and events[first_end].seconds > 0


def test_a_prerequisite_that_fails_says_why_the_others_are_not_judged() -> None:
    report = check(zoo.UnseededShuffle, clauses=["SC10", "SC18"], space=IN_PROCESS, profile="dev")
    assert report["SC18"].status == "failed"
    assert report["SC10"].status == "not-judged"
    assert report["SC10"].message.startswith("two fresh loaders from one config differ") and "see SC18" in report[
        "SC10"].message


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_reports_message_reads_and_renders_as_it_was_written(version: int) -> None:
    """Before format 12 a message was written whole; it loads, renders and is written again unchanged."""
    data = json.loads((DATA / f"report-format-{version}.json").read_text(encoding="utf-8"))
    written = next(c for c in data["clauses"] if c["id"] == "SC10")["message"]
    sc10 = Report.from_dict(data)["SC10"]
    assert sc10.message == written
    assert render_result(sc10).splitlines()[0] == written.splitlines()[0]
    assert Report.from_dict(json.loads(Report.from_dict(data).to_json()))["SC10"].message == written


def test_a_violation_is_its_outcome_from_the_judgement_to_the_report() -> None:
    v = violated("SC10", expected="the same batches", got="batch 2 differs", context="epoch 0, after 1 batch")
    assert isinstance(v, Outcome) and v.status == "failed" and str(v) == v.message
    assert v.message.splitlines() == [clause("SC10").heading, "Checkpoint: epoch 0, after 1 batch",
                                      "Expected: the same batches", "Got: batch 2 differs"]
    again = pickle.loads(pickle.dumps(v))  # as it crosses from the loader's process
    assert type(again) is ClauseViolation and again.plain() == v.plain()
    result = ClauseResult.of(clause("SC10"), v.plain())
    assert isinstance(result, Outcome) and result.message == v.message
    assert ClauseResult.from_dict(result.to_dict()) == result
