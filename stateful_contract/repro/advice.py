"""Advisories: what a judgement that holds still wants its user to know (a resume refused with an exception
that does not name the mismatch, SC23, SC31). `advise(text)` wherever it runs; the `ExampleRun` carries it
back, and the outcome gets each once, as a note starting with `PREFIX`."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable

from .recording import bound

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


def collecting() -> contextlib.AbstractContextManager[list[str]]:
    """Collect what is advised in this block, in order and without repeats."""
    return bound(_SINK, [])


def advisories(notes: Iterable[str]) -> list[str]:
    """The advisories among a result's notes, without the prefix."""
    return [n.removeprefix(PREFIX) for n in notes if n.startswith(PREFIX)]
