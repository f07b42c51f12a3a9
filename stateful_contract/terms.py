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

__all__ = ["CONTRACT_VERSION", "GAPS", "ITER_THEN_NEXT", "NOT_JUDGED_ON_ENDLESS", "NOT_ON_ENDLESS", "TIERS", "Tier", "TierInfo",
           "Unjudged", "gap_words", "policy_words", "saves_after_iter", "shape_words", "title", "unjudged_from_message"]

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


#: Why a clause came to no verdict (`Outcome.unjudged`; "" for one that did, or was skipped), set where the outcome
#: is made. Two kinds (docs/clauses.md, "Not judged: does not apply, or a gap"): the clause DOES NOT APPLY to the
#: user's run, which never makes the calls it judges, so a pass is complete without it (``policy``: the declared
#: checkpoint policy; ``declared``: a declared fact of the trainer; ``endless-only``: an endless stream's trainer;
#: ``no-call``: the loader has no method the clause judges, which a trainer calls only where it exists), or it could
#: apply and was NOT JUDGED, a gap in what a pass covers that every face names (`GAPS`). ``unrecorded``: a report
#: before format 16, whose kind its message did not tell; shown as before, not as a gap.
Unjudged = Literal["", "policy", "declared", "endless-only", "no-call", "endless", "unobservable", "prerequisite",
                   "slow", "checker-bug", "not-reached", "unrecorded"]

#: The gaps, each with the words every face writes beside a pass after the clauses' IDs (`gap_words`).
GAPS: dict[Unjudged, str] = {
    "endless": NOT_JUDGED_ON_ENDLESS,
    "unobservable": "not judged: the checker could not observe what they judge on this loader",
    "prerequisite": "not judged: a clause they need did not pass",
    "slow": "not judged: too slow for the timeout",
    "checker-bug": "not judged: the checker itself failed",
    "not-reached": "not judged in this run",
}


def gap_words(gaps: Sequence[tuple[str, Unjudged]]) -> str:
    """The clauses a pass does not cover, as (ID, why) pairs, in the one form every face writes beside it:
    ``SC31 not judged on an endless stream; SC30, SC42 not judged: the checker could not ...`` ("" for none)."""
    by_why: dict[str, list[str]] = {}
    for clause_id, why in gaps:
        by_why.setdefault(GAPS[why], []).append(clause_id)
    return "; ".join(f"{', '.join(ids)} {words}" for words, ids in by_why.items())


def unjudged_from_message(message: str) -> Unjudged:
    """A not-judged clause's kind in a report before format 16, from how its message starts (the one place a
    message is read for it): the endless stream's gap, the waivers, else ``unrecorded``."""
    starts: tuple[tuple[str, Unjudged], ...] = (
        (NOT_JUDGED_ON_ENDLESS, "endless"), (NOT_ON_ENDLESS, "endless-only"),
        ("does not apply under the declared checkpoint policy", "policy"), ("does not apply: ", "declared"))
    return next((kind for start, kind in starts if message.startswith(start)), "unrecorded")
