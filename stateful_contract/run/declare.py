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
from ..spellings import OPTIONS

__all__ = ["add_declaration_arguments", "declarations_of"]


def add_declaration_arguments(parser: argparse.ArgumentParser) -> None:
    for keyword, how in (("fixed_global_batch", {"action": "store_true"}),
                         ("joins_uneven_inputs", {"action": "store_true"}),
                         ("checkpoint_layout", {"choices": list(get_args(CheckpointLayout)), "default": None})):
        parser.add_argument(*OPTIONS[keyword].flags, help=OPTIONS[keyword].help, **how)  # the one table's words


def declarations_of(args: argparse.Namespace) -> dict[str, Any]:
    """The `CheckOptions` fields the flags of `add_declaration_arguments` set."""
    return {"fixed_global_batch": args.fixed_global_batch, "joins_uneven_inputs": args.joins_uneven_inputs,
            "checkpoint_layout": args.checkpoint_layout}

