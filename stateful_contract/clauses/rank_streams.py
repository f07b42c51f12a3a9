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

from ..repro.impact import Impact, losses
from ..repro.multisets import Tally, id_list, padding_lines, tally
from ..search.example import Example
from .registry import violated

__all__ = ["RankResume", "every_rank_resumed", "example_folder"]

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
