"""The trainer's checkpoint policy (`--checkpoint-alignment epoch|window|N`): where the loader must be exact.

A loader that saves only at epoch ends (`policy_loaders.EpochEndOnly`, torchtune's recipes) fails mid-epoch
checkpoints and passes once the policy is declared, from every face; a clause whose every checkpoint the
policy excludes is not judged, saying why, and a run that judged nothing does not pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stateful_contract import CLAUSES, ClauseResult, ConfigSpace, LoaderConfig, Report, check
from stateful_contract.faces.badge import badge_message
from stateful_contract.faces.cli import main
from stateful_contract.faces.export import markdown_summary
from stateful_contract.report.render import render_report
from stateful_contract.run.options import CheckOptions, OptionError
from stateful_contract.search.epoch_plans import epoch_loop_plan
from stateful_contract.search.plans import Hops, SavePoints, draw_position, hops_plan, state_calls_plan

TARGET = "policy_loaders:epoch_end_only"  # tests/ is on sys.path (conftest.py)
#: The resume clauses whose examples a mid-epoch checkpoint fails, SC21's loop, and SC22 (inside a pass only).
CLAUSES_RUN = "SC10,SC11,SC13,SC21,SC22"


def cli(*args: str) -> int:
    return main(["check", TARGET, "--quiet", "--profile", "dev", "--clause", CLAUSES_RUN, "--jobs", "1", *args])


def test_a_loader_that_saves_only_at_epoch_ends_fails_without_the_policy_and_passes_with_it(tmp_path: Path,
                                                                                           capsys) -> None:
    assert cli("--json", str(tmp_path / "none.json")) == 1
    undeclared = Report.from_json(tmp_path / "none.json")
    assert {"SC10", "SC11", "SC13", "SC21"} <= {r.id for r in undeclared.results if r.status == "failed"}
    capsys.readouterr()

    assert cli("--checkpoint-alignment", "epoch", "--json", str(tmp_path / "epoch.json"),
               "--markdown", str(tmp_path / "epoch.md")) == 0
    out = capsys.readouterr().out
    assert "declared checkpoint policy: checked at epoch ends (after each pass's StopIteration)" in out
    assert "Verdict: PASS" in out
    data = json.loads((tmp_path / "epoch.json").read_text())
    assert data["checkpoint_alignment"] == "epoch" and data["verdict"] == "pass"
    status = {c["id"]: c for c in data["clauses"]}
    assert all(status[cid]["status"] == "passed" for cid in ("SC10", "SC11", "SC13", "SC21"))
    # SC22 checkpoints only inside passes cut short: not a failure, and not a pass of nothing.
    assert status["SC22"]["status"] == "not-judged"
    assert status["SC22"]["message"].startswith("does not apply under the declared checkpoint policy")
    assert "checked at epoch ends" in (tmp_path / "epoch.md").read_text()


def test_the_policy_is_the_same_from_python_and_the_mixin_and_spelled_once() -> None:
    for given_, parsed in (("epoch", "epoch"), (" Epoch ", "epoch"), ("window", "window"), ("4", 4), (4, 4),
                           (None, None)):
        assert CheckOptions(checkpoint_alignment=given_).checkpoint_alignment == parsed
    for bad in ("epochs", "0", 0, -2, 2.5, True):
        with pytest.raises(OptionError, match=r"takes 'epoch' .* 'window' .* whole number of batches"):
            CheckOptions(checkpoint_alignment=bad)


def test_an_endless_stream_has_no_epoch_end_to_checkpoint_at() -> None:
    with pytest.raises(OptionError, match="needs passes that end"):
        CheckOptions(checkpoint_alignment="epoch", endless=True)


def test_every_position_drawn_under_the_epoch_policy_is_an_epoch_end() -> None:
    lengths, config = [3, 0, 4, 2, 5, 1], LoaderConfig(grad_acc_step=2, num_workers=2)
    epoch_ends = SavePoints("epoch")

    @settings(max_examples=200, database=None)
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        p = draw_position(data, lengths, config, epoch_ends)
        assert (p.before_iter and p.epoch == 0) or (p.after_stop and p.batches == lengths[p.epoch])
        hops = hops_plan(data, lengths, config, epoch_ends)
        assert isinstance(hops, Hops) and not hops.after_iter and len(hops.passes) == len(hops.stops)
        ends = {sum(lengths[:e + 1]) for e in range(len(lengths))} | {0}
        assert set(hops.stops) <= ends
        calls = state_calls_plan(data, lengths, config, epoch_ends)
        after_stops = {sum(n + 2 for n in lengths[:e + 1]) - 1 for e in range(3)}  # each epoch: n + 2 steps
        assert calls.epoch_ends and set(calls.at) <= after_stops
        assert epoch_loop_plan(data, lengths, config, epoch_ends).kind == "after StopIteration"

    drawn()


def test_every_worker_change_drawn_under_a_window_policy_is_at_a_window_boundary() -> None:
    """SC23 moves a checkpoint drawn before epoch 0's first batch to one after some batches: it chose any count,
    so under ``--checkpoint-alignment window`` (Hugging Face's Trainer saves after an optimizer step) it failed a
    loader exact at every window boundary, at a mid-window point the trainer never saves at."""
    lengths, config = [5, 5, 5, 5, 5, 5], LoaderConfig(grad_acc_step=2, num_workers=0)
    sc23 = next(c for c in CLAUSES if c.id == "SC23")

    @settings(max_examples=200, database=None)
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        change = sc23.draw_plan(data, lengths, config, SavePoints("window"))
        assert change is not None
        p = change.position
        assert p.batches % 2 == 0 or p.batches == lengths[p.epoch], p
        assert p.epoch or p.batches, p  # the point of the redraw: at least one batch before the checkpoint

    drawn()


def _report(alignment: str | None, statuses: dict[str, str]) -> Report:
    results = [ClauseResult(statuses.get(c.id, "skipped"), id=c.id, name=c.name, tier=c.tier)  # type: ignore[arg-type]
               for c in CLAUSES]
    return Report(target="pkg:factory", results=results, checkpoint_alignment=alignment)


@pytest.mark.parametrize(("alignment", "words"), [("epoch", "checked at epoch ends"),
                                                  ("window", "checked at window boundaries"),
                                                  ("3", "checked every 3 batches")])
def test_a_declared_policy_shows_in_the_text_the_markdown_and_the_badge(alignment: str, words: str, capsys) -> None:
    report = _report(alignment, {"SC10": "passed"})
    render_report(report, __import__("sys").stdout)
    assert words in capsys.readouterr().out
    assert words in markdown_summary(report)
    assert badge_message(report) == f"passing, {words}"
    assert Report.from_dict(json.loads(report.to_json())).checkpoint_alignment == alignment


def test_a_run_that_judged_nothing_does_not_pass(capsys) -> None:
    report = _report("epoch", {"SC22": "not-judged"})
    assert report.judged_nothing and not report.passed and report.verdict == "not-judged"
    render_report(report, __import__("sys").stdout)
    assert "Verdict: NOT JUDGED (no clause came to a verdict" in capsys.readouterr().out
    assert badge_message(report) == "not judged"


def test_a_policy_that_excludes_the_only_clause_selected_judges_nothing_and_says_so() -> None:
    report = check(TARGET, clauses=["SC22"], checkpoint_alignment="epoch", profile="dev", jobs=1,
                   space=ConfigSpace(num_workers=(0,)))
    assert report["SC22"].status == "not-judged" and not report.passed


def test_the_mixin_declares_the_policy_as_a_class_attribute() -> None:
    from stateful_contract.faces.testing import StatefulLoaderContract, class_options

    class TestEpochEnds(StatefulLoaderContract):
        checkpoint_alignment = "epoch"

    class TestEveryFour(StatefulLoaderContract):
        checkpoint_alignment = 4

    assert class_options(TestEpochEnds).checkpoint_alignment == "epoch"
    assert class_options(TestEveryFour).checkpoint_alignment == 4


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("workers", [0, 2])
def test_statefuldataloader_resumes_one_epoch_end_point_after_stop_iteration_or_after_the_next_iter(
        workers: int) -> None:
    """The measurement docs/clauses.md ("Epoch ends are one point") states: after StopIteration, the same state
    taken later, and after the next iter() (no batch) resume alike; after the last batch comes one empty pass."""
    config = LoaderConfig(dataset_size=6, batch_size=2, shuffle=True, seed=3, num_workers=workers)

    def fresh() -> Any:
        torch.manual_seed(config.seed)  # as the contract does before every factory call
        return config.stateful_dataloader()

    def resumed(state: dict[str, Any]) -> list[list[list[int]]]:
        loader = fresh()
        loader.load_state_dict(state)
        return [[b["index"].tolist() for b in loader] for _ in range(2)]

    def epoch(loader: Any) -> list[list[int]]:
        return [b["index"].tolist() for b in loader]

    reference = fresh()
    epochs = [epoch(reference) for _ in range(3)]
    loader = fresh()
    it = iter(loader)
    for _ in range(3):
        next(it)
    after_last_batch = loader.state_dict()
    with pytest.raises(StopIteration):
        next(it)
    after_stop, again = loader.state_dict(), loader.state_dict()
    iter(loader)
    after_next_iter = loader.state_dict()
    assert resumed(after_stop) == resumed(again) == resumed(after_next_iter) == epochs[1:3]
    assert resumed(after_last_batch) == [[], epochs[1]]  # one empty pass first: not an epoch end
