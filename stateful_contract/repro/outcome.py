"""What one clause came to: the `Outcome`, and `outcome_of`, the one mapping from whatever ended an
example (a `ClauseViolation`, a `LoaderError`, a hang) to it, the same for every clause and executor."""

from __future__ import annotations

import functools
import os
import traceback
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from ..links import ISSUES
from ..spellings import Hint
from ..terms import GAPS, Unjudged
from .impact import Impact, loud, where_of
from .socket_dir import socket_dir_problem

# steps (and through it the config's datasets) imports torch: imported by the two functions that map a
# running example's end, so that an `Outcome` (every saved report holds some) reads without torch.

__all__ = ["LOADER_CALLS", "ClauseViolation", "Impact", "Outcome", "Status", "last_frame", "outcome_of",
           "raised_in_the_checker", "unjudged_by"]

#: What an example expected when the loader (or its factory) raised instead of letting it judge anything.
LOADER_CALLS = "every call the contract makes on the loader to succeed"

Status = Literal["passed", "failed", "expected-failure", "unexpected-pass", "not-judged", "skipped"]


@dataclass
class Outcome:
    """One clause's verdict, as the engine found it (before declarations are applied), from the clause's
    `violated(...)` (a `ClauseViolation` is an outcome, raised) to the report's `ClauseResult` (an outcome
    under the clause's name): plain fields that pickle across every process boundary, the message rendered
    from them when it is read, never parsed back."""

    status: Status
    expected: str = ""
    got: str = ""
    context: str = ""
    rank: int | None = None
    #: The clause's rule (``SC10 ...``), the message's first line; "" for a clause that did not fail.
    heading: str = ""
    #: What the message says after ``Got:`` (what the loader's process was doing, a traceback); for a clause
    #: that did not fail (not judged, skipped, an unexpected pass), the whole message.
    detail: str = ""
    #: The ranks the failing example ran on (the message says "Failed on rank R of N" when over one).
    world_size: int = 1
    reproduction: str = ""
    examples: int = 0
    #: For a search that failed: the examples run when the first counterexample appeared (the rest shrank it).
    found_after: int | None = None
    notes: list[str] = field(default_factory=list)
    #: The plan of the failing example (for a replay), as ``repr``.
    plan: str = ""
    config: str = ""
    #: What the search's examples covered: category -> count (`stateful_contract.search.coverage`).
    coverage: dict[str, int] = field(default_factory=dict)
    #: What ended the example when it did not end by itself: a signal that killed the loader's process
    #: (``"SIGSEGV"``), ``"exit code 7"``, ``"timeout"`` (interrupted, or killed when it could not be) or
    #: ``"memory limit"``.
    killed_by: str = ""
    #: What the failure does to a training run, on the minimal example (`impact.Impact`); None for a clause
    #: that did not fail, and in reports before format 6.
    impact: Impact | None = None
    #: Why a ``not-judged`` clause came to no verdict: it does not apply to the user's run, or a gap in what a pass
    #: covers (`terms.Unjudged`, set where the outcome is made; a not-judged outcome made without one is a gap the
    #: checker could not observe). "" for a clause that came to a verdict.
    unjudged: Unjudged = ""

    def __post_init__(self) -> None:
        if self.status == "not-judged" and not self.unjudged:
            self.unjudged = "unobservable"

    @property
    def is_gap(self) -> bool:
        """Not judged though the user's run may meet what the clause judges: a pass does not cover it."""
        return self.status == "not-judged" and (self.unjudged in GAPS or not self.unjudged)  # "": set after making

    @property
    def message(self) -> str:
        """The whole message, as the faces print it: the rule (`heading`), then the `body`."""
        return "\n".join(part for part in (self.heading, self.body) if part)

    @property
    def body(self) -> str:
        """The message after its rule: the rank, the checkpoint, expected, got, and the detail (only the detail
        for a clause whose statement was not judged false)."""
        if not self.expected:
            return self.detail
        rank = [f"Failed on rank {self.rank} of {self.world_size}"] if self.rank is not None else []
        context = [f"Checkpoint: {self.context}"] if self.context else []
        return "\n".join([*rank, *context, f"Expected: {self.expected}", f"Got: {self.got}"]) + self.detail

    def plain(self) -> Outcome:
        """This verdict as a plain `Outcome` (a violation's or a result's own fields, without the exception or
        the clause's name)."""
        return Outcome(**{f.name: getattr(self, f.name) for f in fields(Outcome)})


class ClauseViolation(Outcome, AssertionError):
    """A clause's statement does not hold: its failed `Outcome`, raised (what was expected and what came
    instead, what it does to a training run: `impact.Impact`)."""

    __eq__ = AssertionError.__eq__  # an exception: compared and hashed as itself, not by its fields
    __hash__ = AssertionError.__hash__
    __repr__ = AssertionError.__repr__

    def __init__(self, clause_id: str = "", *, heading: str, expected: str, got: str, context: str = "",
                 rank: int | None = None, world_size: int = 1, impact: Impact | None = None,
                 **more: Any) -> None:
        Outcome.__init__(self, "failed", expected=expected, got=got, context=context, rank=rank,
                         heading=heading, world_size=world_size, impact=impact, **more)
        AssertionError.__init__(self, self.message)

    def __str__(self) -> str:
        return self.message  # the fields may change after it is raised (a hint added to ``got``)

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only fields: pickle as a call with keywords
        values = {f.name: getattr(self, f.name) for f in fields(Outcome) if f.name != "status"}
        return functools.partial(ClauseViolation, **values), ()


def last_frame(error: BaseException) -> str:
    """`` (at path/to/file.py:12 in fn)``: where ``error`` was raised, its traceback's last frame ("" if none)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno} in {last.name})"


#: The package's own folder: an exception whose last frame is in it was raised by the checker's code.
_PACKAGE = str(Path(__file__).resolve().parents[1]) + os.sep


def raised_in_the_checker(error: BaseException) -> str | None:
    """``path:line in fn`` where ``error`` was raised, when that is the package's own code and ``error`` none
    of the engine's own verdicts (a violation, the loader's exception, a hang, a pass that never ends), else
    None."""
    from .guard import LoaderHung  # LoaderSlow is one
    from .steps import EndlessPass, LoaderError, NotJudgeable, PassEnded

    if isinstance(error, (ClauseViolation, NotJudgeable, LoaderHung, EndlessPass, PassEnded, LoaderError)):
        return None
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not str(Path(frames[-1].filename).resolve()).startswith(_PACKAGE):
        return None
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def unjudged_by(expected: str, got: str, killed_by: str) -> str:
    """What ended a failed clause's example before its statement could be judged (the loader or its factory
    raised, hung, or took its process down), in one line; "" when the clause judged and found it false."""
    if expected != LOADER_CALLS and not killed_by:
        return ""
    return next((line.strip() for line in got.splitlines() if line.strip()), killed_by)


def _call_in_progress(error: BaseException) -> str:
    """The innermost call into the loader ``error`` was raised in (``loader.load_state_dict(state)``)."""
    from . import steps

    found = ""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is steps._user.__code__:
            found = str(tb.tb_frame.f_locals.get("step", ""))
        tb = tb.tb_next
    return found


def outcome_of(error: BaseException, *, heading: str, rank: int | None = None,
               world_size: int = 1) -> Outcome:
    """The outcome a clause comes to when its example ended with ``error`` (on ``rank``, if several)."""
    from .guard import LoaderHung, LoaderSlow
    from .steps import EndlessPass, LoaderError, NotJudgeable, PassEnded

    rank = rank if world_size > 1 else None
    if isinstance(error, ClauseViolation):
        outcome = error.plain()
        return outcome if rank is None or outcome.rank is not None else replace(outcome, rank=rank,
                                                                                 world_size=world_size)
    if isinstance(error, NotJudgeable):
        return Outcome("not-judged", got=str(error), detail=str(error), rank=rank, unjudged=error.unjudged)
    if isinstance(error, LoaderSlow):  # no hang: no verdict at this timeout (docs/supervision.md)
        why = (f"{error}, though the loader kept answering (a call into it began or returned {error.quiet:.1f} s "
               f"before the limit): it is too slow for this timeout to judge, which is no hang; raise the limit "
               f"({Hint('timeout')}) to judge this clause")
        return Outcome("not-judged", got=why, detail=why, rank=rank, unjudged="slow")
    if isinstance(error, LoaderHung):
        during = _call_in_progress(error)
        expected, got = "each example to finish", (
            f"the loader hung{f' during {during}' if during else ''}: {error}; the run went on with the next clause "
            f"({Hint('timeout')} sets the limit)")
        if error.had_children and (cause := socket_dir_problem()):  # said on the workers' stderr alone
            got += f"; likely cause: {cause}"
        trace = ""
        impact = loud(during, "hangs: the job stops")  # a hang at resume stops the job as a crash does
    elif isinstance(error, EndlessPass):
        expected = (f"every pass over the loader to end with StopIteration, as one epoch of the config's dataset "
                    f"does (within {error.limit} batches)")
        got, trace = str(error), ""
        # No call raises: the trainer's epoch never ends, and the loader's data comes round again.
        impact = Impact("silent", "an epoch never ends: its data repeats without end")
    elif isinstance(error, PassEnded):
        expected = "every pass over an endless loader to go on without end (no StopIteration)"
        got, trace = str(error), ""
        impact = loud("next(iter(loader))", "raises StopIteration: the endless stream ended")
    elif isinstance(error, LoaderError):
        expected, got = LOADER_CALLS, f"{error}{last_frame(error.error)}"
        tb = "".join(traceback.format_exception(type(error.error), error.error, error.error.__traceback__))
        trace = f"\n\nTraceback of the loader's exception:\n{tb.rstrip()}"
        impact = loud(error.step, f"raises {type(error.error).__name__}")
    elif (inside := raised_in_the_checker(error)) is not None:
        # Not the loader's: every call into the loader is a step, and what it raises comes as a LoaderError.
        why = (f"stateful-contract itself raised {type(error).__name__}: {error} (at {inside}): a bug of the "
               f"checker, not a verdict on the loader; please report it with this message ({ISSUES})")
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return Outcome("not-judged", got=why, detail=f"{why}\n\nTraceback:\n{tb.rstrip()}", rank=rank,
                       unjudged="checker-bug")
    else:  # Hypothesis' own verdicts (a flaky loader), or a bug of the loader outside any step
        expected, got, trace = "a verdict that replays", f"{type(error).__name__}: {error}", ""
        during = _call_in_progress(error)
        impact = (loud(during, f"raises {type(error).__name__}") if where_of(during) else
                  Impact("silent", "not reproducible: one example, two results"))
    return Outcome("failed", expected=expected, got=got, rank=rank, heading=heading, detail=trace,
                   world_size=world_size, impact=impact, killed_by="timeout" if isinstance(error, LoaderHung) else "")
