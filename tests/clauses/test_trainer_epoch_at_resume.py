"""SC21 resumes a `TrainerView` at the epoch its state holds, as OLMo-core's Trainer does.

OLMo-core's ``NumpyDataLoaderBase`` (olmo_core/data/data_loader.py at allenai/OLMo-core
fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d) keeps ``batches_processed``: ``reshuffle(epoch)`` sets the epoch
(``epoch <= 0`` raises) and leaves the position alone, ``reset()`` sets it back to 0, and the Trainer
(olmo_core/train/trainer.py, same commit) calls ``reshuffle(self.epoch)`` at the top of ``_fit_epoch``,
``reset()`` and ``self.epoch += 1`` after the pass, and saves and restores ``self.epoch``. A state saved after
an epoch's last batch holds that epoch: the Trainer reshuffles it, runs its empty rest and moves on, losing
nothing. SC21 resumed such a state at the next epoch, where this loader has nothing left (its position is
still the epoch's end), and failed it for a run the Trainer does not make (tests/compat/olmo.py's row).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from policy_loaders import ReshufflingLoader

from stateful_contract import ConfigSpace, LoaderConfig, TrainerView, check

ONE_PROCESS = ConfigSpace(num_workers=(0,))


class OLMoLikeLoader(ReshufflingLoader):
    """`ReshufflingLoader`'s epochs with NumpyDataLoaderBase's bookkeeping: the epoch counts from 1,
    ``reshuffle`` keeps the position, only ``reset()`` clears it, and the state holds the epoch too."""

    def reshuffle(self, epoch: int) -> None:
        if epoch <= 0:
            raise ValueError(f"'epoch' must be at least 1, got {epoch}")
        self.epoch = epoch

    def reset(self) -> None:
        self.position = 0

    def _run(self, batches: list[list[int]]) -> Iterator[Any]:
        from torch.utils.data import default_collate

        while self.position < len(batches):
            indices = batches[self.position]
            self.position += 1
            yield default_collate([self.config.dataset[i] for i in indices])

    def state_dict(self) -> dict[str, Any]:
        return {"batches_processed": self.position, "epoch": self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.position = int(state_dict["batches_processed"])
        self.epoch = state_dict["epoch"] or self.epoch


def olmo_trainer(config: LoaderConfig) -> TrainerView:
    return TrainerView(OLMoLikeLoader(config), hook="reshuffle", first_epoch=1, at_pass_end="reset",
                       hook_at_resume="after_load")


def hook_before_load(config: LoaderConfig) -> TrainerView:
    """OLMo-core's loader under a trainer that reshuffles before the load, which OLMo-core's does not: the
    load puts back the epoch the loader's state holds, so a state saved after ``StopIteration`` (the loader's
    epoch ``e``, the trainer's ``e + 1``) resumes on epoch ``e``'s order."""
    return TrainerView(OLMoLikeLoader(config), hook="reshuffle", first_epoch=1, at_pass_end="reset")


class InMemoryOnly(OLMoLikeLoader):
    """Has nowhere to keep an epoch's order but memory: ``reshuffle`` wants ``in_memory=True``, as a
    NumpyDataLoaderBase without a writable ``work_dir`` does (OLMo-core's evaluator passes it)."""

    def reshuffle(self, epoch: int, in_memory: bool = False) -> None:
        if not in_memory:
            raise RuntimeError("no work_dir to write the epoch's order to: call reshuffle(epoch, in_memory=True)")
        super().reshuffle(epoch)


def in_memory_trainer(config: LoaderConfig) -> TrainerView:
    return TrainerView(InMemoryOnly(config), hook="reshuffle", first_epoch=1, at_pass_end="reset",
                       hook_at_resume="after_load", hook_kwargs={"in_memory": True})


def in_memory_forgotten(config: LoaderConfig) -> TrainerView:
    return TrainerView(InMemoryOnly(config), hook="reshuffle", first_epoch=1, at_pass_end="reset",
                       hook_at_resume="after_load")


class ReplaysAFinishedEpoch(OLMoLikeLoader):
    """Loads a state saved at an epoch's end as that epoch's start: the Trainer, resuming at that epoch,
    trains it twice."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if self.epoch is not None and self.position >= len(self.batches(self.epoch)):
            self.position = 0


def replays_a_finished_epoch(config: LoaderConfig) -> TrainerView:
    return TrainerView(ReplaysAFinishedEpoch(config), hook="reshuffle", first_epoch=1, at_pass_end="reset",
                       hook_at_resume="after_load")


def _sc21(factory: Any) -> Any:
    return check(factory, clauses=["SC21"], epoch_hook="reshuffle", profile="dev", space=ONE_PROCESS, jobs=1,
                 isolation="in-process", seed=3)["SC21"]


def test_sc21_passes_the_olmo_trainers_resume_at_the_epoch_its_state_holds() -> None:
    result = _sc21(olmo_trainer)
    assert result.status == "passed", result.message
    assert result.examples > 5


def test_sc21_fails_a_view_that_replays_the_epoch_its_state_holds() -> None:
    """Resumed at the next epoch, as SC21 did, this loader passed; the Trainer resumes where it replays."""
    result = _sc21(replays_a_finished_epoch)
    assert result.status == "failed", result.status
    assert "resumed at epoch 0 (the trainer's state holds epoch 0" in result.message, result.message
    assert "replayed" in result.got and result.impact is not None and result.impact.kind == "silent", result.got


def _all(factory: Any) -> Any:
    return check(factory, epoch_hook="reshuffle", profile="dev", space=ONE_PROCESS, jobs=1,
                 isolation="in-process", seed=3)


def test_olmo_cores_loader_passes_every_clause_when_the_view_reshuffles_after_the_load_as_its_trainer_does() -> None:
    report = _all(olmo_trainer)
    assert report.passed, [(r.id, r.status, r.message) for r in report.results if r.is_failure]
    assert report["SC10"].status == "passed" and report["SC21"].status == "passed"


def test_reshuffled_before_the_load_the_loaders_own_epoch_wins_and_the_next_epoch_replays_the_last() -> None:
    """The order OLMo-core's Trainer does not use fails this loader (a state saved after ``StopIteration``,
    loaded into a used loader or after a pass cut short, resumes on the finished epoch's order), as it failed
    the real one in the row: a trainer's view must follow the trainer's order."""
    report = _all(hook_before_load)
    failed = {r.id: r for r in report.results if r.is_failure}
    assert {"SC20", "SC22"} <= set(failed), {r.id: r.status for r in report.results}
    assert "same samples, another order" in failed["SC20"].got, failed["SC20"].got


def test_the_hooks_keyword_arguments_reach_every_call() -> None:
    assert _sc21(in_memory_trainer).status == "passed"
    # Without them the trainer's first reshuffle raises: two fresh loaders cannot even be compared.
    forgotten = _all(in_memory_forgotten)["SC18"]
    assert forgotten.status == "failed" and "in_memory=True" in forgotten.message, forgotten.message


@pytest.mark.parametrize("hook_at_resume", ["after_load", "before_load"])
def test_olmo_cores_real_loader_resumed_after_stop_iteration_as_its_trainer_resumes(hook_at_resume: str,
                                                                                   tmp_path: Path) -> None:
    """The compatibility row's loader (the `matrix` session installs OLMo-core): a state saved after epoch 1's
    ``StopIteration`` holds the loader's epoch 1 and the trainer's epoch 2. Reshuffled after the load, as the
    Trainer does, the resume yields epoch 2's order; before it, the load puts epoch 1 back and the order is
    read from epoch 1's file in ``work_dir``: the finished epoch again (what failed the row's first view)."""
    pytest.importorskip("olmo_core")
    from tests.compat.olmo import olmo_fsl, olmo_fsl_loader

    config = LoaderConfig(dataset_size=12, batch_size=2, seed=5, shuffle=True)
    trained = olmo_fsl(config, work_dir=tmp_path)  # the test's, as a Trainer's work_dir is its run's
    first = [b["index"].tolist() for b in trained]
    state = trained.state_dict()
    second = [b["index"].tolist() for b in trained]
    assert state["epoch"] == 1 and state["loader"]["epoch"] == 1 and first != second
    resumed = TrainerView(olmo_fsl_loader(config, work_dir=tmp_path), hook="reshuffle", first_epoch=1,
                          at_pass_end="reset", hook_at_resume=hook_at_resume)
    resumed.load_state_dict(state)
    got = [b["index"].tolist() for b in resumed]
    assert got == (second if hook_at_resume == "after_load" else first)
