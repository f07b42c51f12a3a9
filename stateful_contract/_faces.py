"""The face a check is run from, and each hint in that face's own words.

One fact has three spellings: a loader's known failure is declared with
``--expect-fail 'SC23=reason'`` on the command line, ``check(..., expected_failures=...)``
from Python and ``expected_failures = {...}`` on a pytest class. A hint that names the
wrong one sends the reader to an option they cannot use, so messages never spell these
themselves: they embed a `token` (``hint_expect_fail("SC23", "torchdata F13")``), which
can be written anywhere (in a clause's child process, in a report), and the check
renders every token in the face it runs under (`speaking`, set by the CLI and the
pytest mixin; plain Python otherwise) with `in_face` before the report is returned.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["Face", "current", "hint_alignment", "hint_clauses", "hint_exitfirst", "hint_expect_fail",
           "hint_expected_failures", "hint_remove_expected", "hint_strict", "hint_world_size", "in_face", "speaking"]

Face = Literal["python", "cli", "pytest"]


@dataclass(frozen=True)
class _Speaker:
    face: Face
    #: The pytest class the check is for (its qualname), where the face is pytest.
    owner: str = ""


_PLAIN = _Speaker("python")
_SPEAKER: contextvars.ContextVar[_Speaker | None] = contextvars.ContextVar("stateful_contract_face", default=None)


@contextlib.contextmanager
def speaking(face: Face, owner: str = "") -> Iterator[None]:
    """Render the hints of the checks run in this block in ``face``'s words (``owner``: the pytest class)."""
    token = _SPEAKER.set(_Speaker(face, owner))
    try:
        yield
    finally:
        _SPEAKER.reset(token)


def _speaker() -> _Speaker:
    return _SPEAKER.get() or _PLAIN


def current() -> Face:
    """The face the hints of this context are spelled for."""
    return _speaker().face


# A token: the kind of hint and its arguments as JSON, between two marks no message has.
_OPEN, _CLOSE = "\u27e6hint:", "\u27e7"
_TOKEN = re.compile(re.escape(_OPEN) + r"([a-z-]+) (.*?)" + re.escape(_CLOSE))


def _token(kind: str, *args: object) -> str:
    return f"{_OPEN}{kind} {json.dumps(list(args))}{_CLOSE}"


def hint_expect_fail(clause_id: str, reason: str) -> str:
    """How to declare ``clause_id`` an expected failure with ``reason``."""
    return _token("expect-fail", clause_id, reason)


def hint_expected_failures() -> str:
    """Where the expected failures are declared (the option, argument or class attribute)."""
    return _token("expected-failures")


def hint_exitfirst() -> str:
    """How to stop at the first failure (and, said of a stopped check, how not to)."""
    return _token("exitfirst")


def hint_remove_expected(clause_id: str) -> str:
    """How to take ``clause_id`` off the expected failures."""
    return _token("remove-expected", clause_id)


def hint_alignment(value: str = "window") -> str:
    """How to declare the loader exact only at window boundaries (or every ``value`` batches)."""
    return _token("alignment", value)


def hint_clauses(*clause_ids: str) -> str:
    """How to run only these clauses."""
    return _token("clauses", *clause_ids)


def hint_strict() -> str:
    """How to run the strict tier too."""
    return _token("strict")


def hint_world_size(n: int = 2) -> str:
    """How to check on ``n`` ranks."""
    return _token("world-size", n)


def _owner(speaker: _Speaker) -> str:
    return f"{speaker.owner}" if speaker.owner else "the test class"


def _spell(kind: str, args: list[object], speaker: _Speaker) -> str:
    face, on = speaker.face, _owner(speaker)
    value = args[0] if args else ""
    if kind == "expect-fail":
        cid, reason = args
        return {"cli": f"--expect-fail '{cid}={reason}'",
                "python": f"check(..., expected_failures={{{json.dumps(cid)}: {json.dumps(reason)}}})",
                "pytest": f"expected_failures = {{{json.dumps(cid)}: {json.dumps(reason)}}} on {on}"}[face]
    if kind == "expected-failures":
        return {"cli": "--expect-fail", "python": "expected_failures", "pytest": f"{speaker.owner}.expected_failures" if speaker.owner
                else "expected_failures on the test class"}[face]
    if kind == "exitfirst":
        return {"cli": "-x/--exitfirst", "python": "exitfirst=True",
                "pytest": f"pytest -x (or exitfirst = True on {on})"}[face]
    if kind == "remove-expected":
        return {"cli": f"drop --expect-fail {value}", "python": f"remove {value!r} from expected_failures",
                "pytest": f"remove {value!r} from {on}.expected_failures"}[face]
    if kind == "alignment":
        literal = json.dumps(value) if value == "window" else str(value)
        return {"cli": f"--checkpoint-alignment {value}", "python": f"check(..., checkpoint_alignment={literal})",
                "pytest": f"checkpoint_alignment = {literal} on {on}"}[face]
    if kind == "clauses":
        ids = [str(a) for a in args]
        return {"cli": f"--clause {','.join(ids)}", "python": f"check(..., clauses={json.dumps(ids)})",
                "pytest": "-k " + (ids[0] if len(ids) == 1 else f"\"{' or '.join(ids)}\"")}[face]
    if kind == "strict":
        return {"cli": "--strict", "python": "check(..., strict=True)", "pytest": f"strict = True on {on}"}[face]
    if kind == "world-size":
        return {"cli": f"--world-size {value}", "python": f"check(..., world_size={value})",
                "pytest": f"world_size = {value} on {on}"}[face]
    raise ValueError(f"unknown hint {kind!r}")


def in_face(text: str, face: Face | None = None) -> str:
    """``text`` with every hint token spelled in ``face``'s words (the current face by default)."""
    if _OPEN not in text:
        return text
    speaker = _speaker() if face is None else _Speaker(face, _speaker().owner)
    return _TOKEN.sub(lambda m: _spell(m.group(1), json.loads(m.group(2)), speaker), text)
