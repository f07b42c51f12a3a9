"""``python -m stateful_contract.distributed TARGET --world-size N``: one clause on real ranks.

``python -m stateful_contract.distributed run TARGET``, under torchrun, srun or mpirun, runs
the contract in that world instead (`stateful_contract.faces.distributed.in_world`).

Without ``--config``/``--position`` it searches like ``stateful-contract check TARGET
--world-size N --clause SC30``. With both it replays one example, the line a multi-rank
failure prints::

    python -m stateful_contract.distributed my_pkg.loaders:factory --world-size 2 \\
        --config "LoaderConfig(dataset_size=9, batch_size=2, grad_acc_step=2)" \\
        --position "Position(epoch=0, batches=1)"

``--run-dir DIR`` keeps every rank's files (states, DCP checkpoints, logs) for a look.
Exit status: 0 when the clause passed, 1 when it failed, 2 when the target cannot be used.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ...isolation.target import TargetError
from ...report.render import plural, render_result
from ...run.check import FactoryError
from ...run.declare import declarations_of
from ...spellings import speaking
from . import check_world, in_world

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    with speaking("cli"):  # every hint names a command line's options, as `stateful-contract check`'s do
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args_given = list(sys.argv[1:] if argv is None else argv)
    if args_given[:1] == ["run"]:  # inside a world the user's launcher started
        in_world.exit_now(in_world.main(args_given[1:]))
    parser = argparse.ArgumentParser(prog="python -m stateful_contract.distributed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", help="package.module:factory or path/to/file.py:factory")
    parser.add_argument("--world-size", type=int, default=2, metavar="N")
    parser.add_argument("--clause", default="SC30", metavar="ID", help="the clause to run (default SC30)")
    in_world.add_example_arguments(parser)
    parser.add_argument("--run-timeout", type=float, help="seconds the whole run may take")
    parser.add_argument("--run-dir", help="keep the run's files here")
    args = parser.parse_args(args_given)
    replay = in_world.replay_of(parser, args)
    try:
        report = check_world(args.target, world_size=args.world_size, profile=args.profile, clauses=[args.clause],
                             timeout=args.timeout, run_timeout=args.run_timeout, replay=replay,
                             run_dir=args.run_dir, **declarations_of(args))
    except (TargetError, FactoryError, KeyError, ValueError) as e:  # ValueError: OptionError
        print(f"stateful_contract.distributed: {e}", file=sys.stderr)
        return 2
    result = report[args.clause]
    print(f"{result.id} {result.name}: {result.status} ({plural(result.examples, 'example')} on {args.world_size} ranks, "
          f"{result.seconds:.1f} s)")
    print(render_result(result))
    for note in report.notes:
        print(f"note: {note}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
