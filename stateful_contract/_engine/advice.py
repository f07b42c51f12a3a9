"""Advisories: what a judgement that holds still wants its user to know.

A clause can pass and still have something to say: a resume refused with an exception
that does not name the mismatch (SC23, SC31) loses nothing, so it passes, but the person
whose job was restarted gets an error that does not say why. The judgement calls
`advise(text)` wherever it runs (in the loader's process, on a rank, in the caller's
world judgement); `run_example` collects what the scenario advised into the
`ExampleRun`, which carries it back across any process boundary; the caller collects
again around the whole search and the fresh-process half (`collecting`), and the
clause's outcome gets each advisory once, as a note starting with `PREFIX`, however
many examples, ranks or processes gave it. The faces show those notes under passing
clauses too (other notes are shown only with a failure).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

__all__ = ["PREFIX", "advise", "advisories", "collecting"]

#: How an advisory note starts in `Outcome.notes` / `ClauseResult.notes` (and in the JSON report).
PREFIX = "advisory: "

_SINK: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("stateful_contract_advice", default=None)


def advise(text: str) -> None:
    """Tell the clause's user ``text``, once, without failing anything (nothing collecting: dropped)."""
    sink = _SINK.get()
    note = text if text.startswith(PREFIX) else PREFIX + text
    if sink is not None and note not in sink:
        sink.append(note)


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """Collect what is advised in this block, in order and without repeats."""
    sink: list[str] = []
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def advisories(notes: Iterable[str]) -> list[str]:
    """The advisories among a result's notes, without the prefix."""
    return [n.removeprefix(PREFIX) for n in notes if n.startswith(PREFIX)]
