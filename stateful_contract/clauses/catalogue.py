"""The clause catalogue: stable IDs, names and statements (CONTRACT.md, version 1).

IDs are public names that downstream reports, badges and expected-failure lists
refer to: never renumber, only add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CLAUSES", "CONTRACT_VERSION", "Clause", "clause"]

#: Version of the contract text the clauses implement; shown on reports and badges.
CONTRACT_VERSION = "1"

Tier = Literal["structure", "core", "distributed", "strict"]


@dataclass(frozen=True)
class Clause:
    id: str
    name: str
    tier: Tier
    statement: str


CLAUSES: tuple[Clause, ...] = (
    Clause("SC01", "implements-protocol", "structure",
           "The loader has callable `__iter__`, `state_dict` and `load_state_dict`."),
    Clause("SC02", "load-accepts-positional-state", "structure",
           "`load_state_dict(state)` with one positional argument works, as "
           "`StatefulDataLoader.load_state_dict(state_dict)` does."),
    Clause("SC03", "state-is-a-str-keyed-dict", "structure",
           "`state_dict()` returns a `dict` with `str` keys at every point: before "
           "iterating, mid-epoch, at epoch end."),
    Clause("SC10", "resume-continues-the-stream", "core",
           "For any checkpoint point, a fresh loader given `load_state_dict(state)` yields "
           "exactly the batches the uninterrupted loader yields from that point on, every "
           "field of every batch, for at least two further epochs."),
    Clause("SC11", "resume-survives-several-hops", "core",
           "A state taken from a resumed loader, before or after it iterated, resumes "
           "exactly too (run 1, run 2, run 3)."),
    Clause("SC12", "state-before-first-batch-resumes", "core",
           "`state_dict()` before any iteration works and resumes to the full stream."),
    Clause("SC13", "state-after-load-is-the-loaded-state", "core",
           "`state_dict()` right after `load_state_dict`, before iterating, resumes to the "
           "same point as the loaded state."),
    Clause("SC14", "state-dict-does-not-disturb", "core",
           "Calling `state_dict()` at any point, even every step, leaves the stream unchanged."),
    Clause("SC15", "state-is-a-snapshot", "core",
           "A state already returned does not change when the loader iterates on "
           "(no live references)."),
    Clause("SC16", "load-leaves-its-argument-alone", "core",
           "`load_state_dict` does not modify the dict it is given; the same state loads "
           "into several loaders with the same result."),
    Clause("SC17", "state-survives-serialization", "core",
           "The state round-trips through `torch.save` + `torch.load(weights_only=True)`, "
           "`pickle` and `copy.deepcopy`, and the round-tripped state resumes exactly."),
    Clause("SC18", "same-config-same-stream", "core",
           "Two fresh loaders from one config yield the same stream; where this fails, "
           "resume clauses are not judgeable."),
    Clause("SC30", "every-rank-resumes", "distributed",
           "Each rank's loader resumes its own stream exactly from its own saved state, and "
           "over all ranks the resumed streams cover exactly the samples the uninterrupted "
           "run would have covered: none lost, none repeated."),
    Clause("SC40", "bad-state-is-refused", "strict",
           "`None`, `{}`, a non-dict, a state with missing or unknown keys, and a state from "
           "another config or rank are refused with an exception that names the problem, at "
           "`load_state_dict` or at the next `iter()`, never a silent restart."),
)

_BY_ID = {c.id: c for c in CLAUSES}


def clause(clause_id: str) -> Clause:
    """The clause with this ID; `KeyError` names the known IDs."""
    try:
        return _BY_ID[clause_id.upper()]
    except KeyError:
        raise KeyError(f"unknown clause {clause_id!r}; known: {', '.join(_BY_ID)}") from None
