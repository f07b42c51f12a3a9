"""SC31 world-size-change-is-exact-or-refused: a state saved on N ranks, resumed on M != N.

Why (docs/clauses.md, SC31), and how the worlds are run and judged: docs/distributed.md, "What SC31 checks".
"""

from __future__ import annotations

import json
import logging
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from logging.handlers import BufferingHandler
from typing import Any

from ..config import LoaderConfig
from ..repro.advice import advise
from ..repro.compare import sample_ids
from ..repro.endless import describe as in_the_stream
from ..repro.endless_world import global_steps, horizon_of, judge_endless_world
from ..repro.impact import Impact
from ..repro.multisets import epoch_ids, window
from ..repro.recording import unrecorded
from ..repro.state_steps import load_checkpoint, save_checkpoint
from ..repro.steps import LoaderError, NotJudgeable, Position, checkpoint, stream, uninterrupted
from ..repro.world_change import (
    OldWorld,
    SavedRank,
    first_passes,
    into_an_empty_pass,
    judge_finite_world,
    old_world,
)
from ..search.example import Example
from ..search.plans import Checkpoint, checkpoint_plan, position_on_rank
from .rank_streams import example_folder
from .registry import LOAD, clause, violated
from .worker_change import refusal_kind
from .world_refusals import names_the_world_size, unnamed_world_refusal

__all__ = ["WorldResume", "new_worlds", "resume_on_another_world", "resumed_config", "world_size_change_is_exact_or_refused"]


def new_worlds(world_size: int) -> tuple[int, ...]:
    """The world sizes a state saved on ``world_size`` ranks is resumed on: fewer, then more; none from one
    rank (SC31 needs two, and there SC41 judges worker counts only)."""
    return (world_size // 2, world_size + 1) if world_size > 1 else ()


@dataclass
class WorldResume:
    """What one rank of the new world saw: which old rank's state it loaded, and what it yielded."""

    rank: int
    source: int
    saved_world_size: int
    error: str | None = None
    #: The exception came before the resumed loader's first batch: a refusal, not a crash mid-run.
    refused: bool = False
    #: It names the world size (`names_the_world_size`); SC31 advises where not, SC41 fails.
    named: bool = False
    #: The refusing exception's type (`refusal_kind`), for the advisory.
    refusal: str = ""
    #: Sample ids the resumed loader yielded, pass by pass: the rest of the epoch, then the next one.
    passes: list[list[int]] = field(default_factory=list)
    #: Warnings and log records (WARNING or worse) while loading and iterating.
    logged: list[str] = field(default_factory=list)
    #: Of the old world, the same on every new rank: the epoch, what it had yielded of it before
    #: the checkpoint, what its uninterrupted run would still have yielded, and its next epoch (multisets).
    epoch: int = 0
    consumed: list[int] = field(default_factory=list)
    due: list[int] = field(default_factory=list)
    next_due: list[int] = field(default_factory=list)
    #: What a fresh world of the new size yields on this rank: in that epoch, when nothing of it was
    #: consumed (a whole epoch may follow either world's plan), and in the next (None: not counted).
    fresh: list[int] | None = None
    fresh_next: list[int] | None = None
    #: Not resumed on this world, and why (a fixed global batch that does not split over its ranks).
    skipped: str = ""
    #: On an endless stream (repro/endless_world.py), ids per batch: of this rank after the resume, of a fresh
    #: world of the new size on this rank, and of every saving rank's uninterrupted stream (None: not endless).
    steps: list[list[int]] | None = None
    fresh_steps: list[list[int]] | None = None
    saved_steps: list[list[list[int]]] = field(default_factory=list)
    #: The step the saving ranks checkpointed at.
    saved_at: int = 0

    @property
    def yielded(self) -> list[int]:
        return [i for p in self.passes for i in p]


@contextmanager
def _logged(into: list[str]) -> Iterator[None]:
    """Collect warnings and WARNING log records (a loader that "warns and restarts" says so here)."""
    records = BufferingHandler(capacity=sys.maxsize)  # never flushes: every record stays in its buffer
    records.setLevel(logging.WARNING)
    logging.getLogger().addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        logging.getLogger().removeHandler(records)
        into.extend(f"{r.levelname} {r.name}: {r.getMessage()}" for r in records.buffer)
    into.extend(f"{w.category.__name__}: {w.message}" for w in caught if "set_vital" not in str(w.message))


def resumed_config(config: LoaderConfig, saved: int, *, fixed_global_batch: bool) -> LoaderConfig | None:
    """The config a rank of the new world builds its loader from: ``config`` (its rank and world size in
    it) and, where the trainer keeps the global batch fixed, per-rank batch = the saving world's global
    batch / the new world's size (None: it does not split evenly, a world size such a trainer refuses)."""
    if not fixed_global_batch:
        return config
    global_batch = config.batch_size * saved
    if global_batch % config.world_size:
        return None
    return replace(config, batch_size=global_batch // config.world_size)


def uneven_global_batch(config: LoaderConfig, saved: int) -> str:
    """Why an example is not resumed on this world under a fixed global batch (an advisory, once)."""
    return (f"with a fixed global batch (declared), the examples whose global batch (per-rank batch x {saved} "
            f"ranks) does not split evenly over {_ranks(config.world_size)} were not resumed there: a trainer "
            "that keeps its global batch refuses that world size")


def resume_on_another_world(example: Example, plan: Checkpoint, *, fixed_global_batch: bool = False) -> WorldResume:
    """SC31's second half, on each rank of a world of another size: load an old rank's state, iterate the
    rest of the epoch and the next one (two passes)."""
    world = example.world
    assert world is not None
    folder = example_folder(example, "SC31")
    records = sorted((json.loads(p.read_text(encoding="utf-8")) for p in folder.glob("saved-rank*.json")),
                     key=lambda r: int(r["rank"]))
    saved = len(records)
    if saved == 0 or any(r.get("steps", r["epochs"]) is None or r["consumed"] is None for r in records):
        raise NotJudgeable("the batches carry no 'index' field, so the samples a resumed world covers cannot be "
                           "counted; see SC30")
    source = world.rank % saved
    ranks = [SavedRank(Position(**r["position"]), r["consumed"], r["epochs"], r["finished"]) for r in records]
    old = old_world(ranks)
    result = WorldResume(world.rank, source, saved, epoch=old.epoch, consumed=old.consumed, due=old.due,
                         next_due=old.next_due)
    config = resumed_config(example.config, saved, fixed_global_batch=fixed_global_batch)
    if config is None:
        result.skipped = uneven_global_batch(example.config, saved)
        return result
    saved_at = ranks[source].position
    endless = example.config.endless
    limit = (horizon_of(global_steps([r["steps"] for r in records]), saved_at.batches)
             if endless else 2 * (example.config.dataset_size + world.world_size + 1))
    # What every rank of both worlds ran, replayed one rank after the other and judged as here (`assert_world_change`):
    # the steps below run unrecorded, so the reproduction is these lines, whichever rank prints it.
    _print_world_replay(example, config, [r.position for r in ranks], limit=limit,
                        passes=1 if endless else 3 if any(map(into_an_empty_pass, ranks)) else 2)
    path = str(folder / f"rank{source}.pt")
    try:
        with _logged(result.logged), unrecorded():
            loader = example.fresh(load_checkpoint(path), config=config)
            resumed = stream(loader, 1 if endless else 2, limit=limit)
            batches, counts = list(resumed), list(resumed.lengths)
            if not endless and counts and not counts[0] and into_an_empty_pass(ranks[source]):
                more = stream(loader, 1, limit=limit)
                batches, counts = [*batches, *more], [*counts, len(more)]
    except LoaderError as e:
        result.error = str(e)
        result.refused = not e.batches_before  # None (at load_state_dict) or 0: before the first batch
        result.named = names_the_world_size(e.error, saved, world.world_size)
        result.refusal = refusal_kind(e.error)
        return result
    with unrecorded():  # what a fresh world of the new size deals
        reference, lengths = (example.reference() if config is example.config
                              else uninterrupted(example.factory, config))
    if endless:  # one stream, counted in global steps (repro/endless_world.py)
        result.steps, result.fresh_steps = ([sample_ids([b], integers=True) or [] for b in s]
                                            for s in (batches, reference))
        result.saved_steps, result.saved_at = [r["steps"] for r in records], saved_at.batches
        return result
    if not old.consumed:
        result.fresh = epoch_ids(reference, lengths, old.epoch)
    result.fresh_next = epoch_ids(reference, lengths, old.epoch + 1)
    result.passes = first_passes([sample_ids([b], integers=True) or [] for b in batches], counts, ranks[source])
    return result


def _print_world_replay(example: Example, config: LoaderConfig, at: list[Position], *, limit: int,
                        passes: int) -> None:
    """The reproduction of a world change, in one process: each saving rank checkpoints and saves ``rank{r}.pt``,
    each rank of the new world (its per-rank ``config``) loads ``rank{r % N}.pt`` and streams ``passes`` passes,
    and `assert_world_change` judges them as SC31 did. A loader that takes its rank from ``torch.distributed``
    rather than from its config needs the real ranks: the command printed below it."""
    program, saved, resumed = example.program, len(at), config.world_size
    old = replace(example.config, rank=0, world_size=saved)
    positions = (f"[{at[0].as_code()}] * {saved}" if len(set(at)) == 1
                 else f"[{', '.join(p.as_code() for p in at)}]")
    load_form = "" if example.load_form == "positional" else f", load_form={example.load_form!r}"
    new = "config" if config is example.config else config.as_code()
    lines = [f"# The {saved}-rank world, one rank after the other (each its own process in training): rank r "
             f"checkpoints and saves rank{{r}}.pt",
             f"saved_world = [dataclasses.replace({old.as_code()}, rank=r) for r in range({saved})]",
             f"at = {positions}",
             "for old, position in zip(saved_world, at):",
             "    save_checkpoint(checkpoint(fresh(factory, old), position), f'rank{old.rank}.pt')"]
    if config is not example.config:
        lines.append(f"# The global batch stays {example.config.batch_size * saved}: {config.batch_size} per rank "
                     f"on {_ranks(resumed)}")
    lines += [f"# The {resumed}-rank world: rank r loads rank{{r % {saved}}}.pt and takes "
              + ("the global steps to the end of an epoch" if config.endless
                 else "the rest of the epoch and the next one"),
              f"new_world = [dataclasses.replace({new}, rank=r) for r in range({resumed})]",
              f"resumed = [stream(fresh(factory, new, state=load_checkpoint(f'rank{{new.rank % {saved}}}.pt'){load_form}), "
              f"{passes}, limit={limit}) for new in new_world]",
              "assert_world_change([uninterrupted(factory, old) for old in saved_world], at, resumed, "
              "[uninterrupted(factory, new) for new in new_world]" + (", endless=True)" if config.endless else ")")]
    for line in lines:
        program.add(line)
    program.names_used.update({"Position", "assert_world_change", "checkpoint", "fresh", "load_checkpoint",
                               "save_checkpoint", "stream", "uninterrupted"})

def _ranks(n: int) -> str:
    return f"{n} rank{'s' if n != 1 else ''}"


def _how(r: WorldResume) -> str:
    return f"rank {r.rank} (from rank {r.source}'s state)"


def _whole(values: Sequence[WorldResume], name: str) -> list[list[int]] | None:
    """A fresh new world's ids (``fresh`` or ``fresh_next``), rank by rank; None where a rank did not count them."""
    got = [getattr(r, name) for r in values]
    return None if None in got else got


def judge_world_change(values: Sequence[WorldResume], config: LoaderConfig, plan: Checkpoint) -> str | None:
    """The resume on the new world was refused (an advisory where the refusal does not name the world
    sizes), or over the rest of the interrupted epoch and the next one it covered exactly what was due,
    padding not counted as data (`horizons`); on an endless stream, epoch by epoch of global steps
    (`endless_world`). Returns why where this example was not judged on this world (an advisory too)."""
    first = values[0]
    if any(r.skipped for r in values):  # not resumed on this world: this example judged nothing here
        advise(why := first.skipped or next(r.skipped for r in values if r.skipped))
        return why
    saved, resumed = first.saved_world_size, len(values)
    refusals = [r for r in values if r.refused]
    if refusals:
        if not any(r.named for r in refusals):
            advise(unnamed_world_refusal(refusals[0]))
        return None
    where = plan.position.describe()
    context = (f"every one of {saved} ranks checkpointed {where} and saved its state with torch.save to "
               f"rank{{r}}.pt; a fresh world of {_ranks(resumed)} resumed, rank r loading rank{{r % {saved}}}.pt, "
               f"and iterated the rest of epoch {first.epoch} and epoch {first.epoch + 1}")
    due = sorted(set(first.due) - set(first.consumed))  # a pad copy of a consumed sample is not due
    expected = (f"the resume on {_ranks(resumed)} to be refused before its first batch (best with an exception "
                f"naming the world sizes, {saved} and {resumed}), or the {resumed} resumed rank"
                f"{'s together' if resumed != 1 else ''} to yield, over the rest of epoch {first.epoch} and epoch "
                f"{first.epoch + 1}, exactly the {len(due)} sample{'s' if len(due) != 1 else ''} of epoch "
                f"{first.epoch} not yet consumed and those of epoch {first.epoch + 1} (as either world deals it): "
                "none lost, none repeated"
                + ("" if first.consumed else f" (or epoch {first.epoch} as a fresh {resumed}-rank world yields it)"))
    errors = [r for r in values if r.error is not None]
    if not errors and first.steps is not None:  # an endless stream: counted epoch by epoch of global steps
        verdict = judge_endless_world(first.saved_steps, [r.steps or [] for r in values],
                                      [r.fresh_steps or [] for r in values], at=first.saved_at)
        if verdict.skipped:
            advise(verdict.skipped)
        if verdict.impact is None:
            return verdict.skipped or None
        lines, how, impact = verdict.lines, "resumed silently", verdict.impact
        context, expected = verdict.told(saved, resumed, in_the_stream(Position(batches=first.saved_at),
                                                                           replace(config, world_size=saved)))
    elif errors:
        lines = [f"{_how(r)} raised after its first batch, so the job dies mid-run: {r.error}"
                 for r in errors]
        how = "raised after it had started"
        impact = Impact("loud", f"the resume on {_ranks(resumed)} raises mid-run: the job dies after training on "
                                "resumed batches", where="next()")
    else:
        verdict = judge_finite_world(saved, OldWorld(first.epoch, first.consumed, first.due, first.next_due),
                                     [r.passes for r in values], _whole(values, "fresh"), _whole(values, "fresh_next"))
        if verdict.impact is None:
            return None
        lines, how, impact = verdict.lines, "resumed silently", verdict.impact
    lines += [f"{_how(r)} logged: {text}" for r in values for text in r.logged[:3]]
    violation = violated("SC31", context=context, expected=expected, impact=impact, got=(
        f"saved on {saved} ranks, resumed on {resumed}: the new world {how}:\n  " + "\n  ".join(lines)))
    violation.reproduce_on = next((r.rank for r in values if r.error), 0)  # type: ignore[attr-defined]
    raise violation


@clause("SC31", "world-size-change-is-exact-or-refused", tier="distributed", kills=3, cost=10,
        plan=checkpoint_plan, reads=("fixed_global_batch",),
        needs=("SC01", LOAD), after_restart=(resume_on_another_world, judge_world_change),
        restart_worlds=new_worlds,
        not_judged_on_endless=("with the per-rank batch kept, the new world's global steps cut the stream elsewhere, "
                               "and nothing in an endless stream marks where an epoch ends to count the samples "
                               "still due to"), endless_with="fixed_global_batch")
def world_size_change_is_exact_or_refused(example: Example, plan: Checkpoint) -> None:
    """A state saved on N ranks and resumed on M != N ranks (an elastic restart) is either refused (any
    exception before the first batch; an advisory where it does not name the world sizes), or the M
    resumed ranks together cover exactly the samples not yet consumed: none lost, none repeated."""
    world = example.world
    assert world is not None, "SC31 runs on the ranks of a multi-rank executor only"
    folder = example_folder(example, "SC31")
    reference, lengths = example.reference()
    position = position_on_rank(plan.position, lengths)
    path = str(folder / f"rank{world.rank}.pt")
    example.program.bind(path, repr(f"rank{world.rank}.pt"))
    save_checkpoint(checkpoint(example.fresh(), position), path)
    consumed, epochs = window(reference, lengths, position)
    record: dict[str, Any] = {"rank": world.rank, "position": asdict(position), "consumed": consumed,
                              "epochs": epochs, "finished": position.batches == lengths[position.epoch]}
    if example.config.endless:  # one stream, no epoch to cut: every batch's samples (repro/endless_world.py)
        ids = [sample_ids([b], integers=True) for b in reference]
        record |= {"consumed": [], "epochs": [[], [], []], "finished": False,
                   "steps": None if None in ids else ids}
    (folder / f"saved-rank{world.rank}.json").write_text(json.dumps(record), encoding="utf-8")
