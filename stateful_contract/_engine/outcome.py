"""What one clause came to: the `Outcome`, and `outcome_of`, the one mapping from whatever ended an
example (a `ClauseViolation`, a `LoaderError`, a hang) to it, the same for every clause and executor."""

from __future__ import annotations

import functools
import traceback
from dataclasses import KW_ONLY, dataclass, field, fields, replace
from typing import Literal

from .._faces import hint_timeout
from . import steps
from .guard import LoaderHung
from .impact import Impact, loud, where_of
from .steps import EndlessPass, LoaderError, NotJudgeable, PassEnded

__all__ = ["LOADER_CALLS", "ClauseViolation", "Impact", "Outcome", "Status", "last_frame", "outcome_of",
           "unjudged_by"]

#: What an example expected when the loader (or its factory) raised instead of letting it judge anything.
LOADER_CALLS = "every call the contract makes on the loader to succeed"

Status = Literal["passed", "failed", "expected-failure", "unexpected-pass", "not-judged", "skipped"]


@dataclass(eq=False, repr=False)
class ClauseViolation(AssertionError):
    """A clause's statement does not hold: what was expected and what came instead."""

    clause_id: str
    _: KW_ONLY
    heading: str
    expected: str
    got: str
    context: str = ""
    rank: int | None = None
    world_size: int = 1
    #: What this does to a training run (`stateful_contract._engine.impact`).
    impact: Impact | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def message(self) -> str:
        rank = [f"Failed on rank {self.rank} of {self.world_size}"] if self.rank is not None else []
        context = [f"Checkpoint: {self.context}"] if self.context else []
        return "\n".join([self.heading, *rank, *context, f"Expected: {self.expected}", f"Got: {self.got}"])

    def __reduce__(self) -> tuple[object, ...]:  # keyword-only fields: pickle as a call with keywords
        return functools.partial(ClauseViolation, **{f.name: getattr(self, f.name) for f in fields(self)}), ()


@dataclass
class Outcome:
    """One clause's verdict, as the engine found it (before declarations are applied)."""

    status: Status
    expected: str = ""
    got: str = ""
    context: str = ""
    rank: int | None = None
    #: The whole message, as the faces print it (heading, context, expected, got).
    message: str = ""
    reproduction: str = ""
    examples: int = 0
    #: For a search that failed: the examples run when the first counterexample appeared (the rest shrank it).
    found_after: int | None = None
    notes: list[str] = field(default_factory=list)
    #: The plan of the failing example (for a replay), as ``repr``.
    plan: str = ""
    config: str = ""
    #: What the search's examples covered: category -> count (`stateful_contract._engine.coverage`).
    coverage: dict[str, int] = field(default_factory=dict)
    #: What ended the example when it did not end by itself: a signal that killed the loader's process
    #: (``"SIGSEGV"``), ``"exit code 7"``, ``"timeout"`` (interrupted, or killed when it could not be) or
    #: ``"memory limit"``.
    killed_by: str = ""
    #: What the failure does to a training run, on the minimal example (`impact.Impact`); None for a clause
    #: that did not fail, and in reports before format 6.
    impact: Impact | None = None

    @staticmethod
    def of_violation(v: ClauseViolation, **extra: object) -> Outcome:
        outcome = Outcome("failed", expected=v.expected, got=v.got, context=v.context, rank=v.rank,
                          message=v.message, impact=v.impact)
        return replace(outcome, **extra)  # type: ignore[arg-type]


def last_frame(error: BaseException) -> str:
    """`` (at path/to/file.py:12 in fn)``: where ``error`` was raised, its traceback's last frame ("" if none)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename}:{last.lineno} in {last.name})"


def unjudged_by(expected: str, got: str, killed_by: str) -> str:
    """What ended a failed clause's example before its statement could be judged (the loader or its factory
    raised, hung, or took its process down), in one line; "" when the clause judged and found it false."""
    if expected != LOADER_CALLS and not killed_by:
        return ""
    return next((line.strip() for line in got.splitlines() if line.strip()), killed_by)


def _call_in_progress(error: BaseException) -> str:
    """The innermost call into the loader ``error`` was raised in (``loader.load_state_dict(state)``)."""
    found = ""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is steps._user.__code__:
            found = str(tb.tb_frame.f_locals.get("step", ""))
        tb = tb.tb_next
    return found


def outcome_of(error: BaseException, *, clause_id: str, heading: str, rank: int | None = None,
               world_size: int = 1) -> Outcome:
    """The outcome a clause comes to when its example ended with ``error`` (on ``rank``, if several)."""
    rank = rank if world_size > 1 else None
    if isinstance(error, ClauseViolation):
        v = error if rank is None or error.rank is not None else replace(error, rank=rank, world_size=world_size)
        return Outcome.of_violation(v)
    if isinstance(error, NotJudgeable):
        return Outcome("not-judged", got=str(error), message=str(error), rank=rank)
    if isinstance(error, LoaderHung):
        during = _call_in_progress(error)
        expected, got = "each example to finish", (
            f"the loader hung{f' during {during}' if during else ''}: {error}; the run went on with the next clause "
            f"({hint_timeout()} sets the limit)")
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
    else:  # Hypothesis' own verdicts (a flaky loader), or a bug of the loader outside any step
        expected, got, trace = "a verdict that replays", f"{type(error).__name__}: {error}", ""
        during = _call_in_progress(error)
        impact = (loud(during, f"raises {type(error).__name__}") if where_of(during) else
                  Impact("silent", "not reproducible: one example, two results"))
    v = ClauseViolation(clause_id, heading=heading, expected=expected, got=got, rank=rank, world_size=world_size,
                        impact=impact)
    return Outcome.of_violation(v, message=v.message + trace,
                                killed_by="timeout" if isinstance(error, LoaderHung) else "")
