"""The trainer's shape: what the user's trainer does with its loader, declared (`CheckOptions.trainer_shape`).

A clause judges one call sequence. Where a trainer never makes it, a failure of that clause costs that
trainer's run nothing, and the loader is no worse for it: the user declares the trainer's shape, and a clause
that judges only a sequence the shape excludes is not judged, saying so (`Clause.waived_by` names the fact).
Every other clause still judges, and with nothing declared every clause judges `StatefulDataLoader`'s
semantics. Each fact here is what the anchor trainers were read to do (docs/clauses.md, "Trainer shapes",
has the table, with the file and commit of each); a fact no clause reads is not offered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..search.plans import Alignment, SavePoints
from ..terms import ITER_THEN_NEXT, saves_after_iter

__all__ = ["ITER_THEN_NEXT", "TRAINER_SHAPES", "WHOLE_PASSES", "save_points", "shape_of"]

#: The fact of a trainer's shape under which SC22 is not judged: the trainer never leaves a pass for a new
#: ``iter()`` before the pass's ``StopIteration`` (Hugging Face's Trainer: docs/clauses.md, "Trainer shapes").
WHOLE_PASSES = "whole-passes"

#: Each fact a trainer's shape may hold, and what it says the trainer does (the words of the report).
TRAINER_SHAPES = {
    "loads-fresh": "your trainer loads a checkpoint only into a freshly built loader, before its first iter(), "
                   "and never reloads into one it has iterated (no rollback or retry into the same object)",
    ITER_THEN_NEXT: "your trainer draws each pass's first batch at once after its iter(), so it never saves "
                    "between the two: no checkpoint is drawn right after an iter(), before that pass's first batch "
                    "(every other point is)",
    WHOLE_PASSES: "your trainer runs every pass to its end (StopIteration) before its next iter(): it never breaks "
                  "out of a pass to start another (it may stop training inside one, and resume there)",
}


def save_points(alignment: Alignment, shape: Sequence[str]) -> SavePoints:
    """Where a trainer with the checkpoint policy ``alignment`` and the declared ``shape`` saves: what every
    plan of the check draws its checkpoints from."""
    return SavePoints(alignment, after_iter=saves_after_iter(shape))


def shape_of(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The declared facts, as every face gives them (``"loads-fresh"``, ``"a,b"``, a list of them, None for
    none), in `TRAINER_SHAPES` order; `ValueError` names a fact that is not one."""
    if value is None:
        return ()
    given = value.split(",") if isinstance(value, str) else list(value)
    facts = {str(f).strip().lower() for f in given if str(f).strip()}
    unknown = sorted(facts - set(TRAINER_SHAPES))
    if unknown:
        raise ValueError(f"names {', '.join(map(repr, unknown))}, which is no fact of a trainer's shape "
                         f"(known: {', '.join(TRAINER_SHAPES)})")
    return tuple(f for f in TRAINER_SHAPES if f in facts)
