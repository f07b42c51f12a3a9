"""The contract on several ranks of torch.distributed, as one call.

    >>> from stateful_contract.distributed import check_world
    >>> report = check_world("my_pkg.loaders:factory", world_size=2)
    >>> report["SC30"].status

`check_world` is `stateful_contract.check` with ``world_size`` required; ``python -m
stateful_contract.distributed`` runs one clause (or replays one example) on real ranks, or, as ``run``
under torchrun, srun or mpirun, the contract in that world. See ``docs/distributed.md``.
"""

from __future__ import annotations

from typing import Any

from .._checking import check
from .._engine.plans import Checkpoint
from .._engine.ranks import default_run_timeout
from .._engine.steps import Position
from ..config import LoaderConfig
from ..options import CheckOptions
from ..report import Report

__all__ = ["check_world", "default_run_timeout"]


def check_world(target: str, options: CheckOptions | None = None, *, world_size: int,
                replay: tuple[LoaderConfig, Position] | None = None, **keywords: Any) -> Report:
    """Run the contract on ``world_size`` ranks (torch.distributed, gloo; every example on every rank at
    once, and the multi-rank clauses SC30 and SC31 added) and return one `Report`.

    ``target`` is ``"package.module:factory"`` or ``"path/to/file.py:factory"``: every rank
    imports it by that name. The options are `check`'s (`CheckOptions`, or its fields as
    keywords); two matter most here: ``run_timeout`` bounds the run (`default_run_timeout`),
    after which every process of it is killed and the clause running fails, naming where
    each rank was; ``run_dir`` keeps the run's files (states, DCP checkpoints, rank logs) there.
    ``replay=(config, position)`` runs that one checkpoint instead of searching.
    """
    return check(target, options, world_size=world_size, **keywords,
                 replay=(replay[0], Checkpoint(replay[1])) if replay is not None else None)
