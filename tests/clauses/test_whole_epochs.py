"""SC42 (an uninterrupted epoch yields each sample of the config's dataset once) and impacts counted against
what was trained.

The zoo's `FirstPassStartsLate` is killed by SC42 in `test_clauses` (`zoo.KILLS`), with its impact in
`test_impact`; here: what torchdata's `StatefulDataLoader` does (so every correct loader passes), MindSpeed-MM's
F28 shape, several ranks, endless streams.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import zoo

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.clauses import clause
from stateful_contract.reference import factories
from stateful_contract.repro import assert_each_sample_once, uninterrupted
from stateful_contract.repro.whole_epochs import allowances, epochs_by_sample, tally
from tests import mindspeed_production as production

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,))


def _world_tally(config: LoaderConfig) -> list[Any]:
    """Every rank's uninterrupted epochs of torchdata's loader on ``config``'s world, counted together."""
    ranks = []
    for rank in range(config.world_size):
        reference, lengths = uninterrupted(factories.stateful_dataloader, LoaderConfig(**{**vars(config), "rank": rank}))
        epochs = epochs_by_sample(reference, lengths)
        assert epochs is not None
        ranks.append(epochs)
    return tally(ranks, config)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_statefuldataloader_keeps_every_epoch_within_drop_last_and_padding(world_size: int) -> None:
    """The measurement docs/clauses.md states (here without workers; the bound is reached, never passed):
    under drop_last an epoch lacks up to world_size x batch_size - 1 samples, else none; it repeats at most
    the DistributedSampler's padding."""
    worst_missing = worst_repeated = 0
    for n, b, shuffle, drop_last in itertools.product(range(1, 16), (1, 2, 5), (False, True), (False, True)):
        config = LoaderConfig(dataset_size=n, batch_size=b, shuffle=shuffle, drop_last=drop_last,
                              world_size=world_size)
        for epoch in _world_tally(config):
            assert epoch.holds(), (config, epoch.describe())
            worst_missing = max(worst_missing, epoch.lost if drop_last else 0)
            worst_repeated = max(worst_repeated, epoch.extra)
            assert drop_last or not epoch.lost
    assert worst_missing == world_size * 5 - 1  # the bound is tight: a smaller one would fail torchdata
    assert worst_repeated == world_size - 1


def test_allowances_are_drop_last_tails_and_padding() -> None:
    assert allowances(LoaderConfig(dataset_size=10, batch_size=3)) == (0, 0)
    assert allowances(LoaderConfig(dataset_size=10, batch_size=3, drop_last=True)) == (2, 0)
    assert allowances(LoaderConfig(dataset_size=7, batch_size=3, world_size=2)) == (0, 1)
    assert allowances(LoaderConfig(dataset_size=7, batch_size=3, world_size=2, drop_last=True)) == (5, 1)
    assert allowances(LoaderConfig(dataset_size=2, batch_size=4, world_size=3, drop_last=True)) == (2, 1)


@pytest.mark.parametrize("factory", [factories.stateful_dataloader, factories.reference_wrapper, zoo.epoch_loader],
                         ids=["StatefulDataLoader", "PrefetchGradAccDataLoader", "hand-written"])
def test_correct_loaders_pass(factory: Any) -> None:
    result = check(factory, clauses=["SC42"], strict=True, space=IN_PROCESS)["SC42"]
    assert result.status == "passed" and result.examples >= 20, result.message


def test_statefuldataloader_with_workers_passes() -> None:
    result = check(factories.stateful_dataloader, clauses=["SC42"], strict=True,
                   space=ConfigSpace(num_workers=(2,)), profile="dev", seed=1)["SC42"]
    assert result.status == "passed" and result.examples >= 2, result.message


def test_the_first_pass_that_starts_late_fails_with_the_samples_never_trained() -> None:
    result = check(zoo.FirstPassStartsLate, clauses=["SC42"], strict=True, space=IN_PROCESS)["SC42"]
    assert result.status == "failed" and result.id == "SC42"
    assert result.impact is not None and result.impact.describe() == "silent: 1 sample of epoch 0 never trained"
    assert "1 never (sample 0)" in result.got, result.got
    assert result.reproduction.rstrip().endswith("assert_each_sample_once(reference, lengths, config)")
    with pytest.raises(AssertionError, match="epoch 0 yielded 0 of the 1 samples"):
        exec(compile(result.reproduction, "<reproduction>", "exec"), {})


class _UncyclicPositional(production.ProposedFixWrapper):
    """MindSpeed-MM's wrapper in ``cyclic=False`` (F28) over its production loader, with the bug report's
    positional load (so a resume clause can load it at all)."""

    def __init__(self, config: LoaderConfig) -> None:
        super().__init__(production.production_loader(config), config.grad_acc_step, cyclic=False)


#: F28's configuration: 10 samples, micro-batch 2, one window, in order (the issue's numbers).
F28_SPACE = ConfigSpace(dataset_size=(10, 10), batch_size=(2, 2), grad_acc_step=(1, 1))


def test_mindspeed_uncyclic_wrapper_with_workers_fails_sc42_with_the_eight_samples_of_f28() -> None:
    report = check(_UncyclicPositional, clauses=["SC42"], strict=True, profile="dev", seed=0,
                   space=ConfigSpace(**{**vars(F28_SPACE), "num_workers": (2,)}))
    result = report["SC42"]
    assert result.status == "failed", result.message
    assert result.impact is not None and result.impact.describe() == "silent: 8 samples of epoch 0 never trained"
    assert "epoch 0 yielded 2 of the 10 samples" in result.got, result.got


def test_mindspeed_uncyclic_wrapper_without_workers_passes() -> None:
    report = check(_UncyclicPositional, clauses=["SC42"], strict=True, profile="dev", seed=0,
                   space=ConfigSpace(**{**vars(F28_SPACE), "num_workers": (0,)}))
    assert report["SC42"].status == "passed", report["SC42"].message


def test_a_repeat_beyond_the_padding_fails_and_the_padding_does_not() -> None:
    config = LoaderConfig(dataset_size=5, batch_size=2, world_size=2)
    padded = [[[0, 2, 4]], [[1, 3, 0]]]  # DistributedSampler's: sample 0 again on rank 1
    assert all(t.holds() for t in tally(padded, config))
    twice = [[[0, 2, 4]], [[1, 3, 0, 2]]]
    (epoch,) = tally(twice, config)
    assert not epoch.holds() and epoch.extra == 2
    assert epoch.describe().endswith("2 more than once (0 x2, 2 x2)")


def test_on_several_ranks_the_union_of_the_ranks_is_judged() -> None:
    """Each rank alone is a proper share; together they miss a sample: only the union shows it."""
    judge = clause("SC42").world
    assert judge is not None
    config = LoaderConfig(dataset_size=6, batch_size=1)  # the drawn config is rank 0's, of one rank
    judge([[[0, 2, 4]], [[1, 3, 5]]], config, None)
    from stateful_contract.repro.outcome import ClauseViolation

    with pytest.raises(ClauseViolation) as failed:
        judge([[[0, 2, 4]], [[1, 3, 3]]], config, None)
    assert "over all 2 ranks" in str(failed.value) and "1 never (sample 5)" in str(failed.value)


def test_the_public_assertion_checks_one_rank() -> None:
    config = LoaderConfig(dataset_size=6, batch_size=2, drop_last=True)
    reference, lengths = uninterrupted(factories.stateful_dataloader, config)
    assert_each_sample_once(reference, lengths, config)
    late = LoaderConfig(dataset_size=6, batch_size=2)
    reference, lengths = uninterrupted(zoo.FirstPassStartsLate, late)
    with pytest.raises(AssertionError, match=r"epoch 0 yielded 2 of the 6 samples .*: 4 never \(samples 0, 1, 2, 3\)"):
        assert_each_sample_once(reference, lengths, late)


def test_an_endless_stream_is_not_judged_and_says_why() -> None:
    result = check(zoo.CyclingLoader, clauses=["SC42"], strict=True, space=IN_PROCESS)["SC42"]
    assert result.status == "not-judged"
    assert result.message.startswith("not judged on an endless stream"), result.message


def test_a_loader_of_its_own_dataset_is_not_judged_and_says_why() -> None:
    class OwnDataset(zoo.EpochLoader):
        def batches(self, epoch: int) -> list[list[int]]:
            return [[i + 100 for i in b] for b in super().batches(epoch)]

        def collate(self, indices: list[int]) -> Any:
            batch = super().collate([i - 100 for i in indices])
            return {**batch, "index": batch["index"] + 100}

    result = check(OwnDataset, clauses=["SC42"], strict=True, space=IN_PROCESS)["SC42"]
    assert result.status == "not-judged" and "a dataset of its own" in result.message, result.message


# --- impacts counted against what was trained (issue 31, item 6) -----------------------------------------


def test_a_resume_is_not_blamed_for_what_the_uninterrupted_run_already_lost() -> None:
    """F28 with workers: the uninterrupted epoch 0 holds samples 8 and 9 only; a state taken before the first
    batch resumes to the whole epoch. SC12 and SC10 still fail (the stream differs), but nothing was trained
    before the checkpoint, so nothing is repeated: on main before this change, "8 samples repeated in epoch 0"."""
    report = check(_UncyclicPositional, clauses=["SC10", "SC12"], profile="dev", seed=0,
                   space=ConfigSpace(**{**vars(F28_SPACE), "num_workers": (2,)}))
    for clause_id in ("SC10", "SC12"):
        result = report[clause_id]
        assert result.status == "failed" and result.impact is not None, result.message
        assert "repeated" not in result.impact.counts and "lost" not in result.impact.counts, result.impact
        assert result.impact.counts["not in the uninterrupted run"] == 8
        assert result.impact.describe().startswith("silent: none lost or repeated in epoch 0: the resumed run "
                                                   "trains 8 samples that the uninterrupted run never yields"), \
            result.impact.describe()


def _batches(*ids: list[int]) -> list[dict[str, Any]]:
    import torch

    return [{"index": torch.tensor(i)} for i in ids]


def _expected(reference: list[Any], lengths: list[int], start: int, stop: int) -> Any:
    """``reference[start:stop]`` as `Example.segment` makes it: it knows its epochs and what came before."""
    from stateful_contract.repro.compare import Segment

    part = Segment(reference[start:stop], start, lengths)
    where = part.epoch_of(0)
    assert where is not None
    part.before = reference[start - where[1]:start]  # type: ignore[attr-defined]
    return part


def test_a_restarted_epoch_still_counts_what_was_trained_before_the_checkpoint_as_repeated() -> None:
    from stateful_contract.repro.impact import stream_impact

    reference = _batches([0], [1], [2], [3], [3], [1], [0], [2])  # two epochs of four
    expected = _expected(reference, [4, 4], 2, 8)
    restarted = _batches([0], [1], [2], [3], [3], [1])  # resumed at the epoch's start: 0 and 1 trained twice
    impact = stream_impact(expected, restarted)
    assert impact.counts == {"repeated": 2} and impact.epoch == 0, impact


def test_a_resume_that_trains_what_the_uninterrupted_epoch_skipped_is_no_repeat_but_a_loss_still_counts() -> None:
    from stateful_contract.repro.impact import stream_impact

    # The uninterrupted epoch 0 skips samples 0 and 1 (its own loss); a checkpoint after one batch of it.
    reference = _batches([2], [3], [0], [1], [2], [3])
    expected = _expected(reference, [2, 4], 1, 6)
    # The rest of epoch 0 is one batch, [3]; the resumed run's batch in its place is [0] (never trained in
    # epoch 0): 3 is lost, 0 is no repeat.
    resumed = _batches([0], [0], [1], [2], [3])
    impact = stream_impact(expected, resumed, cut=False)
    assert impact.counts == {"lost": 1, "not in the uninterrupted run": 1}, impact
    assert "1 sample lost in epoch 0 (and 1 sample the uninterrupted run never yields" in impact.what, impact.what
    trained_again = _batches([2], [0], [1], [2], [3])  # 2 was trained before the checkpoint: a repeat
    impact = stream_impact(expected, trained_again, cut=False)
    assert impact.counts == {"lost": 1, "repeated": 1}, impact
