"""Strict tier (SC42): an uninterrupted epoch yields each sample of the config's dataset once.

No resume is involved: a loader that skips or repeats data in its own uninterrupted run passes every resume
clause (they compare with that run), and a resume clause that meets the loss blames it on the resume. This
one counts it where it happens. Strict, because nothing in `StatefulDataLoader`'s own semantics says a
loader must read the config's dataset; every loader built on torch's samplers passes it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from ..config import LoaderConfig
from ..repro.impact import untrained
from ..repro.recording import asserts
from ..repro.steps import NotJudgeable
from ..repro.whole_epochs import EpochTally, allowances, epochs_by_sample, foreign, tally
from ..search.example import Example
from .registry import clause, violated

__all__: list[str] = []  # the clause registers itself (`clause`): nothing here is imported

#: One rank's uninterrupted epochs, each as its sample numbers.
RankEpochs = list[list[Hashable]]


def _expected(config: LoaderConfig) -> str:
    may_miss, may_repeat = allowances(config)
    ranks = f" over all {config.world_size} ranks together" if config.world_size > 1 else ""
    slack = [f"drop_last's tails of fewer than a batch per rank (at most {may_miss} samples missing)"] \
        if may_miss else []
    if may_repeat:
        slack.append(f"the sampler's padding that evens the ranks (at most {may_repeat} samples repeated)")
    return (f"every uninterrupted epoch to yield each of the {config.dataset_size} samples of the config's dataset "
            f"exactly once{ranks}" + (f", give or take {' and '.join(slack)}" if slack else ""))


def _judge(ranks: Sequence[RankEpochs], config: LoaderConfig) -> None:
    """The first epoch over all ranks that lacks or repeats more than drop_last and padding account for."""
    strange = foreign(ranks, config)
    if strange:
        raise NotJudgeable(
            f"the batches name samples that are not the config's dataset's ('index' {strange[0]!r}; the config has "
            f"samples 0..{config.dataset_size - 1}): the loader reads a dataset of its own, so the contract cannot "
            "tell which samples an epoch is due")
    bad: EpochTally | None = next((t for t in tally(ranks, config) if not t.holds()), None)
    if bad is None:
        return
    raise violated("SC42", context="an uninterrupted run, no checkpoint: each epoch's samples counted"
                   + (f" over the {len(ranks)} ranks" if len(ranks) > 1 else ""),
                   expected=_expected(config), got=bad.describe(),
                   impact=untrained(bad.lost, bad.extra, epoch=bad.epoch))


@asserts("assert_each_sample_once")
def _each_sample_once(reference: Sequence[Any], lengths: Sequence[int], config: LoaderConfig) -> None:
    """One rank's judgement, recorded as the public assertion that checks the same thing."""
    epochs = epochs_by_sample(reference, lengths)
    if epochs is None:
        raise NotJudgeable("the batches carry no 'index' field: their samples cannot be counted (the config's "
                           "dataset gives every sample one; a loader that drops it cannot be judged here)")
    _judge([epochs], config)


def _over_the_ranks(values: Sequence[RankEpochs | None], config: LoaderConfig, plan: Any) -> None:
    """On several ranks: the union of the ranks' epochs (each rank returned its own)."""
    if len(values) > 1 and all(v is not None for v in values):
        # The drawn config is rank 0's; the world is the ranks that answered (its padding depends on it).
        _judge([v for v in values if v is not None], replace(config, rank=0, world_size=len(values)))


@clause("SC42", "uninterrupted-epoch-yields-each-sample-once", tier="strict", world=_over_the_ranks,
        not_judged_on_endless=("an endless stream has no epoch to count: a pass never ends, and where one epoch of the "
                        "dataset stops inside it is the loader's to say; SC10 counts its samples lost and repeated "
                        "over two epochs of the dataset past every checkpoint"))
def uninterrupted_epoch_yields_each_sample_once(example: Example, plan: None) -> RankEpochs | None:
    """Every uninterrupted epoch yields each sample of the config's dataset exactly once (over all ranks
    together), give or take what `drop_last` (a tail of fewer than a batch per rank) and the sampler's padding
    (`DistributedSampler` repeats up to `world_size - 1` samples to even the ranks) account for."""
    reference, lengths = example.reference()
    if example.world is None or example.world.world_size == 1:
        _each_sample_once(reference, lengths, example.config)
        return None
    epochs = epochs_by_sample(reference, lengths)
    if epochs is None:
        raise NotJudgeable("the batches carry no 'index' field: their samples cannot be counted")
    example.program.add(f"# and the same on every rank of {example.world.world_size}: epoch by epoch, the ranks' "
                        "samples together must be the dataset's, each once (give or take drop_last and padding)")
    return epochs
