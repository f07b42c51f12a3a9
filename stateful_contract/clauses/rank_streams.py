"""What the multi-rank clauses (SC30, SC31) share: each rank's resume, and samples counted over ranks.

Each rank reports a `RankResume`; `every_rank_resumed` raises the clause's violation, naming the failing
ranks and, over all ranks, the samples lost and repeated and whose; padding is not data (`tally`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..repro.compare import sample_ids
from ..repro.impact import Impact, losses
from ..repro.steps import Position
from ..search.example import Example
from .registry import violated

__all__ = ["RankResume", "Tally", "epoch_ids", "every_rank_resumed", "example_folder", "id_list",
           "padding_lines", "tally", "window"]

#: Sample ids a message lists before eliding.
SHOWN_IDS = 12


@dataclass
class RankResume:
    """What one rank observed for one checkpoint: its own verdict and its samples."""

    rank: int
    #: How the state travelled, e.g. ``"torch.save per rank"``.
    via: str = ""
    #: The loader raised, or the state could not be saved or read back.
    error: str | None = None
    #: The error is a refusal the clause accepts (a state from another rank, named as such).
    refused: bool = False
    #: Where the resumed stream departs from the uninterrupted one (None: exact).
    difference: str | None = None
    #: Sample ids of the uninterrupted stream from the checkpoint on and of the resumed one (None: no index).
    expected_ids: list[int] | None = None
    resumed_ids: list[int] | None = None
    #: Whose saved state this rank was given back (a shared DCP key), when it was not its own.
    loaded_from: str = ""
    #: Of the uninterrupted stream (`window`): the sample ids of the checkpoint's epoch before the
    #: checkpoint, and of that epoch and the two after it, whole (to count padding per epoch).
    consumed_ids: list[int] | None = None
    epochs: list[list[int]] | None = None

    @property
    def exact(self) -> bool:
        return self.error is None and self.difference is None


def id_list(counter: Counter[int]) -> str:
    """``[3, 5, 5] (3 samples)``: the ids of a multiset, elided after `SHOWN_IDS`."""
    ids = sorted(counter.elements())
    shown = ", ".join(map(str, ids[:SHOWN_IDS]))
    return f"[{shown}{', ...' if len(ids) > SHOWN_IDS else ''}] ({len(ids)} sample{'s' if len(ids) != 1 else ''})"


@dataclass
class Tally:
    """A world's samples after a checkpoint, counted against the saving world's epochs (see `tally`)."""

    #: Samples still due that no world yielded (a count above 1: due in that many epochs).
    lost: Counter[int]
    #: Copies beyond what the saving world dealt (its padding included) that no padding accounts for.
    repeated: Counter[int]
    #: Copies beyond that which only the resuming world's own padding can account for...
    extra: Counter[int]
    #: ...which adds at most this many (0 on the saving world itself).
    padding: int
    #: Per sample: copies the saving world deals, and of those its pad copies (beyond one per epoch).
    dealt: Counter[int]
    padded: Counter[int]
    #: Per sample: copies yielded before the checkpoint and after it.
    before: Counter[int]
    after: Counter[int]

    @property
    def exact(self) -> bool:
        return not self.lost and not self.repeated and sum(self.extra.values()) <= self.padding


def tally(epochs: Sequence[Counter[int]], before: Counter[int], after: Counter[int], *, padding: int = 0,
          resharded: bool = False) -> Tally:
    """Lost and repeated samples, where padding is not data (docs/distributed.md).

    ``epochs``: what the saving world deals over all its ranks, epoch by epoch from the checkpoint's on
    (pad copies included); ``before``: what it yielded of the first before the checkpoint; ``after``: what
    was yielded from the checkpoint on, by the same world or one of another size (``resharded``, which may
    yield once a sample the saving world dropped). A sample is due once per epoch that deals it (in the
    first, unless yielded before). Copies beyond what the saving world deals are extra where the resuming
    world's padding explains them (all but its first copy, at most ``padding`` in all), else repeated.
    """
    dealt: Counter[int] = sum(epochs, Counter())
    distinct = [set(e) for e in epochs]
    padded = dealt - Counter(i for e in distinct for i in e)
    due = Counter(i for k, e in enumerate(distinct) for i in e if k or not before[i])
    lost = Counter({i: n - after[i] for i, n in due.items() if n > after[i]})
    repeated: Counter[int] = Counter()
    extra: Counter[int] = Counter()
    for i in before | after:
        over = before[i] + after[i] - (dealt[i] or int(resharded))
        if over <= 0:
            continue
        first_allowed = before[i] < (dealt[i] or int(resharded))  # else not even its first copy was due
        own = min(over, after[i] - 1) if padding and first_allowed else 0
        extra[i] += own
        repeated[i] += over - own
    return Tally(+lost, +repeated, +extra, padding, dealt, padded, before, after)


def padding_lines(t: Tally, saving: str, resuming: str | None = None, *, span: str) -> list[str]:
    """How many copies each world's padding accounted for, so a user sees why a count is a loss or a
    repeat (empty when neither world padded). ``span``: the epochs counted ("in epoch 0")."""
    lines = []
    if t.padded:
        involved = [i for i in sorted(t.padded) if t.lost[i] or t.repeated[i] or t.extra[i]] or sorted(t.padded)
        shown = "; ".join(f"sample {i} dealt {t.dealt[i]} times {span}, yielded "
                          f"{t.before[i]} before the checkpoint and {t.after[i]} after it"
                          for i in involved[:SHOWN_IDS])
        lines.append(f"padding: the {saving}'s padding accounts for {sum(t.padded.values())} extra "
                     f"cop{'ies' if sum(t.padded.values()) != 1 else 'y'} ({shown}); a pad copy of a sample "
                     "already yielded is not due again")
    if resuming is not None and (t.padded or t.extra):
        used = sum(t.extra.values())
        lines.append(f"padding: the {resuming} pads nothing" if not t.padding else
                     f"padding: the {resuming}'s padding accounts for at most {t.padding} extra "
                     f"cop{'ies' if t.padding != 1 else 'y'}, of samples it is due to yield"
                     + (f"; it yielded {used}: {id_list(t.extra)}" if used else ""))
    return lines


def coverage(results: Sequence[RankResume]) -> list[str]:
    """Over all ranks: samples lost and repeated, attributed to ranks (empty when exact, or when the
    batches carry no int ``index`` field to count)."""
    t = _world_tally(results)
    if t is None:
        return []
    expected = {r.rank: Counter(r.expected_ids) for r in results}
    resumed = {r.rank: Counter(r.resumed_ids) for r in results}
    lines = []
    for r in results:
        lost = expected[r.rank] - resumed[r.rank]
        extra = resumed[r.rank] - expected[r.rank]
        if lost:
            lines.append(f"rank {r.rank} lost {id_list(lost)} that its uninterrupted run yields")
        if extra:
            # Samples this rank never yields but another does: it resumed that rank's position.
            foreign = [i for i in extra if not expected[r.rank][i]]
            owners = sorted({q for q in expected if q != r.rank and any(expected[q][i] for i in foreign)})
            whose = (f", which the uninterrupted run gives to rank{'s' if len(owners) > 1 else ''} "
                     f"{', '.join(map(str, owners))}" if owners else "")
            lines.append(f"rank {r.rank} yielded {id_list(extra)} more often than its uninterrupted run{whose}")
    world = f"{len(results)}-rank world"
    if t.lost or t.repeated:
        total = sum(sum(c.values()) for c in expected.values())
        lines.append(f"over all {len(results)} ranks: of the {total} samples the uninterrupted run yields "
                     f"after the checkpoint, lost {id_list(t.lost) if t.lost else 'none'}, "
                     f"repeated {id_list(t.repeated) if t.repeated else 'none'}")
        lines += padding_lines(t, world, span="from the checkpoint's epoch on")
    elif any(not r.exact for r in results):
        lines.append(f"over all {len(results)} ranks the same samples were covered"
                     f"{' (counting the padding as the ' + world + ' deals it)' if t.padded else ''}, but not in the "
                     "uninterrupted run's batches and order (or with other field values)")
    return lines


def _world_tally(results: Sequence[RankResume]) -> Tally | None:
    """Over all ranks of one world, epoch by epoch (None where a rank's epochs are not known)."""
    epochs: list[Counter[int]] = [Counter(), Counter(), Counter()]
    before: Counter[int] = Counter()
    after: Counter[int] = Counter()
    for r in results:
        if r.consumed_ids is None or r.epochs is None or r.resumed_ids is None:
            return None
        before.update(r.consumed_ids)
        after.update(r.resumed_ids)
        for counter, ids in zip(epochs, r.epochs):
            counter.update(ids)
    return tally(epochs, before, after)


def epoch_ids(reference: Sequence[Any], lengths: list[int], epoch: int) -> list[int] | None:
    return sample_ids(reference[sum(lengths[:epoch]):sum(lengths[:epoch + 1])], integers=True)


def window(reference: Sequence[Any], lengths: list[int], position: Position,
           ) -> tuple[list[int] | None, list[list[int]] | None]:
    """The sample ids of an uninterrupted run's epoch before ``position``, and of that epoch and the two
    after it, whole (None without an int ``index`` field)."""
    consumed = sample_ids(reference[sum(lengths[:position.epoch]):position.absolute(lengths)], integers=True)
    epochs = [epoch_ids(reference, lengths, k) for k in range(position.epoch, position.epoch + 3)]
    known = [ids for ids in epochs if ids is not None]
    return consumed, known if len(known) == len(epochs) else None


def _impact(failed: Sequence[RankResume]) -> Impact:
    """What the failing ranks do to a run: a rank that raises or hangs stops the job; otherwise the
    samples the resumed streams lose, repeat or reorder, over the failing ranks."""
    errors = [r for r in failed if r.error is not None]
    if errors:
        return Impact("loud", f"the resume raises on {len(errors)} rank{'s' if len(errors) != 1 else ''}: the job stops")
    if any(r.expected_ids is None or r.resumed_ids is None for r in failed):
        return Impact("silent", f"{len(failed)} rank{'s' if len(failed) != 1 else ''} resume another stream",
                      counts={"changed": len(failed)}, unit="batch")
    expected = [i for r in failed for i in r.expected_ids or []]
    resumed = [i for r in failed for i in r.resumed_ids or []]
    if Counter(expected) == Counter(resumed):
        if expected != resumed:
            moved = sum(a != b for a, b in zip(expected, resumed))
            return Impact("silent", f"order changed: {moved} samples in another order", counts={"reordered": moved},
                          unit="sample")
        return Impact("silent", "batch contents changed: the same samples with other fields",
                      counts={"changed": len(failed)}, unit="batch")
    return losses(sum((Counter(expected) - Counter(resumed)).values()),
                  sum((Counter(resumed) - Counter(expected)).values()))


def every_rank_resumed(results: Sequence[RankResume], *, clause_id: str, context: str,
                       refusal: str = "", counted: Callable[[Sequence[RankResume]], tuple[Impact | None, list[str]]]
                       | None = None) -> None:
    """Every rank resumed its own stream exactly (or, where ``refusal`` says what may be refused,
    refused); together they lose and repeat nothing. ``counted``: the impact and the coverage lines of
    the failing ranks where samples are not counted by epoch (an endless stream: clauses/distributed.py;
    None: the impact as counted here)."""
    failed = [r for r in results if not r.exact and not (refusal and r.refused)]
    if not failed:
        return
    lines = [f"rank {r.rank}{f' ({r.via})' if r.via else ''}: "
             + str(r.error if r.error is not None else r.difference).replace("\n", "\n  ")
             + (f"\n  ({r.loaded_from})" if r.loaded_from else "") for r in failed]
    impact, more = counted(failed) if counted is not None else (None, [])
    lines += more or coverage([r for r in results if not r.refused])
    n = len(results)
    violation = violated(
        clause_id, context=context, impact=impact or _impact(failed),
        expected=(f"each of the {n} ranks to resume its own stream exactly from its own saved state{refusal}, "
                  f"and the {n} resumed streams together to cover exactly the samples of the uninterrupted run: "
                  "none lost, none repeated"),
        got=(f"{len(failed)} of {n} ranks {'failed' if any(r.error for r in failed) else 'did not resume exactly'}:"
             "\n  " + "\n  ".join(lines)),
    )
    violation.reproduce_on = failed[0].rank  # type: ignore[attr-defined]
    raise violation


def example_folder(example: Example, clause_id: str) -> Path:
    """The example's files: the same folder on every rank, after a restart, on another world size and in
    the sibling process that resumes it on one process. Named after the config and the plan as drawn,
    which every rank shares (each rank takes the plan on its own epoch lengths)."""
    root = example.world.workdir if example.world is not None else example.workdir
    assert root is not None, "this executor gives examples no directory"
    key = hashlib.sha1(repr((replace(example.config, rank=0, world_size=1), example.drawn_plan)).encode()).hexdigest()[:12]
    path = root / "examples" / clause_id / key
    path.mkdir(parents=True, exist_ok=True)
    return path
