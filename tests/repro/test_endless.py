"""Endless streams, judged natively: a loader whose passes never end is recognised on its first pass and
checked as one stream; the clauses that need a pass to end say they do not apply."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
import zoo
import zoo_kills
from charged import run as run_charged

from stateful_contract import ConfigSpace, LoaderConfig, Report, check
from stateful_contract.faces.badge import badge_message
from stateful_contract.faces.export import markdown_summary
from stateful_contract.faces.replay import replay
from stateful_contract.report.render import render_report
from stateful_contract.repro.steps import Position
from stateful_contract.run.options import CheckOptions, OptionError
from stateful_contract.search.plans import Checkpoint

IN_PROCESS = ConfigSpace(num_workers=(0,))
ROOT = Path(__file__).resolve().parents[2]
#: Clauses that need a pass to end (docs/clauses.md, "Endless streams").
NOT_ON_ENDLESS = ("SC21", "SC22")


def test_a_cycling_loader_is_found_endless_and_passes_the_resume_clauses_with_no_declaration() -> None:
    report = check(zoo.CyclingLoader, clauses=["SC03", "SC10", "SC21"], space=IN_PROCESS)
    assert report.endless == "found" and report.passed, [r.message for r in report.results if r.is_failure]
    for cid in ("SC03", "SC10"):
        assert report[cid].status == "passed", report[cid].message
    sc21 = report["SC21"]
    assert sc21.status == "not-judged" and sc21.message.startswith("does not apply to an endless stream"), sc21.message
    out = io.StringIO()
    render_report(report, out)
    assert "endless stream (found: its first pass never ended)" in out.getvalue()
    assert "SC21 does not apply to an endless stream" in out.getvalue()
    assert "Verdict: PASS" in out.getvalue()
    assert "endless stream (found)" in markdown_summary(report)
    assert badge_message(report).endswith("endless stream")


@pytest.mark.acceptance
def test_a_cycling_loader_passes_the_default_profile() -> None:
    report = check(zoo.CyclingLoader)
    assert report.passed and report.endless == "found", [r.message for r in report.results if r.is_failure]
    for cid in NOT_ON_ENDLESS:
        assert "does not apply to an endless stream" in report[cid].message


def test_a_worker_count_change_is_judged_on_an_endless_stream() -> None:
    """SC23 did not apply to an endless stream: a cycling loader resumed with another num_workers (DeepSpeed's
    RepeatingLoader, Megatron's cyclic loader, a trainer restarted on a host with fewer cores) went unjudged."""
    broken = check(zoo.EndlessRescalesOffsetByWorkers, clauses=["SC23"], space=zoo_kills.space_for("SC23"),
                   profile="dev", seed=0)["SC23"]
    assert broken.status == "failed", broken.message
    assert broken.impact is not None and broken.impact.kind == "silent", broken.impact
    assert "num_workers" in broken.context, broken.context
    correct = check(zoo.Endless, clauses=["SC23"], space=zoo_kills.space_for("SC23"), profile="dev", seed=0,
                    endless=True)["SC23"]
    assert correct.status == "passed", correct.message
    # An order that depends on num_workers: no epoch end in the stream to count the samples still due to.
    ordered = check(EndlessWorkerOrdered, clauses=["SC23"], space=zoo_kills.space_for("SC23"), profile="dev",
                    seed=0, endless=True)["SC23"]
    assert ordered.status == "not-judged" and "order depends on num_workers" in ordered.message, ordered.message


class EndlessWorkerOrdered(zoo.WorkerOrderedEpochs, zoo.Endless):
    """The zoo's `WorkerOrderedEpochs` (its epoch order depends on num_workers), cycling without end."""


def _sc10(config: LoaderConfig, position: Position) -> Report:
    return check(zoo.EndlessWindowLosesBuffer, clauses=["SC10"], replay=(config, Checkpoint(position)))


def test_an_endless_window_wrapper_that_loses_its_buffer_fails_sc10_with_the_samples_lost() -> None:
    # Epochs of 3 batches, windows of 2: the second window is batches 2 of epoch 0 and 0 of epoch 1 of the
    # base loader. After 3 batches the state is taken inside it, where the base loader has rolled over.
    config = LoaderConfig(dataset_size=3, batch_size=1, grad_acc_step=2, endless=True)
    sc10 = _sc10(config, Position(0, 3))["SC10"]
    assert sc10.status == "failed", sc10.message
    assert sc10.impact is not None and sc10.impact.counts == {"lost": 1}, sc10.impact
    assert "inside a grad-acc window of 2 that spans an epoch boundary" in sc10.context, sc10.context
    # Epochs of 5, windows of 4: the second holds batch 4 of epoch 0 and 0-2 of epoch 1. After its first batch,
    # still in epoch 0, the base loader has already rolled over into epoch 1: the window's other 3 are lost.
    before = _sc10(LoaderConfig(dataset_size=5, batch_size=1, grad_acc_step=4, endless=True), Position(0, 5))["SC10"]
    assert before.status == "failed" and before.impact is not None and before.impact.counts == {"lost": 3}, (
        before.impact, before.message)
    # At a window boundary nothing is buffered: exact.
    assert _sc10(config, Position(0, 4))["SC10"].status == "passed"


@zoo_kills.group(zoo.EndlessWindowLosesBuffer)
def test_the_search_finds_the_lost_buffer_and_its_reproduction_replays(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    report = zoo_kills.killed(tmp_path_factory, zoo.EndlessWindowLosesBuffer)  # test_clauses' search
    sc10 = report["SC10"]
    assert report.endless == "found" and sc10.status == "failed", sc10.message
    assert sc10.impact is not None and sc10.impact.counts.get("lost", 0) >= 1, sc10.impact
    assert "endless=True" in sc10.reproduction and "Position(epoch=0, batches=" in sc10.reproduction
    script = tmp_path / "repro.py"
    script.write_text(sc10.reproduction)
    run = run_charged([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT,
                      env={"PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert run.returncode != 0 and "AssertionError" in run.stderr, run.stderr[-2000:]
    # `stateful-contract replay` runs the recorded example again, as an endless stream.
    again = replay(report, "SC10", target=f"{ROOT / 'tests' / 'zoo.py'}:EndlessWindowLosesBuffer")
    assert again.endless == "found" and again["SC10"].status == "failed", again["SC10"].message
    assert again["SC10"].impact == sc10.impact
    # The report keeps the endless stream; an older report (no field) still loads.
    data = json.loads(report.to_json())
    assert data["endless"] == "found"
    del data["endless"]
    assert Report.from_dict(data).endless is None


def test_a_declared_endless_loader_that_ends_a_pass_fails_saying_so() -> None:
    report = check(zoo.epoch_loader, clauses=["SC18"], endless=True, space=IN_PROCESS)
    sc18 = report["SC18"]
    assert report.endless == "declared" and sc18.status == "failed", sc18.message
    assert "ended with StopIteration" in sc18.got and "endless" in sc18.expected, sc18.message
    assert sc18.impact is not None and sc18.impact.kind == "loud", sc18.impact


def test_endless_and_the_epoch_end_policy_exclude_each_other() -> None:
    with pytest.raises(OptionError, match="has no epoch end"):
        CheckOptions(endless=True, checkpoint_alignment="epoch")


def test_a_run_where_no_clause_applies_to_the_endless_stream_does_not_pass() -> None:
    report = check(zoo.CyclingLoader, clauses=["SC21"], space=IN_PROCESS)
    assert report["SC21"].status == "not-judged"
    assert not report.passed and report.judged_nothing and report.verdict == "not-judged"
    out = io.StringIO()
    render_report(report, out)
    assert "Verdict: NOT JUDGED (no clause came to a verdict" in out.getvalue() and "PASS" not in out.getvalue()
    assert badge_message(report) == "not judged"


def test_endless_is_declared_from_the_command_line_and_the_mixin(tmp_path: Path) -> None:
    from stateful_contract.faces.cli import main
    from stateful_contract.faces.testing import StatefulLoaderContract, class_options

    # As a user runs it: the report says the stream was declared endless, not found so.
    report = tmp_path / "report.json"
    main(["check", f"{ROOT / 'tests' / 'zoo.py'}:CyclingLoader", "--endless", "--clause", "SC01", "--in-process",
          "--quiet", "--json", str(report)])
    assert Report.from_json(report).endless == "declared"

    class Declared(StatefulLoaderContract):
        endless = True

    assert class_options(Declared).endless is True


def test_the_quickstart_endless_section_runs_as_written(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    section = text.split("## An endless loader", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the section shows its factory and its check"
    namespace: dict[str, object] = {}
    exec(compile("\n".join(blocks), "<quickstart endless>", "exec"), namespace)
    report = namespace["report"]
    assert isinstance(report, Report) and report.endless == "found" and report.passed


def test_the_clause_reference_says_for_every_clause_whether_it_applies_to_an_endless_stream() -> None:
    from stateful_contract.clauses.registry import all_clauses

    text = (ROOT / "docs" / "clauses.md").read_text()
    for c in all_clauses():
        how = (f"does not apply: {c.not_on_endless}" if c.not_on_endless else
               f"not judged: {c.not_judged_on_endless}" + (f"; judged where `{c.endless_with}` is declared"
                                                           if c.endless_with else "")
               if c.not_judged_on_endless else "judged")
        assert f"| {c.id} {c.name} | {how} |" in text, f"docs/clauses.md, Endless streams: the row of {c.id}"


def test_an_endless_loader_under_the_epoch_end_policy_fails_instead_of_passing_unjudged() -> None:
    # A trainer that saves only at epoch ends never saves on a stream that has none: the first clause that
    # meets the endless pass keeps its failure, no clause is judged as if on a stream.
    report = check(zoo.CyclingLoader, clauses=["SC10"], checkpoint_alignment="epoch", space=IN_PROCESS)
    assert report.endless is None and not report.passed
    assert report["SC18"].status == "failed" and "looks endless" in report["SC18"].got, report["SC18"].message
