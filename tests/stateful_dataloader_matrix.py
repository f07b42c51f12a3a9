"""torchdata's ``StatefulDataLoader`` in the configurations users really build.

Each function here is a loader factory, ``factory(config) -> fresh loader``, and a CLI
target ``tests.stateful_dataloader_matrix:NAME`` (from the repository's root: this module is
the project's own evidence, not part of the package). `MATRIX` maps each name to its
factory, a description, the clauses it is *measured* to violate (with the reason;
the published docs' findings page has the reproductions) and, where the configuration needs it, the
part of the configuration space it is checked on (worker-only options such as
``persistent_workers`` or ``snapshot_every_n_steps``).

Every factory builds its loader from the config's own samples (``config.dataset``),
so batches keep the ``index``/``input_ids``/``labels`` fields and the contract can
say which samples a resumed loader lost or repeated. A factory that pins an option
(``no_shuffle`` pins ``shuffle=False``) ignores the config's value for it.

Regenerate the verdicts (one line per entry; about 7 minutes on 2 cores, mostly worker examples)::

    python -m tests.stateful_dataloader_matrix        # from the repository's root
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from stateful_contract.config import ConfigSpace, LoaderConfig

# The datasets `LoaderConfig.iterable_dataset()` builds, under the names the entries have always used.
from stateful_contract.config import StatefulTokenIterable as StatefulShardedTokens
from stateful_contract.config import TokenIterable as ShardedTokens
from stateful_contract.links import doc
from stateful_contract.run.options import ExpectedFailures

__all__ = [
    "MATRIX",
    "MULTI_RANK",
    "MatrixEntry",
    "ShardedTokens",
    "StatefulShardedTokens",
    "default_context_workers",
    "default_generator",
    "distributed_batch_sampler",
    "distributed_sampler",
    "drop_last",
    "iterable_stateful",
    "iterable_stateless",
    "loader_generator",
    "no_shuffle",
    "one_worker",
    "persistent_workers",
    "plain_batch_sampler_random",
    "plain_batch_sampler_sequential",
    "sampler_generator",
    "snapshot_every_3",
    "stateful_batch_sampler",
    "stateful_distributed_sampler",
    "two_workers",
]


def _common(config: LoaderConfig, **overrides: Any) -> dict[str, Any]:
    """The constructor arguments every entry shares: workers (forked on Linux) and batching."""
    kwargs: dict[str, Any] = {
        "batch_size": config.batch_size,
        "drop_last": config.drop_last,
        "num_workers": config.num_workers,
    }
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    kwargs.update(overrides)
    return kwargs


def _generator(config: LoaderConfig) -> torch.Generator:
    return torch.Generator().manual_seed(config.seed)


def _loader(dataset: Any, **kwargs: Any) -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    return StatefulDataLoader(dataset, **kwargs)


# --- generators --------------------------------------------------------------------


def default_generator(config: LoaderConfig) -> Any:
    """``shuffle=config.shuffle`` and no generator: the sampler seeds itself from torch's global RNG."""
    return _loader(config.dataset, shuffle=config.shuffle, **_common(config))


def sampler_generator(config: LoaderConfig) -> Any:
    """An explicit generator given to torchdata's stateful ``RandomSampler`` (what
    ``config.stateful_dataloader()`` does with ``generator="explicit"``)."""
    from torchdata.stateful_dataloader.sampler import RandomSampler

    if config.shuffle:
        return _loader(config.dataset, sampler=RandomSampler(config.dataset, generator=_generator(config)),
                       **_common(config))
    return _loader(config.dataset, shuffle=False, **_common(config))


def loader_generator(config: LoaderConfig) -> Any:
    """An explicit generator passed to the loader itself: ``StatefulDataLoader(ds, shuffle=..., generator=g)``."""
    return _loader(config.dataset, shuffle=config.shuffle, generator=_generator(config), **_common(config))


# --- workers, shuffling, drop_last -----------------------------------------------------


def _as_configured(config: LoaderConfig) -> Any:
    return config.stateful_dataloader()


def one_worker(config: LoaderConfig) -> Any:
    """``config.stateful_dataloader()``, checked with exactly one worker process.

    With torchdata's default ``snapshot_every_n_steps=1`` (workers send their state with
    every batch), so this and `two_workers` are also the ``snapshot_every_n_steps=1`` entries.
    """
    return _as_configured(config)


def two_workers(config: LoaderConfig) -> Any:
    """``config.stateful_dataloader()``, checked with exactly two worker processes."""
    return _as_configured(config)


def no_shuffle(config: LoaderConfig) -> Any:
    """Shuffling off (pinned, whatever the config says): the default ``SequentialSampler``."""
    return _loader(config.dataset, shuffle=False, **_common(config))


def drop_last(config: LoaderConfig) -> Any:
    """``drop_last=True`` (pinned), otherwise as ``config.stateful_dataloader()``."""
    return config.stateful_dataloader(drop_last=True)


def persistent_workers(config: LoaderConfig) -> Any:
    """``persistent_workers=num_workers > 0`` (as users write it; torch refuses it without
    workers): the same worker processes serve every epoch."""
    return config.stateful_dataloader(persistent_workers=config.num_workers > 0)


def snapshot_every_3(config: LoaderConfig) -> Any:
    """``snapshot_every_n_steps=3``: workers send their state every third batch; a
    ``state_dict()`` in between is rebuilt from the last snapshot."""
    return config.stateful_dataloader(snapshot_every_n_steps=3)


# --- batch samplers -----------------------------------------------------------------


def _stateful_sampler(config: LoaderConfig) -> Any:
    from torchdata.stateful_dataloader.sampler import RandomSampler

    if config.shuffle:
        return RandomSampler(config.dataset, generator=_generator(config))
    return torch.utils.data.SequentialSampler(config.dataset)


def stateful_batch_sampler(config: LoaderConfig) -> Any:
    """``batch_sampler=`` torchdata's stateful ``BatchSampler`` over its stateful
    ``RandomSampler`` (explicit generator) or torch's ``SequentialSampler``."""
    from torchdata.stateful_dataloader.sampler import BatchSampler

    sampler = BatchSampler(_stateful_sampler(config), config.batch_size, config.drop_last)
    return _loader(config.dataset, **_common(config, batch_sampler=sampler, batch_size=1, drop_last=False))


def plain_batch_sampler_sequential(config: LoaderConfig) -> Any:
    """``batch_sampler=`` torch's plain ``BatchSampler(SequentialSampler)``: no state;
    torchdata resumes it by skipping the batches already yielded."""
    sampler = torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(config.dataset),
                                            config.batch_size, config.drop_last)
    return _loader(config.dataset, **_common(config, batch_sampler=sampler, batch_size=1, drop_last=False))


def plain_batch_sampler_random(config: LoaderConfig) -> Any:
    """``batch_sampler=`` torch's plain ``BatchSampler(RandomSampler)`` (not torchdata's):
    no state. With ``generator="explicit"`` the torch ``RandomSampler`` gets
    ``torch.Generator().manual_seed(seed)``, otherwise none (it then draws a seed from
    torch's global RNG at every epoch). Pinned to ``shuffle=True``."""
    generator = _generator(config) if config.generator == "explicit" else None
    sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(config.dataset, generator=generator),
                                            config.batch_size, config.drop_last)
    return _loader(config.dataset, **_common(config, batch_sampler=sampler, batch_size=1, drop_last=False))


# --- distributed samplers (set_epoch) ----------------------------------------------------


def _rank_of(c: LoaderConfig) -> dict[str, Any]:
    return {"num_replicas": c.world_size, "rank": c.rank, "shuffle": c.shuffle, "seed": c.seed, "drop_last": c.drop_last}


def distributed_sampler(config: LoaderConfig) -> Any:
    """``sampler=`` torch's ``DistributedSampler`` for the config's rank (no state), as verl builds it."""
    sampler: Any = torch.utils.data.DistributedSampler(config.dataset, **_rank_of(config))
    return _loader(config.dataset, **_common(config, sampler=sampler))


def stateful_distributed_sampler(config: LoaderConfig) -> Any:
    """``sampler=`` torchdata's ``StatefulDistributedSampler`` for the config's rank; it has ``set_epoch``."""
    from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

    sampler = StatefulDistributedSampler(config.dataset, **_rank_of(config))
    return _loader(config.dataset, **_common(config, sampler=sampler))


def distributed_batch_sampler(config: LoaderConfig) -> Any:
    """``batch_sampler=`` `stateful_contract.samplers.DistributedBatchSampler`, at any world size."""
    from stateful_contract.samplers import DistributedBatchSampler

    sampler = DistributedBatchSampler(config.dataset, config.batch_size, **_rank_of(config))
    return _loader(config.dataset, **_common(config, batch_sampler=sampler, batch_size=1, drop_last=False))


def default_context_workers(config: LoaderConfig) -> Any:
    """As a trainer builds it: `DistributedBatchSampler`, ``num_workers=config.num_workers`` and no
    ``multiprocessing_context``, so its workers start as the platform's default says (fork on Linux before
    Python 3.14, under torchrun as in the contract's own ranks)."""
    from stateful_contract.samplers import DistributedBatchSampler

    sampler = DistributedBatchSampler(config.dataset, config.batch_size, **_rank_of(config))
    return _loader(config.dataset, batch_sampler=sampler, num_workers=config.num_workers)


# --- iterable datasets (stateful_contract.config) -----------------------------------


def iterable_stateful(config: LoaderConfig) -> Any:
    """An ``IterableDataset`` with its own ``state_dict``/``load_state_dict``, sharded over workers."""
    return _loader(config.iterable_dataset(stateful=True), **_common(config))


def iterable_stateless(config: LoaderConfig) -> Any:
    """An ``IterableDataset`` without state, sharded over workers: torchdata fast-forwards it."""
    return _loader(config.iterable_dataset(), **_common(config))


# --- the matrix -------------------------------------------------------------------------


#: This module's importable name, also under ``python -m`` (where ``__name__`` is "__main__",
#: which a rank process cannot import the factory from).
_MODULE = __spec__.name if __spec__ is not None else __name__


@dataclass(frozen=True)
class MatrixEntry:
    """One configuration of the matrix: how to build it, and what it was measured to do."""

    factory: Callable[[LoaderConfig], Any]
    description: str
    #: Clause ID -> why torchdata violates it in this configuration (measured).
    expected_failures: ExpectedFailures = field(default_factory=dict)
    #: The configuration space it is checked on (None: the whole default space).
    space: ConfigSpace | None = None
    #: Ranks it is checked on (`MULTI_RANK` entries: with ``world_size > 1``).
    world_size: int = 1

    @property
    def target(self) -> str:
        return f"{_MODULE}:{self.factory.__name__}"


#: Worker processes only, for options that mean nothing without them.
WORKER_SPACE = ConfigSpace(num_workers=(1, 2))

_LOADER_GENERATOR = (
    "torchdata 0.11, num_workers=0: each iterator draws its workers' base seed from the loader's "
    "generator=, which is also the sampler's; a resumed iterator restores the sampler's generator "
    "to before that draw and does not replay it, so every epoch after the resumed one is shuffled "
    f"differently (F1, {doc('findings.md', 'f1')}; with worker processes the saved generator state already "
    "follows the draw and the resume is exact)"
)
_STATELESS_SAMPLER = (
    "torch's RandomSampler has no state_dict: torchdata resumes by skipping the batches already "
    "yielded, in the permutation a fresh process draws first, which is epoch 0's (from a fresh "
    "generator= or from the freshly seeded global RNG); a state taken in epoch e >= 1 resumes into "
    "epoch 0's order and stays e epochs behind; without a generator each epoch's seed also comes "
    "from the global RNG when the epoch starts, so anything else drawing from it in between changes "
    f"later epochs (SC13) (F2, {doc('findings.md', 'f2')}; SC17 fails through the same resume, not the round trip)"
)
_STATELESS_ITERABLE = (
    "torchdata fast-forwards an IterableDataset without state by calling next() _num_yielded times, "
    "and each call counts again: the state of a fast-forwarded loader reports twice the batches, so "
    f"a state taken after such a resume (before or after iterating) skips batches (F3, {doc('findings.md', 'f3')})"
)
_END_OF_EPOCH_IN_THE_LOOP = (
    "in the set_epoch loop, a state taken after an epoch's last batch, resumed at the next epoch as trainers "
    "do, skips the new epoch's indices by the finished epoch's count: the next epoch is lost (verl#7401; "
    f"F12, {doc('findings.md', 'f12')})"
)
_STATEFUL_DISTRIBUTED = (
    "StatefulDistributedSampler resets its count only at an epoch's first index: states after StopIteration "
    "or after a later epoch's iter() resume into an empty epoch, an epoch lost (SC10, SC21; F4 and F12, "
    f"{doc('findings.md', 'f4')}, {doc('findings.md', 'f12')}); a state right after a load reports the epoch's "
    f"start, and resumes repeat batches (SC11, SC13; F11, {doc('findings.md', 'f11')}); "
    "the same lazy count makes a state right after the iter() of a pass cut short the abandoned pass's (SC22)"
)
MATRIX: dict[str, MatrixEntry] = {
    "default_generator": MatrixEntry(default_generator, "shuffle=config.shuffle, no generator (global RNG)"),
    "sampler_generator": MatrixEntry(sampler_generator, "explicit generator given to torchdata's RandomSampler"),
    "loader_generator": MatrixEntry(
        loader_generator, "explicit generator= given to StatefulDataLoader",
        expected_failures=dict.fromkeys(("SC10", "SC11", "SC12", "SC13", "SC17", "SC19", "SC20", "SC22"), _LOADER_GENERATOR),
    ),
    "one_worker": MatrixEntry(one_worker, "config.stateful_dataloader() with num_workers=1",
                              space=ConfigSpace(num_workers=(1,))),
    "two_workers": MatrixEntry(two_workers, "config.stateful_dataloader() with num_workers=2",
                               space=ConfigSpace(num_workers=(2,))),
    "no_shuffle": MatrixEntry(no_shuffle, "shuffle=False (SequentialSampler)"),
    "drop_last": MatrixEntry(drop_last, "drop_last=True"),
    "stateful_batch_sampler": MatrixEntry(stateful_batch_sampler,
                                          "batch_sampler= torchdata BatchSampler(RandomSampler(generator))"),
    "plain_batch_sampler_sequential": MatrixEntry(plain_batch_sampler_sequential,
                                                  "batch_sampler= torch BatchSampler(SequentialSampler), no state"),
    "plain_batch_sampler_random": MatrixEntry(
        plain_batch_sampler_random, "batch_sampler= torch BatchSampler(torch RandomSampler), no state",
        expected_failures=dict.fromkeys(("SC10", "SC11", "SC13", "SC17", "SC19", "SC20", "SC22"), _STATELESS_SAMPLER),
    ),
    "iterable_stateful": MatrixEntry(iterable_stateful, "IterableDataset with state_dict/load_state_dict"),
    "iterable_stateless": MatrixEntry(
        iterable_stateless, "IterableDataset without state (fast-forwarded)",
        expected_failures=dict.fromkeys(("SC11", "SC13"), _STATELESS_ITERABLE),
    ),
    "distributed_sampler": MatrixEntry(
        distributed_sampler, "sampler= torch DistributedSampler (set_epoch), no state",
        expected_failures={"SC21": _END_OF_EPOCH_IN_THE_LOOP},
    ),
    "stateful_distributed_sampler": MatrixEntry(
        stateful_distributed_sampler, "sampler= torchdata StatefulDistributedSampler (set_epoch)",
        expected_failures=dict.fromkeys(("SC10", "SC11", "SC13", "SC21", "SC22"), _STATEFUL_DISTRIBUTED),
    ),
    "distributed_batch_sampler": MatrixEntry(
        distributed_batch_sampler, "batch_sampler= stateful_contract's DistributedBatchSampler (set_epoch)"),
    "persistent_workers": MatrixEntry(persistent_workers, "persistent_workers=True", space=WORKER_SPACE),
    "snapshot_every_3": MatrixEntry(snapshot_every_3, "snapshot_every_n_steps=3", space=WORKER_SPACE),
}

_WORLD_CHANGE = (
    "torchdata 0.11's StatefulDistributedSampler saves only how many indices this rank has yielded "
    "('yielded'), not num_replicas: resumed on another world size, each rank skips that many indices of "
    "its new shard, so a smaller world repeats samples and a larger one loses some, silently "
    f"(F16, {doc('findings.md', 'f16')})"
)
#: Entries checked on several ranks (``check(entry.target, world_size=entry.world_size)``).
MULTI_RANK: dict[str, MatrixEntry] = {"stateful_distributed_sampler": MatrixEntry(
    stateful_distributed_sampler, "torchdata's StatefulDistributedSampler, on 2 ranks", {"SC31": _WORLD_CHANGE},
    world_size=2),
    "default_context_workers": MatrixEntry(
        default_context_workers, "DistributedBatchSampler, num_workers from the config, no multiprocessing_context, "
        "on 2 ranks", world_size=2)}


def main(argv: list[str] | None = None) -> int:
    """Print each entry's verdict: ``python -m tests.stateful_dataloader_matrix [--profile P] [NAME ...]``."""
    import argparse
    import logging
    import time

    from stateful_contract import check

    # torchdata logs "naively fast-forwarding your dataset" on every resume of
    # `iterable_stateless` (hundreds of lines): that is the entry's point, not news.
    logging.getLogger("torchdata.stateful_dataloader.stateful_dataloader").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(prog="python -m tests.stateful_dataloader_matrix", description=main.__doc__)
    parser.add_argument("names", nargs="*", help="entries to run (default: all)")
    parser.add_argument("--profile", default="ci")
    args = parser.parse_args(argv)
    failed = False
    entries = {**MATRIX, **MULTI_RANK}
    for name in args.names or list(entries):
        entry = entries[name]
        started = time.perf_counter()
        factory = entry.target if entry.world_size > 1 else entry.factory  # ranks import it by name
        report = check(factory, profile=args.profile, space=entry.space or ConfigSpace(), world_size=entry.world_size,
                       expected_failures=entry.expected_failures, target=entry.target)
        verdict = {r.id: r.status for r in report.results if r.status not in ("passed", "skipped")}
        failed |= not report.passed
        print(f"{name:32s} {'PASS' if report.passed else 'FAIL':4s} {time.perf_counter() - started:6.1f}s "
              f"{verdict or 'all core clauses pass'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
