"""The ``stateful-contract`` command's entry point: ``--version`` and ``badge`` are answered here, before `cli`
is imported.

`cli` imports the engine, and the engine torch (two seconds): a version check in a CI log, a packaging
tool asking for it, or a badge drawn from a saved report should not pay for that.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from .._version import __version__

__all__ = ["entry"]


def entry() -> NoReturn:
    """``stateful-contract`` (and ``python -m stateful_contract``)."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        print(f"stateful-contract {__version__}")
        sys.exit(0)
    if sys.argv[1:2] == ["badge"]:  # the same subcommand `cli` lists, parsed by the badge's own arguments
        import argparse

        from ..spellings import speaking
        from . import badge

        parser = argparse.ArgumentParser(prog="stateful-contract badge", description=badge.__doc__.splitlines()[0])
        badge.add_arguments(parser)
        with speaking("cli"):
            sys.exit(badge.run(parser.parse_args(sys.argv[2:])))
    from .cli import entry as run

    run()
