"""The command-line flags that declare how the user's trainer runs on several ranks, and the rerun line's.

`stateful-contract check` and ``python -m stateful_contract.distributed`` (its replay and ``run`` inside a
launcher's world) take the same flags; a multi-rank reproduction's rerun command carries the ones given
(`RankExecutor.rerun_example`), so the example replays under the same declarations. Each is a `CheckOptions` field
(`stateful_contract.run.options.DECLARATIONS`); the clauses that read one say so (`Clause.reads`).
"""

from __future__ import annotations

import argparse
from typing import Any, get_args

from ..clauses.distributed import CheckpointLayout

__all__ = ["add_declaration_arguments", "declarations_of"]


def add_declaration_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fixed-global-batch", action="store_true",
                        help="declare that the trainer keeps the global batch fixed when the world size changes "
                             "(per-rank batch = global / ranks, as OLMo-core and Megatron do): SC31 resumes so")
    parser.add_argument("--joins-uneven-inputs", action="store_true",
                        help="declare that the trainer handles ranks with uneven batch counts (DDP's Join): SC32 "
                             "does not apply")
    parser.add_argument("--checkpoint-layout", choices=list(get_args(CheckpointLayout)), default=None,
                        help="declare how the trainer saves the loader's state on several ranks (per-rank-files: "
                             "each rank torch.saves its own, as MindSpeed-MM): SC30 judges that layout alone")


def declarations_of(args: argparse.Namespace) -> dict[str, Any]:
    """The `CheckOptions` fields the flags of `add_declaration_arguments` set."""
    return {"fixed_global_batch": args.fixed_global_batch, "joins_uneven_inputs": args.joins_uneven_inputs,
            "checkpoint_layout": args.checkpoint_layout}

