"""The contract on several ranks of torch.distributed: clause SC30 and the per-rank core.

    >>> from stateful_contract.distributed import check_world
    >>> report = check_world("my_pkg.loaders:factory", world_size=2)
    >>> report["SC30"].status

`check_world` starts the ranks with torch's elastic launcher (what ``torchrun`` runs),
one process per rank on the gloo backend; every rank builds its loader from a config
carrying its ``rank`` and ``world_size``. The same runs from the command line:
``stateful-contract check TARGET --world-size 2``, and one example can be replayed with
``python -m stateful_contract.distributed TARGET --world-size 2 --config ... --position ...``.
See ``docs/distributed.md``.
"""

from __future__ import annotations

from .check import check_world, default_run_timeout, merge_ranks
from .every_rank import RankResume, every_rank_resumes
from .launch import LaunchOutcome, RankFailure, run_world

__all__ = [
    "LaunchOutcome",
    "RankFailure",
    "RankResume",
    "check_world",
    "default_run_timeout",
    "every_rank_resumes",
    "merge_ranks",
    "run_world",
]
