"""The clauses of the StatefulLoader contract, each one registered function.

Importing this package registers every clause; `CLAUSES` is the catalogue in ID order. `.registry`
says how a clause is defined, ``docs/contributing.md`` how to add one.
"""

from __future__ import annotations

from . import (
    distributed,
    in_step,
    resume,
    strict,
    structure,
    trainer,
    whole_epochs,
    worker_change,
    world_change,
)
from .registry import (
    CONTRACT_VERSION,
    TIERS,
    Clause,
    all_clauses,
    default_selection,
    load_prober,
    lookup,
    run_order,
)

__all__ = ["CLAUSES", "CONTRACT_VERSION", "TIERS", "Clause", "clause", "default_selection", "load_prober", "run_order"]

#: Every clause of the contract, in ID order.
CLAUSES: tuple[Clause, ...] = all_clauses()

#: The clause with an ID (``clause("sc10")`` works too); `KeyError` names the known IDs.
clause = lookup

del distributed, in_step, resume, strict, structure, trainer, whole_epochs, worker_change, world_change
