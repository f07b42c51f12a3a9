"""SC22 at the state a step-limited trainer saves at an epoch's end: after the last batch of a pass cut short,
before the trainer's ``break`` and its next ``iter()``; and the trainer's shape ``whole-passes``.

torchtune's recipe (pytorch/torchtune bd2a0fc7, recipes/full_finetune_distributed.py ``train``) with
``max_steps_per_epoch`` below the epoch's steps saves right after the pass's last optimizer step, inside the
pass, and resumes with a new pass: one ``iter()`` on the loaded loader, its batches drawn at once. SC22 drew
every point inside a pass but that one, so a loader wrong only there passed (`zoo.EndsThePassAtTheStepLimit`).
StatefulDataLoader's state there is mid-pass: measured below, its resumed ``iter()`` goes on with that pass
(the uninterrupted run started the next one), so the default tier accepts that resume, or the next pass.

A trainer that runs every pass to its end (Hugging Face's Trainer, transformers 000945a9) never makes the
sequence SC22 judges: declared ``whole-passes``, SC22 is not judged, saying why, and judges nothing alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zoo import EndsThePassAtTheStepLimit, EpochLoader

from stateful_contract import CheckOptions, ConfigSpace, LoaderConfig, check
from stateful_contract.clauses import clause
from stateful_contract.clauses.trainer import CutShort
from stateful_contract.reference import factories
from stateful_contract.search.plans import SavePoints

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,))
SHUFFLED = LoaderConfig(dataset_size=8, batch_size=1, shuffle=True)
#: Passes cut short after 2 batches; the state taken after the last batch of the second pass.
AT_THE_BREAK = CutShort(limit=2, passes=1, into=2)
#: The same pass, a batch before its break (drawn before this point was).
A_BATCH_EARLIER = CutShort(limit=2, passes=1, into=1)


def _torchdata(workers: int, shuffle: bool) -> Any:
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(list(range(10)), batch_size=1, num_workers=workers, shuffle=shuffle,
                              generator=torch.Generator().manual_seed(0) if shuffle else None)


@pytest.mark.parametrize(("workers", "shuffle"), [(0, False), (0, True), (2, True)])
def test_statefuldataloaders_state_after_a_cut_pass_resumes_the_rest_of_that_pass(workers: int, shuffle: bool) -> None:
    """The measurement the default tier rests on (torchdata's StatefulDataLoader, as pinned by the noxfile)."""
    whole = [int(b) for b in _torchdata(workers, shuffle)]
    cut = _torchdata(workers, shuffle)
    it = iter(cut)
    first = [int(next(it)) for _ in range(3)]
    resumed = _torchdata(workers, shuffle)
    resumed.load_state_dict(cut.state_dict())
    assert first + [int(b) for b in resumed] == whole  # the rest of the pass, not a new one


def _draws_at_the_break(saves: SavePoints) -> bool:
    lengths, config = [6, 6, 6], LoaderConfig(dataset_size=12, batch_size=2, grad_acc_step=2)
    seen = []

    @settings(max_examples=80, database=None, deadline=None)
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        plan = clause("SC22").draw_plan(data, lengths, config, saves, IN_PROCESS)
        assert 0 <= plan.into <= plan.limit and plan.limit % saves.window(config) == 0, plan
        seen.append(plan.at_the_break)

    drawn()
    return any(seen)


@pytest.mark.parametrize("saves", [SavePoints(), SavePoints(after_iter=False), SavePoints("window"), SavePoints(3)],
                         ids=["anywhere", "iter-then-next", "window", "every-3"])
def test_sc22_draws_the_state_at_the_break_under_every_trainer_shape_and_policy_that_saves_inside_a_pass(
        saves: SavePoints) -> None:
    assert _draws_at_the_break(saves)


@pytest.mark.parametrize("saves", [SavePoints(), SavePoints(after_iter=False), SavePoints("window"), SavePoints(3)],
                         ids=["anywhere", "iter-then-next", "window", "every-3"])
def test_every_run_of_sc22_checks_the_state_at_the_break_once_first(saves: SavePoints) -> None:
    """The explicit example: a search reaches the point only now and then (it needs a pass before it)."""
    space = ConfigSpace(grad_acc_step=(2, 4))
    ((config, plan_of),) = clause("SC22").explicit_examples(space)
    plan = plan_of([config.dataset_size // config.batch_size], saves)
    assert config.shuffle and plan.at_the_break and plan.passes == 1, plan
    assert plan.limit % saves.window(config) == 0 and plan.limit < config.dataset_size // config.batch_size, plan


def _sc22(factory: Any, plan: CutShort, **options: Any) -> Any:
    return check(factory, clauses=["SC22"], space=IN_PROCESS, replay=(SHUFFLED, plan), **options)


def test_a_loader_wrong_only_at_the_break_fails_sc22_there_and_passes_a_batch_earlier() -> None:
    there = _sc22(EndsThePassAtTheStepLimit, AT_THE_BREAK)["SC22"]
    assert there.status == "failed", there.message
    assert "state taken after the last batch of pass 1 (its second iter()), before the trainer's break" in there.message
    assert "either to go on with the pass the state was taken in" in there.message
    assert "assert_same_stream(next_pass, resumed)" in there.reproduction  # the closer of the two it is told
    earlier = _sc22(EndsThePassAtTheStepLimit, A_BATCH_EARLIER)["SC22"]
    assert earlier.status == "passed", earlier.message


@pytest.mark.parametrize("factory", [factories.stateful_dataloader, EpochLoader],
                         ids=["StatefulDataLoader", "hand-written"])
def test_correct_loaders_pass_at_the_break_going_on_with_the_pass(factory: Any) -> None:
    result = _sc22(factory, AT_THE_BREAK)["SC22"]
    assert result.status == "passed", result.message


class _StartsTheNextPass(EpochLoader):
    """Correct for a trainer that resumes with a new pass: its state after a pass the trainer broke out of is
    the next pass's (as the uninterrupted run's next iter() starts it)."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.pending is None and self.in_progress and self.offset == AT_THE_BREAK.limit:
            return {"epoch": self.epoch + 1, "offset": 0}
        return state


def test_a_resume_into_the_pass_the_uninterrupted_run_started_next_passes_at_the_break() -> None:
    result = _sc22(_StartsTheNextPass, AT_THE_BREAK)["SC22"]
    assert result.status == "passed", result.message


WHOLE_PASSES = "whole-passes"


def test_whole_passes_waives_sc22_saying_why_and_judges_the_other_clauses() -> None:
    report = check(EndsThePassAtTheStepLimit, clauses=["SC03", "SC22"], space=IN_PROCESS, trainer_shape=[WHOLE_PASSES])
    sc22 = report["SC22"]
    assert sc22.status == "not-judged", sc22.message
    assert sc22.message.startswith("does not apply: your trainer runs every pass to its end (StopIteration) "
                                   "before its next iter()") and sc22.message.endswith("(declared)")
    assert report["SC03"].status == "passed" and report.passed
    assert report.trainer_shape == [WHOLE_PASSES]


def test_whole_passes_alone_on_sc22_judges_nothing_and_does_not_pass() -> None:
    report = check(EndsThePassAtTheStepLimit, clauses=["SC22"], space=IN_PROCESS, trainer_shape=WHOLE_PASSES)
    assert report.judged_nothing and not report.passed


def test_whole_passes_is_a_fact_every_face_spells() -> None:
    assert CheckOptions(trainer_shape=f"loads-fresh, {WHOLE_PASSES.upper()}").trainer_shape == (
        "loads-fresh", WHOLE_PASSES)
