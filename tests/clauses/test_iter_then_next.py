"""The trainer's shape ``iter-then-next``: a trainer that draws each pass's first batch at once after its
``iter()`` never saves between the two, so no checkpoint is drawn there; every other point still is.

Every anchor trainer of docs/clauses.md ("Trainer shapes", column (b)) has it: Lightning's fetcher prefetches
a batch inside ``iter()``, torchtitan's and OLMo-core's batch generators call ``iter()`` at their first
``next()``. `zoo.LazyNewPass` is litdata's F23 modelled (its position moves at a pass's first batch, not at
``iter()``): SC22 fails it only right after such an ``iter()``, so it passes once the shape is declared. A
loader with the same laziness that also resumes a batch late mid-pass still fails: the declaration narrows
the points drawn, it hides no harm at the points the trainer does save at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zoo import LazyNewPass, OffByOneResume

from stateful_contract import CheckOptions, ConfigSpace, LoaderConfig, Report, check
from stateful_contract.clauses import CLAUSES, clause
from stateful_contract.clauses.trainer import CutShort
from stateful_contract.faces.badge import badge_message
from stateful_contract.faces.cli import main
from stateful_contract.faces.export import markdown_summary
from stateful_contract.reference import factories
from stateful_contract.report.render import coverage_line
from stateful_contract.repro.steps import Position
from stateful_contract.search.epoch_plans import epoch_loop_plan
from stateful_contract.search.plans import SavePoints, draw_position, hops_plan, state_calls_plan

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,))
SHAPE = "iter-then-next"
NEVER_AFTER_ITER = SavePoints(after_iter=False)
#: The clauses whose plans draw a checkpoint right after an iter() without the declaration.
DRAWN_THERE = ["SC10", "SC11", "SC14", "SC21", "SC22"]


def _draws(clause_id: str, data: st.DataObject, lengths: list[int], config: LoaderConfig, saves: SavePoints) -> Any:
    return clause(clause_id).draw_plan(data, lengths, config, saves, IN_PROCESS)


def _right_after_an_iter(plan: Any, lengths: list[int]) -> bool:
    """Whether ``plan`` takes a state right after an ``iter()``, before that pass's first batch."""
    if isinstance(plan, CutShort):
        return plan.into == 0
    if hasattr(plan, "kind") and hasattr(plan, "point"):  # SC21's loop: a point of its epoch
        return plan.point(lengths[plan.epoch]).kind() == "after iter()"
    positions = [getattr(plan, name) for name in ("position",) if isinstance(getattr(plan, name, None), Position)]
    return any(p.kind(lengths) == "after iter()" for p in positions) or any(getattr(plan, "after_iter", ()))


@pytest.mark.parametrize("endless", [False, True])
def test_no_plan_draws_a_checkpoint_right_after_an_iter_under_the_declaration_and_each_does_without(
        endless: bool) -> None:
    lengths = [4] if endless else [3, 0, 4, 2, 1, 5]
    config = LoaderConfig(dataset_size=8, batch_size=2, grad_acc_step=1, num_workers=2, endless=endless)
    seen_without: set[str] = set()

    @settings(max_examples=60, database=None, deadline=None)
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        for c in CLAUSES:
            if not c.has_plan or (endless and c.not_on_endless):
                continue
            plan = _draws(c.id, data, lengths, config, NEVER_AFTER_ITER)
            assert not _right_after_an_iter(plan, lengths), (c.id, plan)
            if _right_after_an_iter(_draws(c.id, data, lengths, config, SavePoints()), lengths):
                seen_without.add(c.id)
        p = draw_position(data, lengths, config, NEVER_AFTER_ITER)
        assert p.kind(lengths) != "after iter()", p
        assert not any(hops_plan(data, lengths, config, NEVER_AFTER_ITER).after_iter)
        calls = state_calls_plan(data, lengths, config, NEVER_AFTER_ITER)
        opened = {0} if endless else {sum(n + 2 for n in lengths[:e]) for e in range(3)}  # each pass: n + 2 steps
        assert calls.at and not set(calls.at) & opened, calls
        if not endless:
            loop = epoch_loop_plan(data, lengths, config, NEVER_AFTER_ITER)
            assert loop.point(lengths[loop.epoch]).kind() != "after iter()", loop

    drawn()
    # Without the declaration those points are drawn, StatefulDataLoader's semantics (torchdata PR #1368).
    assert {"SC10", "SC11", *(() if endless else ("SC22",))} <= seen_without, seen_without


def test_every_other_point_is_still_drawn() -> None:
    """Mid-pass, after the last batch, after StopIteration and before the first iter() all stay reachable."""
    lengths, config = [3, 4], LoaderConfig(dataset_size=6, batch_size=2)
    kinds: set[str] = set()
    cut_into: set[int] = set()

    @settings(max_examples=200, database=None, deadline=None)
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        kinds.add(draw_position(data, lengths, config, NEVER_AFTER_ITER).kind(lengths))
        cut_into.add(_draws("SC22", data, lengths, config, NEVER_AFTER_ITER).into)

    drawn()
    assert kinds == {"before iter()", "mid-epoch", "after the last batch", "after StopIteration"}, kinds
    # Windows into a cut-short pass of at most 3, never 0; 3 is after its last batch, before the break.
    assert cut_into == {1, 2, 3}, cut_into


def test_a_loader_lazy_only_right_after_iter_fails_sc22_undeclared_and_passes_declared() -> None:
    judged = ["SC13", "SC22"]  # SC22 fails it; SC13's plans are points the coverage line counts
    undeclared = check(LazyNewPass, clauses=judged, profile="dev", seed=0, space=IN_PROCESS, isolation="in-process")
    assert undeclared["SC22"].status == "failed", undeclared["SC22"].message
    assert "state taken after iter() of pass" in undeclared["SC22"].message
    assert "not drawn" not in coverage_line(undeclared)

    declared = check(LazyNewPass, clauses=judged, profile="dev", seed=0, space=IN_PROCESS, isolation="in-process",
                     trainer_shape=SHAPE)
    assert {r.id: r.status for r in declared.results if r.id in judged} == dict.fromkeys(judged, "passed")
    assert declared.verdict == "pass" and declared.trainer_shape == [SHAPE]
    # Shown as not drawn: the coverage line says so, the notes say what was declared.
    assert "not drawn: epoch-start (right after iter(), before the pass's first batch" in coverage_line(declared)
    assert any(n.startswith(f"declared: the trainer's shape is {SHAPE}") for n in declared.notes)
    assert not any(k.endswith("/epoch-start/h0") for r in declared.results for k in r.coverage)
    # Not a default pass: the badge and the Markdown say what was declared.
    assert badge_message(declared) == f"passing, trainer {SHAPE}"
    assert f"declared trainer {SHAPE}" in markdown_summary(declared)


class LazyAndResumesLate(LazyNewPass, OffByOneResume):
    """F23's laziness right after iter(), and a resume one batch late mid-pass: a batch lost at a save point
    every trainer has."""


def test_the_declaration_hides_no_harm_at_the_points_a_trainer_saves_at() -> None:
    report = check(LazyAndResumesLate, clauses=["SC10", "SC22"], profile="dev", seed=0, space=IN_PROCESS,
                   isolation="in-process", trainer_shape=SHAPE)
    for cid in ("SC10", "SC22"):
        assert report[cid].status == "failed", report[cid].message
        assert "after iter()" not in report[cid].message.split("Checkpoint:")[1].splitlines()[0]
    assert report.verdict == "fail"


def test_the_declaration_reads_from_every_face_and_its_report_loads_again(tmp_path: Path) -> None:
    assert CheckOptions(trainer_shape=f"loads-fresh, {SHAPE.upper()}").trainer_shape == ("loads-fresh", SHAPE)
    assert CheckOptions(trainer_shape=SHAPE).save_points == NEVER_AFTER_ITER
    assert CheckOptions(trainer_shape=SHAPE, checkpoint_alignment="window").save_points == SavePoints(
        "window", after_iter=False)
    assert CheckOptions().save_points == SavePoints()  # nothing declared: StatefulDataLoader's semantics
    # No clause is waived by it: it narrows the points drawn, every clause still judges.
    assert [c.id for c in CLAUSES if c.waived(CheckOptions(trainer_shape=SHAPE).declarations)] == []
    path = tmp_path / "report.json"
    assert main(["check", "stateful_contract.reference.factories:stateful_dataloader", "--trainer-shape", SHAPE,
                 "--clause", "SC01", "--in-process", "--quiet", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["trainer_shape"] == [SHAPE]
    assert Report.from_json(path).trainer_shape == [SHAPE]


@pytest.mark.acceptance  # whole searches of a correct loader
def test_statefuldataloader_passes_with_the_declaration_as_without() -> None:
    report = check(factories.stateful_dataloader, clauses=DRAWN_THERE, space=IN_PROCESS, trainer_shape=SHAPE)
    assert report.verdict == "pass", {r.id: r.message for r in report.results if r.status != "passed"}
