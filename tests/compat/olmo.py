"""OLMo-core (PyPI ``ai2-olmo-core``): ``NumpyFSLDataLoader`` as OLMo-core's ``Trainer`` drives it.

The loader is the package's own: the config's samples written as one token file (sample ``i``'s
``input_ids`` are instance ``i`` of ``sequence_length`` tokens), read by ``NumpyFSLDataset`` and
loaded by ``NumpyDataLoaderBase.wrap_numpy_dataset(...)``, a ``NumpyFSLDataLoader`` whose batches
carry each instance's ``index``. Its global batch is counted in tokens: ``config.batch_size``
instances per rank times ``config.world_size`` ranks. Every epoch drops the samples that do not
fill a whole global batch.

The loader keeps no epoch of its own across passes: OLMo-core's ``Trainer``
(``olmo_core/train/trainer.py`` at allenai/OLMo-core fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d, 3.0.0 on
PyPI) keeps ``epoch`` (from 1), calls ``data_loader.reshuffle(self.epoch)`` at the top of each epoch
(``_fit_epoch``), ``reset()`` and ``self.epoch += 1`` once it ended, saves
``{"data_loader": data_loader.state_dict(), "epoch": epoch}`` and, resuming, loads the loader's state (which
holds an epoch of its own) and the epoch, then ``fit()`` runs ``_fit_epoch()``: the reshuffle comes after the
load. `olmo_fsl` is that trainer around the real loader, as the package's `TrainerView` models it:
``hook="reshuffle"``, ``first_epoch=1``, ``at_pass_end="reset"``, ``hook_at_resume="after_load"``; the row
declares the hook (``epoch_hook="reshuffle"``), so SC21 runs the trainer's loop through it.

``reshuffle(epoch)`` is called as the Trainer calls it, without ``in_memory``: it writes the epoch's order
to ``work_dir`` (``build_and_save_global_indices``) and the loader reads it back there, the Trainer's code
path. The file's name holds every input of the order (seed and epoch when shuffling, the dataset's size),
and it is written to a temporary name and renamed (``olmo_core/data/utils.py``, ``memmap_to_write``), so
the checks that share this process's ``work_dir`` read only orders equal to their own, as runs sharing a
work_dir do. No ``work_dir`` outlives its check, and importing this module makes none (`_work_dir`).

``olmo_core`` is imported only when a factory runs.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from stateful_contract import TrainerView
from stateful_contract.config import LoaderConfig
from stateful_contract.isolation.processes import MARKER_ENV

__all__ = ["olmo_fsl", "olmo_fsl_loader"]

#: Token IDs the config's samples use are below 1000 (`TokenDataset`).
VOCAB_SIZE = 1000


def _remove(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked child that runs its exit handlers leaves its parent's directory alone
        shutil.rmtree(path, ignore_errors=True)


@functools.cache
def _own_dir() -> Path:
    """The directory of the work directories of a process the check did not start (the checker itself with
    ``isolation='in-process'``, a rank of the user's launcher, a test), made at its first loader and deleted at
    its exit; the processes it forks after that share it and leave it to it. Nothing is made at import: a
    directory made then (and deleted only by an exit handler) was left in the temporary directory by every
    process that imported the module and was killed, a pytest worker among them."""
    made = Path(tempfile.mkdtemp(prefix="stateful-contract-olmo-"))
    atexit.register(_remove, made, os.getpid())
    return made


@functools.cache
def _work_dir() -> Path:
    """This process's work directory (the loader's ``work_dir``: the token files, each epoch's order), when the
    caller gives none. In a process the check started, it is in that process's run directory (`MARKER_ENV`),
    which the check deletes whichever way the process ended (a child leaves by ``os._exit``, without exit
    handlers, or is killed); elsewhere in `_own_dir`."""
    run_dir = os.environ.get(MARKER_ENV)
    return Path(tempfile.mkdtemp(prefix="olmo-work-", dir=run_dir if run_dir and os.path.isdir(run_dir)
                                 else _own_dir()))


@functools.cache
def _token_file(size: int, seq_len: int, salt: int, work_dir: Path) -> str:
    """The config's samples as one uint16 token file in ``work_dir``. Its name is what OLMo-core's dataset
    fingerprint reads (the base name and the size), so a state saved by another process of the
    same config loads here."""
    import numpy as np

    from stateful_contract.config import TokenDataset

    samples = TokenDataset(size, seq_len, salt=salt)
    path = work_dir / f"tokens-{size}-{seq_len}-{salt}.npy"
    tokens = np.memmap(path, dtype=np.uint16, mode="w+", shape=(size * seq_len,))
    for i in range(size):
        tokens[i * seq_len:(i + 1) * seq_len] = samples[i]["input_ids"].numpy()
    tokens.flush()
    del tokens
    return os.fspath(path)


def olmo_fsl_loader(config: LoaderConfig, *, global_batch_instances: int | None = None,
                    work_dir: str | os.PathLike[str] | None = None) -> Any:
    """``NumpyDataLoaderBase.wrap_numpy_dataset(NumpyFSLDataset(tokens), global_batch_size=...,
    seed=config.seed, shuffle=config.shuffle, dp_world_size=config.world_size, dp_rank=config.rank)``.

    ``global_batch_instances`` (default ``batch_size * world_size``) sets the global batch; ``work_dir`` (its
    caller's to delete: a test's ``tmp_path``) the loader's, default this process's (`_work_dir`)."""
    from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset

    work = Path(work_dir) if work_dir is not None else _work_dir()
    path = _token_file(config.dataset_size, config.seq_len, config.seed % 97, work)
    dataset = NumpyFSLDataset(path, sequence_length=config.seq_len, pad_token_id=0, eos_token_id=0,
                              vocab_size=VOCAB_SIZE)
    dataset.work_dir = work
    dataset.prepare()
    instances = global_batch_instances or config.batch_size * config.world_size
    return NumpyDataLoaderBase.wrap_numpy_dataset(
        dataset, global_batch_size=instances * config.seq_len, collator=DataCollator(pad_token_id=0),
        work_dir=work, seed=config.seed, shuffle=config.shuffle, num_workers=config.num_workers,
        dp_world_size=config.world_size, dp_rank=config.rank, fs_local_rank=0)


def olmo_fsl(config: LoaderConfig, *, work_dir: str | os.PathLike[str] | None = None) -> TrainerView:
    """`olmo_fsl_loader` as OLMo-core's Trainer iterates, saves and restores it (the module's docstring)."""
    return TrainerView(olmo_fsl_loader(config, work_dir=work_dir), hook="reshuffle", first_epoch=1, at_pass_end="reset",
                       hook_at_resume="after_load")
