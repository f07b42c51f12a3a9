"""Core resume clauses (SC10-SC18): a fresh loader given a state continues the stream.

Each clause is one scenario: steps on the loader (`stateful_contract.repro`), then a pure judgement against
the uninterrupted run, taken once per config. Where SC10's second half resumes, and why (a state may be good
only in the process that took it): docs/clauses.md, SC10, "In a fresh process".
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from ..isolation.interpreter import FRESH_INTERPRETER_ENV
from ..repro.compare import Wording, first_difference
from ..repro.endless import describe
from ..repro.epoch_steps import take_epochs
from ..repro.exception_text import exception_text
from ..repro.impact import Impact
from ..repro.recording import unrecorded
from ..repro.state_steps import (
    ROUND_TRIPS,
    indistinguishable,
    load_checkpoint,
    round_trip,
    save_checkpoint,
    snapshot,
)
from ..repro.steps import (
    Position,
    advance,
    checkpoint,
    iterate_on,
    state_of,
    stream,
    stream_calling_state_dict,
    take,
    uninterrupted,
)
from ..repro.vocabulary import batch_count
from ..search.example import Example
from ..search.plans import (
    WHOLE_STREAM_EPOCHS,
    Checkpoint,
    Hops,
    StateCalls,
    checkpoint_plan,
    expected_bounds,
    hops_plan,
    snapshot_plan,
    state_calls_plan,
)
from .judgements import no_epoch_lost, same_stream, unchanged
from .rank_streams import example_folder
from .registry import RESUMES, clause, violated

__all__: list[str] = []  # each clause registers itself (`clause`): nothing here is imported


#: One example's files: the state as a trainer saves it, and what it resumes to (with the first process's
#: epoch lengths); the reproduction's first process saves only the batches, as ``EXPECTED_FILE``.
STATE_FILE = "state.pt"
FIRST_RUN_FILE = "first-run.pt"
EXPECTED_FILE = "expected.pt"


def keep_for_a_fresh_process(example: Example, state: Any, expected: list[Any], lengths: list[int]) -> None:
    """Save ``state`` (as taken, before any load) and what it resumes to, for the second half; no step of
    the reproduction. What ``torch.save`` cannot write leaves nothing and is not resumed again (SC17
    judges it); on several ranks SC30 resumes, so nothing is kept."""
    if example.world is not None or example.workdir is None:
        return
    folder = example_folder(example, "SC10")
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
    # This process's hash seed, when it is the new interpreter (None: a fork, which has the first one's).
    seed = os.environ.get("PYTHONHASHSEED") if os.environ.get(FRESH_INTERPRETER_ENV) else None
    first = "\n".join((
        program.factory_import,
        "import torch",
        "from stateful_contract.repro import LoaderConfig, Position, checkpoint, fresh, save_checkpoint, uninterrupted",
        f"config = {example.config.as_code()}",
        "reference, lengths = uninterrupted(factory, config)",
        f"torch.save(reference[{start}:{stop}], {EXPECTED_FILE!r})",
        "loader = fresh(factory, config)",
        f"state = checkpoint(loader, {plan.position.as_code()})",
        f"save_checkpoint(state, {STATE_FILE!r})"))
    # The first process runs as a child of the pasted program (its own interpreter, so its own string hash
    # seed too), and the program goes on as the second: pasted, the reproduction is both.
    # Where the hash seed matters, the first process gets another than the one this process is told to run with.
    env = "" if seed is None else f", env={{**os.environ, 'PYTHONHASHSEED': '{int(seed == '0')}'}}"
    for line in (
        "# A first process takes the state and saves it as a trainer saves it, with the batches it resumes to:",
        f'subprocess.run([sys.executable, "-c", """\n{first}\n"""]{env}, check=True)',
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
    resumed, passes = take_epochs(example.fresh(state), len(expected), max_epochs=example.passes)
    # In the first process's words (this one's own uninterrupted run is no step of the reproduction).
    point = describe(plan.position, example.config) if example.config.endless else plan.position.describe(lengths)
    where = f"{point}; saved with torch.save and resumed in " + (
        "a fresh process" if seed is None else
        f"a new interpreter (run with PYTHONHASHSEED={seed}: another string hash seed than the first process's)")
    if first_difference(expected, resumed) is not None:
        where += _why_it_differs(example, start, stop, expected)
    same_stream(expected, resumed, clause_id="SC10", context=where)
    if not example.config.endless:  # an endless stream has one pass, never an empty one
        no_epoch_lost(lengths, plan.position, passes, clause_id="SC10", context=where)


def _why_it_differs(example: Example, start: int, stop: int, first: list[Any]) -> str:
    """Which of the two causes it is, from this process's own uninterrupted run (no reproduction step)."""
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


@clause("SC10", "resume-continues-the-stream", tier="core", kills=13, cost=4, plan=checkpoint_plan, needs=RESUMES,
        after_restart=(resume_in_a_fresh_process, None),  # the fresh process judges its own resume
        restart_worlds=one_process_only)
def resume_continues_the_stream(example: Example, plan: Checkpoint) -> None:
    """For any checkpoint point, a fresh loader given `load_state_dict(state)` yields exactly the
    batches the uninterrupted loader yields from that point on, every field of every batch, for at
    least two further epochs.

    Then in a fresh process (see the module docstring), and with epoch alignment
    (contract version 2): docs/clauses.md, SC10.
    """
    expected = example.expected_after(plan.position)
    state = checkpoint(example.fresh(), plan.position)
    lengths = example.reference()[1]
    keep_for_a_fresh_process(example, state, expected, lengths)  # before any load
    resumed, passes = take_epochs(example.fresh(state), len(expected), max_epochs=example.passes)
    same_stream(expected, resumed, clause_id="SC10", context=example.where(plan.position))
    # Epoch alignment: an empty pass is an epoch lost, except where torchdata's own loader has one (an
    # endless stream has one pass, never an empty one).
    if not example.config.endless:
        no_epoch_lost(lengths, plan.position, passes, clause_id="SC10", context=example.where(plan.position))


@clause("SC11", "resume-survives-several-hops", tier="core", kills=17, cost=7, plan=hops_plan, needs=RESUMES)
def resume_survives_several_hops(example: Example, plan: Hops) -> None:
    """A state taken from a resumed loader, before or after it iterated, resumes exactly too
    (run 1, run 2, run 3)."""
    _, lengths = example.reference()
    start = plan.position.absolute(lengths)
    last = plan.stops[-1]
    expected = example.segment("expected", last, max(sum(lengths[:3]), last))
    state = checkpoint(example.fresh(), plan.position)  # run 1
    opened = plan.after_iter or (False,) * len(plan.stops)
    passes = plan.passes or (None,) * len(plan.stops)  # whole passes: under the epoch-end policy
    # Runs 2, 3: resume, iterate on, checkpoint again.
    for previous, stop, after_iter, whole in zip((start, *plan.stops), plan.stops, opened, passes):
        loader = example.fresh(state)
        if after_iter:
            advance(loader, Position())  # iter(), no batch yet: the state must still be the loaded one
        elif whole:
            stream(loader, whole)  # each pass to its StopIteration, where the policy checkpoints
        elif whole is None:
            take(loader, stop - previous, max_epochs=example.passes)
        state = state_of(loader)
    hops = " -> ".join("iter() and no batch" if opened_ else "no iter()" if b == a and not whole
                       else f"{whole} more whole pass{'es' if whole != 1 else ''}" if whole
                       else f"{batch_count(b - a)} more"
                       for a, b, opened_, whole in zip((start, *plan.stops), plan.stops, opened, passes))
    same_stream(expected, example.resumed(state, len(expected)), clause_id="SC11",
                context=f"run 1 checkpointed {example.where(plan.position)}; then resumed and checkpointed after {hops}")


@clause("SC12", "state-before-first-batch-resumes", tier="core", kills=1, cost=5, needs=RESUMES)
def state_before_first_batch_resumes(example: Example, plan: None) -> None:
    """`state_dict()` before any iteration works and resumes to the full stream."""
    _, lengths = example.reference()
    expected = example.segment("expected", 0, sum(lengths[:WHOLE_STREAM_EPOCHS]))
    state = state_of(example.fresh())  # never iterated
    same_stream(expected, example.resumed(state, len(expected)), clause_id="SC12",
                context="state_dict() on a loader never iterated",
                what="the resumed loader to yield the full stream from its first batch")


@clause("SC13", "state-after-load-is-the-loaded-state", tier="core", kills=14, cost=3, plan=checkpoint_plan,
        needs=RESUMES)
def state_after_load_is_the_loaded_state(example: Example, plan: Checkpoint) -> None:
    """`state_dict()` right after `load_state_dict`, before iterating, resumes to the same point as
    the loaded state."""
    expected = example.expected_after(plan.position)
    state = checkpoint(example.fresh(), plan.position)
    loaded = example.fresh(state)
    again = state_of(loaded)  # before iterating
    where = f"state taken {example.where(plan.position)}, loaded, then state_dict() before iterating"
    what = ("a loader resumed from state_dict() taken right after load_state_dict(state) to continue from "
            "the loaded point")
    same_stream(expected, example.resumed(again, len(expected)), clause_id="SC13", context=where, what=what)
    same_stream(expected, take(loaded, len(expected), max_epochs=example.passes), clause_id="SC13",
                context=where + "; the loaded loader itself then iterated", what=what)


@clause("SC14", "state-dict-does-not-disturb", tier="core", cost=1, plan=state_calls_plan, needs=RESUMES)
def state_dict_does_not_disturb(example: Example, plan: StateCalls) -> None:
    """Calling `state_dict()` at any point, even every step, leaves the stream unchanged."""
    _, lengths = example.reference()
    expected = example.segment("expected", 0, sum(lengths[:WHOLE_STREAM_EPOCHS]))
    # An endless stream: its one pass, as far as the uninterrupted run took it.
    observed = stream_calling_state_dict(example.fresh(), 1 if example.config.endless else WHOLE_STREAM_EPOCHS,
                                         list(plan.at), before_iter=plan.before_iter,
                                         limit=len(expected) if example.config.endless else None)
    where = "state_dict() called " + ("after every StopIteration" if plan.every and plan.epoch_ends else
                                      "at every step" if plan.every else f"before next() number {list(plan.at)}")
    same_stream(expected, observed, clause_id="SC14",
                context=where + (", and before the first iter()" if plan.before_iter else ""),
                what="the same batches as a loader on which state_dict() is never called")


@clause("SC15", "state-is-a-snapshot", tier="core", cost=2, plan=snapshot_plan, needs=RESUMES)
def state_is_a_snapshot(example: Example, plan: Checkpoint) -> None:
    """A state already returned does not change when the loader iterates on (no live references)."""
    loader = example.fresh()
    it = advance(loader, plan.position)
    state = state_of(loader)
    before = snapshot(state)
    # Iterate on with the open iterator while it lasts (what a trainer does), then new epochs.
    iterate_on(loader, it, plan.more, max_epochs=example.passes)
    state_of(loader)
    unchanged(before, state, clause_id="SC15",
              context=f"state taken {example.where(plan.position) if example.config.endless else plan.position.describe()}, then {plan.more} more batches and another "
                      "state_dict()",
              expected="the dict returned by state_dict() to stay as it was returned while the loader iterates "
                       "on (a checkpoint written later, e.g. asynchronously, must hold this point)",
              got="it changed under the caller: {diff} (the state holds live references into the loader)",
              impact="it changes after the save")


@clause("SC16", "load-leaves-its-argument-alone", tier="core", cost=8, plan=checkpoint_plan, needs=RESUMES)
def load_leaves_its_argument_alone(example: Example, plan: Checkpoint) -> None:
    """`load_state_dict` does not modify the dict it is given; the same state loads into several
    loaders with the same result."""
    expected = example.expected_after(plan.position)
    state = checkpoint(example.fresh(), plan.position)
    before = snapshot(state)
    where = f"state taken {example.where(plan.position)}"
    first = example.resumed(state, len(expected))
    unchanged(before, state, clause_id="SC16", context=where + ", loaded into a loader that iterated",
              expected="load_state_dict(state) and iterating the loader to leave `state` unchanged (the same "
                       "state is often loaded into several loaders, or kept for a retry)",
              got="the argument was modified: {diff}",
              impact="load_state_dict modifies it")
    same_stream(first, example.resumed(state, len(expected)), clause_id="SC16",
                context=where + ", loaded into two fresh loaders",
                what="a second loader given the same state dict to yield the same batches as the first")


@clause("SC17", "state-survives-serialization", tier="core", kills=12, cost=10, plan=checkpoint_plan, needs=RESUMES)
def state_survives_serialization(example: Example, plan: Checkpoint) -> None:
    """The state round-trips through `torch.save` + `torch.load(weights_only=True)`, `pickle` and
    `copy.deepcopy`, and the round-tripped state resumes exactly."""
    expected = example.expected_after(plan.position)
    state = checkpoint(example.fresh(), plan.position)
    where = f"state taken {example.where(plan.position)}"
    copies: list[tuple[list[str], object]] = []  # the round trips that gave one state, and that state
    for via in ROUND_TRIPS:
        try:
            copied = round_trip(state, via)
        except Exception as e:
            raise violated("SC17", context=where, expected=f"the state to round-trip through {via}",
                           got=f"{type(e).__name__}: {exception_text(e)}",
                           impact=Impact("silent", f"state unusable later: {via.split(' + ')[-1]} fails on it")) from None
        same = next((vias for vias, kept in copies if indistinguishable(kept, copied)), None)
        if same is None:
            copies.append(([via], copied))
        else:
            same.append(via)
    # One resume per state the round trips gave: a loader cannot tell identical states apart, and
    # each resume runs two further epochs (three of the clause's worker pools in four, issue 21).
    for vias, copied in copies:
        also = f" ({' and '.join(vias[1:])} gave the same state)" if len(vias) > 1 else ""
        same_stream(expected, example.resumed(copied, len(expected)), clause_id="SC17",
                    context=where + f", through {vias[0]}{also}",
                    what=f"a loader given the state after a {vias[0]} round trip to resume exactly")


#: SC18 compares two fresh loaders, not a resume with the uninterrupted run.
_TWO_FRESH_LOADERS = Wording(got="the second stream", expected="the first loader", start="", origin="")


@clause("SC18", "same-config-same-stream", tier="core", needs=("SC01",),
        blocks="two fresh loaders from one config differ, so there is no uninterrupted run to compare a resume with")
def same_config_same_stream(example: Example, plan: None) -> None:
    """Two fresh loaders from one config yield the same stream; where this fails, resume clauses
    are not judgeable."""
    # The first stream is the uninterrupted run the resume clauses share (`steps.uninterrupted`):
    # comparing a fresh loader with that very run is what makes it safe to share (issue 21).
    _, lengths = example.reference()
    first = example.segment("first", 0, sum(lengths[:WHOLE_STREAM_EPOCHS]))
    # An endless stream: its one pass, as far as the uninterrupted run took it.
    second = (take(example.fresh(), len(first), max_epochs=1) if example.config.endless
              else stream(example.fresh(), WHOLE_STREAM_EPOCHS))
    same_stream(first, second, clause_id="SC18", wording=_TWO_FRESH_LOADERS,
                context="two fresh loaders from one config, torch.manual_seed(config.seed) before each",
                what="the same stream from both (otherwise no resume can be judged: there is no one "
                     "'uninterrupted run' to compare with)")

