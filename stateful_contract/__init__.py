"""stateful-contract: does your dataloader wrapper checkpoint and resume like StatefulDataLoader?

>>> from stateful_contract import check
>>> report = check(my_factory)          # factory(config: LoaderConfig) -> loader
>>> report.passed, report["SC10"].message

The contract's clauses (SC01...) are listed in `CLAUSES`; `StatefulLoader` is the
typing Protocol a checkpointable loader satisfies.
"""

from __future__ import annotations

from .check import FactoryError, Progress, check
from .clauses.catalogue import CLAUSES, CONTRACT_VERSION, Clause
from .clauses.violation import ClauseViolation
from .config import ConfigSpace, LoaderConfig, TokenDataset, loader_configs
from .protocol import StatefulLoader
from .report import ClauseResult, Report

__all__ = [
    "CLAUSES",
    "CONTRACT_VERSION",
    "Clause",
    "ClauseResult",
    "ClauseViolation",
    "ConfigSpace",
    "FactoryError",
    "LoaderConfig",
    "Progress",
    "Report",
    "StatefulLoader",
    "TokenDataset",
    "check",
    "loader_configs",
]

__version__ = "0.1.0"
