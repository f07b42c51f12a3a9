"""The ``stateful-contract`` command's entry point: ``--version`` is answered here, before `cli` is imported.

`cli` imports the engine, and the engine torch (two seconds): a version check in a CI log, or a
packaging tool asking for it, should not pay for that.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from ._version import __version__

__all__ = ["entry"]


def entry() -> NoReturn:
    """``stateful-contract`` (and ``python -m stateful_contract``)."""
    if sys.argv[1:] in (["--version"], ["-V"]):
        print(f"stateful-contract {__version__}")
        sys.exit(0)
    from .cli import entry as run

    run()
