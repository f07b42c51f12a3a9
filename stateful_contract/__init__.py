"""stateful-contract: does your dataloader wrapper checkpoint and resume like StatefulDataLoader?

>>> from stateful_contract import check
>>> report = check(my_factory)          # factory(config: LoaderConfig) -> loader
>>> report.passed, report["SC10"].message

The contract's clauses (SC01...) are listed in `CLAUSES`; `StatefulLoader` is the
typing Protocol a checkpointable loader satisfies.

Names are imported on first use: the pytest plugin, registered for every pytest run in an environment where
this package is installed, must not import torch (seconds) in test runs that never touch the contract.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # explicit re-exports (`X as X`) for type checkers
    from ._checking import CheckInterrupted as CheckInterrupted
    from ._checking import FactoryError as FactoryError
    from ._checking import Progress as Progress
    from ._checking import check as check
    from ._engine.outcome import ClauseViolation as ClauseViolation
    from ._target import TargetError as TargetError
    from .clauses import CLAUSES as CLAUSES
    from .clauses import CONTRACT_VERSION as CONTRACT_VERSION
    from .clauses import Clause as Clause
    from .config import ConfigSpace as ConfigSpace
    from .config import LoaderConfig as LoaderConfig
    from .config import TokenDataset as TokenDataset
    from .config import loader_configs as loader_configs
    from .options import CheckOptions as CheckOptions
    from .options import OptionError as OptionError
    from .options import UnknownClauseWarning as UnknownClauseWarning
    from .protocol import StatefulLoader as StatefulLoader
    from .report import ClauseResult as ClauseResult
    from .report import Report as Report
    from .trainer_view import TrainerView as TrainerView

#: Public name -> module that defines it.
_EXPORTS = {name: module for module, names in (
    ("_checking", ("CheckInterrupted", "FactoryError", "Progress", "check")),
    ("options", ("CheckOptions", "OptionError", "UnknownClauseWarning")),
    ("clauses", ("CLAUSES", "CONTRACT_VERSION", "Clause")),
    ("_engine.outcome", ("ClauseViolation",)),
    ("_target", ("TargetError",)),
    ("config", ("ConfigSpace", "LoaderConfig", "TokenDataset", "loader_configs")),
    ("protocol", ("StatefulLoader",)),
    ("report", ("ClauseResult", "Report")),
    ("trainer_view", ("TrainerView",)),
) for name in names}

__all__ = sorted(_EXPORTS)

from ._version import __version__ as __version__  # noqa: E402  (the one source: _version.py)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
