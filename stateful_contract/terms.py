"""What reading a saved report takes besides the report: the contract's version and tiers, its title, and
the words for a declared checkpoint policy.

Kept out of `stateful_contract.clauses` (whose package imports every clause, the engine and torch) and
`report.render` (the search's coverage and the scenario's advice) so that a face that only reads a report, the badge, starts
without torch; `clauses.registry` re-exports the version and the tiers, `report.render` the words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from .spellings import Hint

__all__ = ["CONTRACT_VERSION", "ITER_THEN_NEXT", "NOT_JUDGED_ON_ENDLESS", "NOT_ON_ENDLESS", "TIERS", "Tier", "TierInfo", "policy_words", "saves_after_iter",
           "shape_words", "title", "unjudged_words"]

#: Version of the contract the clauses implement (docs/clauses.md states it); shown on reports and badges.
CONTRACT_VERSION = "2.3"

#: How the message of a clause starts that an endless stream leaves out: one that does not apply there (a trainer
#: drawing from one endless stream never makes the calls it judges), and one not judged there though such a
#: trainer may meet what it judges, a gap every face shows beside the verdict (`Report.not_judged_on_endless`).
NOT_ON_ENDLESS = "does not apply to an endless stream"
NOT_JUDGED_ON_ENDLESS = "not judged on an endless stream"

#: ``trainer``: the ways real trainers drive loaders (contract version 2), run by default.
Tier = Literal["structure", "core", "trainer", "distributed", "strict"]


@dataclass(frozen=True)
class TierInfo:
    """What a tier means for a run: whether it runs unasked, from which world size, on the badge."""

    name: Tier
    #: Run without being asked for (the others need ``strict=True``).
    default: bool
    #: Decides the badge's colour; the others are only mentioned in its text.
    on_badge: bool
    #: Runs only on at least this many ranks.
    min_world_size: int = 1
    #: Why one of its clauses is skipped unasked ("not selected" without a ``how``).
    why_skipped: str = "not selected"
    #: The option that runs its clauses.
    how: Hint | None = None

    @property
    def skip_text(self) -> str:
        """Why one of its clauses was skipped, and how to run it, in the words of the current face."""
        return f"{self.why_skipped}: run with {self.how}" if self.how is not None else self.why_skipped


#: Every tier. The strict tier goes beyond StatefulDataLoader's own semantics: it runs on
#: request and never turns the badge red.
TIERS: dict[Tier, TierInfo] = {t.name: t for t in (
    TierInfo("structure", default=True, on_badge=True),
    TierInfo("core", default=True, on_badge=True),
    TierInfo("trainer", default=True, on_badge=True),
    TierInfo("distributed", default=True, on_badge=True, min_world_size=2,
             why_skipped="multi-rank", how=Hint("world_size", 2)),
    TierInfo("strict", default=False, on_badge=False, why_skipped="strict tier",
             how=Hint("strict", True)),
)}


class Versioned(Protocol):
    """A report, as `title` reads it (not imported: the report imports this module)."""

    contract_version: str


def title(report: Versioned) -> str:
    """``StatefulLoader contract v1``: which contract, which version of it."""
    return f"StatefulLoader contract v{report.contract_version}"


#: The fact of a trainer's shape (`clauses.trainer_shape`) under which no checkpoint is drawn right after an
#: ``iter()``, before that pass's first batch: a report's coverage line reads it too.
ITER_THEN_NEXT = "iter-then-next"


def saves_after_iter(shape: Sequence[str]) -> bool:
    """Whether a trainer of the declared ``shape`` can save right after an ``iter()``, before that pass's first
    batch (StatefulDataLoader's semantics say a loader must be exact there: torchdata PR #1368)."""
    return ITER_THEN_NEXT not in shape


def shape_words(shape: list[str] | tuple[str, ...]) -> str:
    """A declared trainer's shape in the words the Markdown and the badge use ("" for none)."""
    return f"trainer {', '.join(shape)}" if shape else ""


def policy_words(alignment: str | None) -> str:
    """A declared checkpoint policy in the words the report, the Markdown and the badge use ("" for none)."""
    if not alignment:
        return ""
    if alignment == "epoch":
        return "checked at epoch ends"
    if alignment == "window":
        return "checked at window boundaries"
    return f"checked every {alignment} batches"


def unjudged_words(ids: Sequence[str]) -> str:
    """The clauses an endless stream left unjudged (`NOT_JUDGED_ON_ENDLESS`), in the words every face writes beside
    a pass, so that none reads as covering them ("" for none)."""
    return f"{', '.join(ids)} {NOT_JUDGED_ON_ENDLESS}" if ids else ""
