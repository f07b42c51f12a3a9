"""``python -m stateful_contract.distributed TARGET``: ``stateful-contract check TARGET`` on real ranks.

It is the CLI's ``check`` (every flag, output and exit status of it, docs/cli.md) with a world of
``--world-size 2`` and ``--clause SC30`` unless told otherwise. With ``--config``/``--position`` it replays
one example, the line a multi-rank failure prints::

    python -m stateful_contract.distributed my_pkg.loaders:factory --world-size 2 --clause SC30 \\
        --config "LoaderConfig(dataset_size=9, batch_size=2, grad_acc_step=2)" \\
        --position "Position(epoch=0, batches=1)"

``--run-dir DIR`` keeps every rank's files (states, DCP checkpoints, logs) for a look.
``python -m stateful_contract.distributed run TARGET``, under torchrun, srun or mpirun, runs the contract
in that world instead (`stateful_contract.faces.distributed.in_world`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ...spellings import speaking
from .. import cli
from . import in_world

__all__ = ["main", "parser"]

#: The clause judged when none is named: each rank resumes its own state (docs/distributed.md).
DEFAULT_CLAUSE = "SC30"


def main(argv: Sequence[str] | None = None) -> int:
    with speaking("cli"):  # every hint names a command line's options, as `stateful-contract check`'s do
        return _main(argv)


def parser() -> argparse.ArgumentParser:
    """The command's parser (``run`` has its own: `in_world`): ``check``'s, on two ranks by default."""
    made = cli.Parser(prog="python -m stateful_contract.distributed", description=__doc__,
                      formatter_class=cli.RawDescriptionHelpFormatter)
    cli.add_check_arguments(made, world_size=2)
    return made


def _main(argv: Sequence[str] | None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["run"]:  # inside a world the user's launcher started
        in_world.exit_now(in_world.main(given[1:], own_process=True))
    args = parser().parse_args(given)
    args.clauses = args.clauses or [DEFAULT_CLAUSE]  # not argparse's default: --clause appends to it
    return args.func(args)  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main())
