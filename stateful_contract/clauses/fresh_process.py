"""SC10's second half: the saved state resumed in a process that never ran the loader.

A state can be good only in the process that took it (a key into a registry, an ``id()``, a
cache), and a real resume always starts a new process. On one process SC10 resumes every
example that held again in a new interpreter (`_engine.supervised.PendingSibling`), from the
state saved with ``torch.save``; on several ranks SC30 does it (docs/clauses.md, SC10).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from .._engine.compare import first_difference
from .._engine.epoch_steps import take_epochs
from .._engine.example import Example
from .._engine.interpreter import FRESH_INTERPRETER_ENV
from .._engine.plans import Checkpoint, expected_bounds
from .._engine.recording import unrecorded
from .._engine.state_steps import load_checkpoint, save_checkpoint
from .._engine.steps import RESUME_EPOCHS, uninterrupted
from .judgements import no_epoch_lost, same_stream
from .rank_streams import example_folder

__all__ = ["keep_for_a_fresh_process", "one_process_only", "resume_in_a_fresh_process"]

#: The files of one example: the state as a trainer saves it, and what it must resume to (with the
#: first process's epoch lengths). The reproduction's first process saves only the batches, as
#: ``EXPECTED_FILE``.
STATE_FILE = "state.pt"
FIRST_RUN_FILE = "first-run.pt"
EXPECTED_FILE = "expected.pt"


def keep_for_a_fresh_process(example: Example, clause_id: str, state: Any, expected: list[Any],
                             lengths: list[int]) -> None:
    """Save ``state`` (as taken, before anything loads it) and what it resumes to, for the second half:
    no step of the reproduction. What ``torch.save`` cannot write leaves nothing, and that example is
    not resumed again (SC17 judges serialization); on several ranks SC30 resumes, so nothing is kept."""
    if example.world is not None or example.workdir is None:
        return
    folder = example_folder(example, clause_id)
    try:
        save_checkpoint.__wrapped__(state, str(folder / STATE_FILE))  # type: ignore[attr-defined]
        torch.save({"expected": expected, "lengths": lengths}, folder / FIRST_RUN_FILE)
    except Exception:
        for name in (STATE_FILE, FIRST_RUN_FILE):
            with contextlib.suppress(OSError):
                (folder / name).unlink()


def resume_in_a_fresh_process(example: Example, plan: Checkpoint) -> None:
    """SC10 once more, from the saved files, in a process that never ran an example of this check."""
    folder = example_folder(example, "SC10")
    if not (folder / STATE_FILE).exists() or not (folder / FIRST_RUN_FILE).exists():
        return
    saved = torch.load(folder / FIRST_RUN_FILE, weights_only=False)
    lengths: list[int] = saved["lengths"]
    start, stop = expected_bounds(lengths, plan.position)
    program = example.program
    seed = _new_interpreter_seed()
    for line in (
        "# In a first process, the state was taken and saved as a trainer saves it, with the batches it resumes to:",
        "#     import torch",
        "#     from stateful_contract.repro import Position, checkpoint, save_checkpoint, uninterrupted",
        "#     reference, lengths = uninterrupted(factory, config)",
        f"#     torch.save(reference[{start}:{stop}], {EXPECTED_FILE!r})",
        "#     loader = fresh(factory, config)",
        f"#     state = checkpoint(loader, {plan.position.as_code()})",
        f"#     save_checkpoint(state, {STATE_FILE!r})",
        "# and this process, which never built a loader before, resumes from those files"
        + (f" (run it as PYTHONHASHSEED={seed} python ...):" if seed is not None else ":"),
    ):
        program.add(line)
    # What the first process's uninterrupted run yields from the checkpoint on, as it saved it: this
    # process's own run may differ (the stream may depend on the process), and the first one's counts.
    expected = program.expression("expected", f"torch.load({EXPECTED_FILE!r}, weights_only=False)",
                                  saved["expected"])
    path = str(folder / STATE_FILE)
    program.bind(path, repr(STATE_FILE))
    try:
        state = load_checkpoint(path)  # as a trainer reads it back; a refusal here is SC17's to report
    except Exception:
        return
    resumed, passes = take_epochs(example.fresh(state), len(expected), max_epochs=RESUME_EPOCHS)
    where = f"{plan.position.describe(lengths)}; saved with torch.save and resumed in " + (
        "a fresh process" if seed is None else
        f"a new interpreter (run with PYTHONHASHSEED={seed}: another string hash seed than the first process's)")
    if first_difference(expected, resumed) is not None:
        where += _why_it_differs(example, start, stop, expected)
    same_stream(expected, resumed, clause_id="SC10", context=where)
    no_epoch_lost(lengths, plan.position, passes, clause_id="SC10", context=where)


def _new_interpreter_seed() -> str | None:
    """The ``PYTHONHASHSEED`` this process runs with, when it is the new interpreter (else None: a fork)."""
    return os.environ.get("PYTHONHASHSEED") if os.environ.get(FRESH_INTERPRETER_ENV) else None


def _why_it_differs(example: Example, start: int, stop: int, first: list[Any]) -> str:
    """Which of the two causes it is, from this process's own uninterrupted run (not a step of the
    reproduction: it only names the cause)."""
    try:
        with unrecorded():
            reference, _ = uninterrupted(example.factory, example.config)
    except Exception:
        return ""
    if first_difference(first, reference[start:stop]) is not None:
        return ("; a loader never given a state yields other batches here too: the stream itself depends on the "
                "process (the order of a set of str, or of hash() of str, changes with the interpreter's hash seed; "
                "so do id(), the time and os.getpid()), so every resume in a new job continues another stream than "
                "the job that saved the state")
    return ("; a loader never given a state yields the same batches here: the state is only good in the process "
            "that took it (it holds a key into a registry, an id() or a cache that a new process does not have)")


def one_process_only(world_size: int) -> tuple[int | None, ...]:
    """The fresh-process half runs on one process only; on several ranks SC30 resumes in fresh ones."""
    return (None,) if world_size == 1 else ()
