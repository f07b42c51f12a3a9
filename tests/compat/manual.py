"""torch's plain ``DataLoader`` with the skip-the-first-batches resume users write by hand.

The pattern, as found in training scripts: save ``{"epoch": e, "batches": n}`` (the batches
the trainer consumed in the current epoch) and, after a restart, skip the first ``n``
batches of epoch ``e`` (``itertools.islice``, or ``if step < skip: continue``). Whether
that resumes exactly depends only on whether a fresh process draws epoch ``e``'s order
again: two versions, the one usually written (a generator seeded once, at construction)
and the one that reseeds its generator from ``(seed, epoch)`` at every epoch.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from typing import Any

import torch

from stateful_contract.config import LoaderConfig

__all__ = ["SkipBatchesResume", "manual_skip", "manual_skip_epoch_seeded"]


class SkipBatchesResume:
    """A torch ``DataLoader`` with a hand-written position: ``(epoch, batches)``.

    ``state_dict()`` is ``{"epoch": e, "batches": n}``, counted as batches are yielded; a
    finished epoch is ``{"epoch": e + 1, "batches": 0}``. ``load_state_dict`` makes the
    next ``iter()`` skip ``n`` batches of a fresh pass of the ``DataLoader`` and count
    from epoch ``e``. With ``epoch_seeded`` the shuffling generator is reseeded with
    ``seed + epoch`` before every epoch (as ``DistributedSampler.set_epoch`` does),
    otherwise it is seeded once, at construction.
    """

    def __init__(self, loader: torch.utils.data.DataLoader[Any], generator: torch.Generator | None,
                 seed: int, *, epoch_seeded: bool) -> None:
        self.loader = loader
        self.generator = generator
        self.seed = seed
        self.epoch_seeded = epoch_seeded
        self.epoch = 0
        self.batches = 0
        self.skip = 0

    def __iter__(self) -> Iterator[Any]:
        if self.epoch_seeded and self.generator is not None:
            self.generator.manual_seed(self.seed + self.epoch)
        skip, self.skip = self.skip, 0
        self.batches = skip
        return self._run(itertools.islice(iter(self.loader), skip, None))

    def _run(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self.batches += 1
            yield batch
        self.epoch, self.batches = self.epoch + 1, 0

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.epoch = int(state_dict["epoch"])
        self.skip = self.batches = int(state_dict["batches"])


def _skipping(config: LoaderConfig, *, epoch_seeded: bool) -> SkipBatchesResume:
    generator = torch.Generator().manual_seed(config.seed)
    kwargs: dict[str, Any] = {}
    if config.num_workers > 0 and sys.platform.startswith("linux"):
        kwargs["multiprocessing_context"] = "fork"
    loader = torch.utils.data.DataLoader(config.dataset, batch_size=config.batch_size, shuffle=config.shuffle,
                                         drop_last=config.drop_last, num_workers=config.num_workers,
                                         generator=generator, **kwargs)
    return SkipBatchesResume(loader, generator, config.seed, epoch_seeded=epoch_seeded)


def manual_skip(config: LoaderConfig) -> Any:
    """``DataLoader(shuffle=config.shuffle, generator=torch.Generator().manual_seed(seed))``, resumed
    by skipping the batches already consumed in the saved epoch."""
    return _skipping(config, epoch_seeded=False)


def manual_skip_epoch_seeded(config: LoaderConfig) -> Any:
    """The same, with the generator reseeded from ``seed + epoch`` at every epoch."""
    return _skipping(config, epoch_seeded=True)
