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

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:  # explicit re-exports (`X as X`) for type checkers
    from .clauses import CLAUSES as CLAUSES
    from .clauses import CONTRACT_VERSION as CONTRACT_VERSION
    from .clauses import Clause as Clause
    from .config import ConfigSpace as ConfigSpace
    from .config import LoaderConfig as LoaderConfig
    from .config import TokenDataset as TokenDataset
    from .config import loader_configs as loader_configs
    from .isolation.target import TargetError as TargetError
    from .protocol import StatefulLoader as StatefulLoader
    from .report.results import ClauseResult as ClauseResult
    from .report.results import Report as Report
    from .repro.outcome import ClauseViolation as ClauseViolation
    from .run.check import CheckInterrupted as CheckInterrupted
    from .run.check import FactoryError as FactoryError
    from .run.check import Progress as Progress
    from .run.check import check as check
    from .run.options import CheckOptions as CheckOptions
    from .run.options import OptionError as OptionError
    from .run.options import UnknownClauseWarning as UnknownClauseWarning
    from .trainer_view import TrainerView as TrainerView

#: Public name -> module that defines it, imported on first use (`lazy_exports`).
_EXPORTS, __getattr__, __dir__ = lazy_exports(__name__, globals(), (
    (".run.check", ("CheckInterrupted", "FactoryError", "Progress", "check")),
    (".run.options", ("CheckOptions", "OptionError", "UnknownClauseWarning")),
    (".clauses", ("CLAUSES", "CONTRACT_VERSION", "Clause")),
    (".repro.outcome", ("ClauseViolation",)),
    (".isolation.target", ("TargetError",)),
    (".config", ("ConfigSpace", "LoaderConfig", "TokenDataset", "loader_configs")),
    (".protocol", ("StatefulLoader",)),
    (".report.results", ("ClauseResult", "Report")),
    (".trainer_view", ("TrainerView",)),
))

__all__ = sorted(_EXPORTS)

from ._version import __version__ as __version__  # noqa: E402  (the one source: _version.py)
