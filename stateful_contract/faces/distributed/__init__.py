"""The contract on several ranks of torch.distributed, as one call (docs/distributed.md).

`check_world` is `stateful_contract.check` with ``world_size`` required; ``python -m
stateful_contract.distributed`` runs one clause (or replays one example) on real ranks, or, as ``run``
under torchrun, srun or mpirun, the contract in that world; `run_in_world` is that ``run`` called from a
script on every rank, in the world the script made itself or its launcher started.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...config import LoaderConfig
from ...isolation.ranks import default_run_timeout
from ...report.results import Report
from ...repro.steps import Position
from ...run.check import check
from ...run.options import CheckOptions
from ...search.plans import Checkpoint

__all__ = ["check_world", "default_run_timeout", "run_in_world"]


def check_world(target: str, options: CheckOptions | None = None, *, world_size: int,
                replay: tuple[LoaderConfig, Position] | None = None, **keywords: Any) -> Report:
    """The contract on ``world_size`` ranks (torch.distributed, gloo; every example on every rank at once,
    SC30, SC31 and SC32 added), as one `Report`. ``target`` (``"package.module:factory"`` or
    ``"path/to/file.py:factory"``) is imported by that name on every rank; the options are `check`'s
    (`CheckOptions`, or its fields as keywords: ``run_timeout`` and ``run_dir`` matter most here);
    ``replay=(config, position)`` runs that one checkpoint instead of searching. See docs/distributed.md."""
    return check(target, options, world_size=world_size, **keywords,
                 replay=(replay[0], Checkpoint(replay[1])) if replay is not None else None)


def run_in_world(argv: Sequence[str]) -> int:
    """``python -m stateful_contract.distributed run ARGV`` called on every rank of a script's world: its
    default group when the script made it (``init_process_group`` with ``file://``, a ``TCPStore``, ...),
    else joined through ``env://`` as the command joins. Rank 0 runs the check and writes the report; every
    rank returns its exit status (0 passed, 1 failed, 2 unusable target); the script's own group is left to
    it. See docs/distributed.md, "From your own script"."""
    from .in_world import main

    return main(argv)
