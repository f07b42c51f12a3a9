"""OLMo-core (PyPI ``ai2-olmo-core``): ``NumpyFSLDataLoader`` as OLMo-core's ``Trainer`` drives it.

The loader is the package's own: the config's samples written as one token file (sample ``i``'s
``input_ids`` are instance ``i`` of ``sequence_length`` tokens), read by ``NumpyFSLDataset`` and
loaded by ``NumpyDataLoaderBase.wrap_numpy_dataset(...)``, a ``NumpyFSLDataLoader`` whose batches
carry each instance's ``index``. Its global batch is counted in tokens: ``config.batch_size``
instances per rank times ``config.world_size`` ranks. Every epoch drops the samples that do not
fill a whole global batch.

The loader keeps no epoch of its own across passes: OLMo-core's ``Trainer``
(``olmo_core/train/trainer.py``, 3.0.0) keeps ``epoch`` (from 1), calls
``data_loader.reshuffle(epoch)`` when an epoch starts (``_fit_epoch``) and ``reset()`` when it
ends, and saves ``{"data_loader": data_loader.state_dict(), "epoch": epoch}``. `OLMoTrainerView`
is that trainer's part, around the real loader: the view a check needs for a loader whose
resume needs state the trainer holds. It answers ``reshuffle(epoch)``, so a check that declares
the trainer's epoch hook (``epoch_hook="reshuffle"``) runs SC21's trainer loop through it. ``reshuffle`` builds the epoch's order in memory
(``in_memory=True``): the same order as the trainer's file in ``work_dir``, without files shared
between the checks that run at once.

``olmo_core`` is imported only when a factory runs.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stateful_contract.config import LoaderConfig

__all__ = ["OLMoTrainerView", "olmo_fsl", "olmo_fsl_loader"]

#: Token IDs the config's samples use are below 1000 (`TokenDataset`).
VOCAB_SIZE = 1000


@functools.cache
def _work_dir() -> Path:
    """This process's work directory (the loader's ``work_dir``; the token files)."""
    return Path(tempfile.mkdtemp(prefix="stateful-contract-olmo-"))


@functools.cache
def _token_file(size: int, seq_len: int, salt: int) -> str:
    """The config's samples as one uint16 token file. Its name is what OLMo-core's dataset
    fingerprint reads (the base name and the size), so a state saved by another process of the
    same config loads here."""
    import numpy as np

    from stateful_contract.config import TokenDataset

    samples = TokenDataset(size, seq_len, salt=salt)
    path = _work_dir() / f"tokens-{size}-{seq_len}-{salt}.npy"
    tokens = np.memmap(path, dtype=np.uint16, mode="w+", shape=(size * seq_len,))
    for i in range(size):
        tokens[i * seq_len:(i + 1) * seq_len] = samples[i]["input_ids"].numpy()
    tokens.flush()
    del tokens
    return os.fspath(path)


def olmo_fsl_loader(config: LoaderConfig, *, global_batch_instances: int | None = None) -> Any:
    """``NumpyDataLoaderBase.wrap_numpy_dataset(NumpyFSLDataset(tokens), global_batch_size=...,
    seed=config.seed, shuffle=config.shuffle, dp_world_size=config.world_size, dp_rank=config.rank)``.

    ``global_batch_instances`` (default ``batch_size * world_size``) sets the global batch."""
    from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

    path = _token_file(config.dataset_size, config.seq_len, config.seed % 97)
    dataset = NumpyFSLDataset(path, sequence_length=config.seq_len, pad_token_id=0, eos_token_id=0,
                              vocab_size=VOCAB_SIZE)
    dataset.work_dir = _work_dir()
    dataset.prepare()
    instances = global_batch_instances or config.batch_size * config.world_size
    return NumpyDataLoaderBase.wrap_numpy_dataset(
        dataset, global_batch_size=instances * config.seq_len, collator=DataCollator(pad_token_id=0),
        work_dir=_work_dir(), seed=config.seed, shuffle=config.shuffle, num_workers=config.num_workers,
        dp_world_size=config.world_size, dp_rank=config.rank, fs_local_rank=0)


class OLMoTrainerView:
    """OLMo-core's ``Trainer`` around its data loader, for the contract.

    ``iter()`` starts the trainer's current epoch (``reshuffle(epoch)``); its end counts the
    epoch and calls ``reset()``; the state is what the trainer saves, the loader's state and
    the epoch, and a load restores both (``Trainer.load_state_dict``).
    """

    def __init__(self, data_loader: Any) -> None:
        self.data_loader = data_loader
        self.epoch = 1
        self._announced = False  # reshuffle() was called for the next pass already

    def __len__(self) -> int:
        return int(self.data_loader.total_batches)

    def reshuffle(self, epoch: int) -> None:
        """The trainer's call at the top of an epoch, under its own name: the check counts epochs from 0
        and OLMo-core from 1. Declared as the epoch hook (``epoch_hook="reshuffle"``), SC21's trainer
        loop calls it before each pass, as ``Trainer._fit_epoch`` does."""
        self.epoch = epoch + 1
        self.data_loader.reshuffle(self.epoch, in_memory=True)
        self._announced = True

    def __iter__(self) -> Iterator[Any]:
        if not self._announced:  # Trainer._fit_epoch reshuffles at the start of every epoch
            self.data_loader.reshuffle(self.epoch, in_memory=True)
        self._announced = False
        return self._epoch(iter(self.data_loader))

    def _epoch(self, batches: Iterator[Any]) -> Iterator[Any]:
        yield from batches
        self.epoch += 1  # Trainer._fit_epoch's bookkeeping once the epoch is complete
        self.data_loader.reset()

    def state_dict(self) -> dict[str, Any]:
        return {"data_loader": self.data_loader.state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.data_loader.load_state_dict(state_dict["data_loader"])
        self.epoch = int(state_dict["epoch"])
        self._announced = False


def olmo_fsl(config: LoaderConfig) -> OLMoTrainerView:
    """`olmo_fsl_loader` inside `OLMoTrainerView`: the loader as OLMo-core's trainer iterates and saves it."""
    return OLMoTrainerView(olmo_fsl_loader(config))
