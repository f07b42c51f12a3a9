"""The face a check is run from, and each hint in that face's own words (docs/pytest.md, "The mixin").

A hint in another face's spelling (``--expect-fail 'SC23=reason'`` to a pytest class) sends the reader to an
option they cannot use. So messages embed a token (``hint_expect_fail("SC23", "torchdata F13")``), written
anywhere (in a child process, in a report), that `in_face` renders in the face `speaking` names (set by the
CLI and the pytest mixin; plain Python otherwise) before the report is returned.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import re
from collections.abc import Iterator
from typing import Literal

__all__ = ["Face", "hint_alignment", "hint_clauses", "hint_declare", "hint_epoch_hook", "hint_exitfirst",
           "hint_expect_fail", "hint_expected_failures", "hint_layout", "hint_memory_limit", "hint_remove_expected",
           "hint_strict", "hint_timeout", "hint_world_size", "in_face", "speaking"]

Face = Literal["python", "cli", "pytest"]

#: The face hints are spelled in, and under pytest the qualname of the class the check is for.
_SPEAKER: contextvars.ContextVar[tuple[Face, str]] = contextvars.ContextVar("stateful_contract_face",
                                                                           default=("python", ""))


@contextlib.contextmanager
def speaking(face: Face, owner: str = "") -> Iterator[None]:
    """Render the hints of the checks run in this block in ``face``'s words (``owner``: the pytest class)."""
    token = _SPEAKER.set((face, owner))
    try:
        yield
    finally:
        _SPEAKER.reset(token)


# A token: the kind of hint and its arguments as JSON, between two marks no message has.
_OPEN, _CLOSE = "\u27e6hint:", "\u27e7"
_TOKEN = re.compile(re.escape(_OPEN) + r"([a-z-]+) (.*?)" + re.escape(_CLOSE))


def _token(kind: str, *args: object) -> str:
    return f"{_OPEN}{kind} {json.dumps(list(args))}{_CLOSE}"


# Each hint: its kind and arguments, spelled by `in_face`.
hint_expect_fail = functools.partial(_token, "expect-fail")  # (clause_id, reason): how to declare it
hint_expected_failures = functools.partial(_token, "expected-failures")  # where the declarations go
hint_exitfirst = functools.partial(_token, "exitfirst")  # how to stop at the first failure (or not to)
hint_remove_expected = functools.partial(_token, "remove-expected")  # (clause_id): how to drop its declaration
hint_alignment = functools.partial(_token, "alignment")  # (value="window"): how to declare the alignment
hint_clauses = functools.partial(_token, "clauses")  # (*clause_ids): how to run only these clauses
hint_strict = functools.partial(_token, "strict")  # how to run the strict tier too
hint_world_size = functools.partial(_token, "world-size")  # (n): how to check on n ranks
hint_epoch_hook = functools.partial(_token, "epoch-hook")  # (name): how to declare the trainer's call at each epoch
hint_declare = functools.partial(_token, "declare")  # (field): how to declare a trainer's boolean fact
hint_layout = functools.partial(_token, "layout")  # (layout): how to declare the checkpoint layout
hint_timeout = functools.partial(_token, "timeout")  # how to set an example's time limit
hint_memory_limit = functools.partial(_token, "memory-limit")  # how to set the memory an example may gain

#: Each kind's spelling on the command line, from Python and on a pytest class (`_spell` fills them in).
_SPELLINGS = {
    "expect-fail": ("--expect-fail '{0}={1}'", "check(..., expected_failures={{{j0}: {j1}}})",
                    "expected_failures = {{{j0}: {j1}}} on {on}"),
    "expected-failures": ("--expect-fail", "expected_failures", "{declared}"),
    "exitfirst": ("-x/--exitfirst", "exitfirst=True", "pytest -x (or exitfirst = True on {on})"),
    "remove-expected": ("drop --expect-fail {0}", "remove {r0} from expected_failures",
                        "remove {r0} from {on}.expected_failures"),
    "alignment": ("--checkpoint-alignment {0}", "check(..., checkpoint_alignment={literal})",
                  "checkpoint_alignment = {literal} on {on}"),
    "clauses": ("--clause {joined}", "check(..., clauses={listed})", "-k {selected}"),
    "strict": ("--strict", "check(..., strict=True)", "strict = True on {on}"),
    "world-size": ("--world-size {0}", "check(..., world_size={0})", "world_size = {0} on {on}"),
    "epoch-hook": ("--epoch-hook {0}", "check(..., epoch_hook={j0})", "epoch_hook = {j0} on {on}"),
    "declare": ("--{flag}", "check(..., {0}=True)", "{0} = True on {on}"),
    "layout": ("--checkpoint-layout {0}", "check(..., checkpoint_layout={j0})", "checkpoint_layout = {j0} on {on}"),
    "timeout": ("--timeout", "check(..., timeout=...)", "timeout = ... on {on}"),
    "memory-limit": ("--memory-limit", "check(..., memory_limit=...)", "memory_limit = ... on {on}"),
}
_FACES: tuple[Face, ...] = ("cli", "python", "pytest")


def _spell(kind: str, args: list[object], face: Face, owner: str) -> str:
    if kind == "alignment" and not args:
        args = ["window"]
    ids, first = [str(a) for a in args], args[0] if args else ""
    fields = {"on": owner or "the test class", "joined": ",".join(ids), "listed": json.dumps(ids),
              "selected": ids[0] if len(ids) == 1 else f"\"{' or '.join(ids)}\"",
              "declared": f"{owner}.expected_failures" if owner else "expected_failures on the test class",
              "literal": json.dumps(first) if first in ("window", "epoch") else str(first),
              "flag": str(first).replace("_", "-"),
              **{f"j{i}": json.dumps(a) for i, a in enumerate(args)},
              **{f"r{i}": repr(a) for i, a in enumerate(args)}}
    try:
        return _SPELLINGS[kind][_FACES.index(face)].format(*args, **fields)
    except KeyError:
        raise ValueError(f"unknown hint {kind!r}") from None


def in_face(text: str, face: Face | None = None) -> str:
    """``text`` with every hint token spelled in ``face``'s words (the current face by default)."""
    if _OPEN not in text:
        return text
    current, owner = _SPEAKER.get()
    return _TOKEN.sub(lambda m: _spell(m.group(1), json.loads(m.group(2)), face or current, owner), text)
