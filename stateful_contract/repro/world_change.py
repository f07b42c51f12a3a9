"""The world-change judgement (SC31): a state saved on N ranks, resumed on M, counted as multisets of samples.

One fact in one place: the clause (clauses/world_change.py) judges its real ranks with `judge_finite_world` and
`endless_world.judge_endless_world`, and the reproduction it prints ends in `assert_world_change`, which replays
the ranks one after the other in one process and makes the same judgement, raising where the clause failed.
Why and how: docs/clauses.md, SC31; docs/distributed.md, "What SC31 checks".
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .compare import sample_ids
from .endless_world import WorldVerdict, judge_endless_world
from .impact import losses
from .multisets import Tally, epoch_ids, id_list, padding_lines, tally, window
from .steps import Position

__all__ = ["Horizon", "OldWorld", "SavedRank", "assert_world_change", "first_passes", "horizons", "into_an_empty_pass", "judge_finite_world",
           "old_world", "saved_rank"]


@dataclass(frozen=True)
class SavedRank:
    """One saving rank's uninterrupted run around its checkpoint: what it had yielded of the epoch before it
    (``consumed``), that epoch and the two after it whole (``epochs``), and whether it had yielded all of it."""

    position: Position
    consumed: list[int]
    epochs: list[list[int]]
    finished: bool


def saved_rank(reference: Sequence[Any], lengths: list[int], position: Position) -> SavedRank | None:
    """`SavedRank` of an uninterrupted run (`uninterrupted`) checkpointed at ``position`` (None: its batches
    carry no int ``index``, so nothing can be counted)."""
    consumed, epochs = window(reference, lengths, position)
    if consumed is None or epochs is None:
        return None
    return SavedRank(position, consumed, epochs, position.batches == lengths[position.epoch])


@dataclass(frozen=True)
class OldWorld:
    """Of the saving world, the same on every new rank: the epoch the new world resumes, what the old world had
    yielded of it, what its uninterrupted run would still have yielded, and the epoch after it (multisets)."""

    epoch: int
    consumed: list[int]
    due: list[int]
    next_due: list[int]


def old_world(ranks: Sequence[SavedRank]) -> OldWorld:
    """`OldWorld` of every saving rank's `SavedRank`: where every rank finished its epoch, the next one."""
    if all(r.finished for r in ranks):
        return OldWorld(ranks[0].position.epoch + 1, [], [i for r in ranks for i in r.epochs[1]],
                        [i for r in ranks for i in r.epochs[2]])
    return OldWorld(ranks[0].position.epoch, [i for r in ranks for i in r.consumed],
                    [i for r in ranks for i in r.epochs[0][len(r.consumed):]],
                    [i for r in ranks for i in r.epochs[1]])


def into_an_empty_pass(source: SavedRank) -> bool:
    """The state was taken after an epoch's last batch, before StopIteration: torchdata resumes it into an empty
    pass (docs/findings.md, F5), and the two passes due follow it (`first_passes`)."""
    return source.finished and not source.position.after_stop


def first_passes(ids: Sequence[list[int]], counts: Sequence[int], source: SavedRank) -> list[list[int]]:
    """A resumed rank's sample ids (``ids``, per batch; its passes ``counts`` batches long) as the two passes
    judged, from the state of ``source``: an empty first pass after `into_an_empty_pass` is not one of them."""
    cuts = [sum(counts[:k]) for k in range(len(counts) + 1)]
    passes = [[i for batch in ids[a:b] for i in batch] for a, b in itertools.pairwise(cuts)]
    if passes and not passes[0] and into_an_empty_pass(source):
        passes = passes[1:]
    return passes[:2]


@dataclass(frozen=True)
class Horizon:
    """One way the two passes after the resume may be dealt: the rest of the epoch (``epoch``, what was
    yielded of it ``before``) and the next epoch (``after``), each with the copies the new world's
    padding may add (``pads``); ``tally`` counts the two passes against both epochs at once."""

    epoch: Counter[int]
    before: Counter[int]
    after: Counter[int]
    pads: tuple[int, int]

    def tally(self, passes: Sequence[Sequence[list[int]]]) -> Tally:
        got = Counter(i for rank in passes for p in rank for i in p)
        return tally([self.epoch, self.after], self.before, got, padding=sum(self.pads), resharded=True)

    def holds(self, passes: Sequence[Sequence[list[int]]]) -> bool:
        """Each pass covered exactly its own epoch; or, where the new world's first pass ends elsewhere,
        the two passes together did (none lost, none repeated) and the first repeated nothing already
        yielded (a pad copy of a consumed sample is a repeat, which the next epoch's copy does not excuse)."""
        first = self.of_pass(passes, 0)
        if first.exact and self.of_pass(passes, 1).exact:
            return True
        return self.tally(passes).exact and not first.repeated and sum(first.extra.values()) <= first.padding

    def of_pass(self, passes: Sequence[Sequence[list[int]]], k: int) -> Tally:
        """Pass ``k`` alone against its own epoch: what it lacks, and what it holds beyond it."""
        got = Counter(i for rank in passes for i in (rank[k] if k < len(rank) else []))
        epoch, before = (self.epoch, self.before) if k == 0 else (self.after, Counter())
        return tally([epoch], before, got, padding=self.pads[k], resharded=True)


def horizons(old: OldWorld, ranks: int, fresh: Sequence[list[int]] | None,
             fresh_next: Sequence[list[int]] | None) -> list[Horizon]:
    """Every way the two passes may be dealt: the rest of the epoch as the old world deals it (or, nothing
    of it consumed, as a fresh world of the new size does, its padding then counted in it: ``fresh``), and the
    next epoch as either world deals it (``fresh_next``); ``ranks``: the new world's size."""
    pad = ranks - 1
    before = Counter(old.consumed)
    rests = [(before + Counter(old.due), before, pad)]
    if fresh is not None:
        rests.append((Counter(i for ids in fresh for i in ids), Counter(), 0))
    nexts = [(Counter(old.next_due), pad)]
    if fresh_next is not None:
        nexts.append((Counter(i for ids in fresh_next for i in ids), 0))
    return [Horizon(epoch, done, after, (p1, p2)) for epoch, done, p1 in rests for after, p2 in nexts]


def _ranks(n: int) -> str:
    return f"{n} rank{'s' if n != 1 else ''}"


def _how(rank: int, saved: int) -> str:
    return f"rank {rank} (from rank {rank % saved}'s state)"


def _by_pass(old: OldWorld, passes: Sequence[Sequence[list[int]]], way: Horizon) -> list[str]:
    """Which samples each pass lacked or held beyond its own epoch, so a user sees where the samples went
    (a sample one pass lacks and the other holds is no loss: the two passes are judged together)."""
    names = (f"pass 1 (the rest of epoch {old.epoch})", f"pass 2 (epoch {old.epoch + 1})")
    lines = []
    for k, name in enumerate(names):
        t = way.of_pass(passes, k)
        n = sum(t.after.values())
        parts = [f"yielded {n} sample{'s' if n != 1 else ''}"]
        if t.lost:
            parts.append(f"lacks {id_list(t.lost)} due in it")
        beyond = t.repeated + (t.extra if sum(t.extra.values()) > t.padding else Counter())
        if beyond:
            parts.append(f"holds {id_list(beyond)} beyond it")
        lines.append(f"{name} over {_ranks(len(passes))}: " + "; ".join(parts))
    return lines


def judge_finite_world(saved: int, old: OldWorld, passes: Sequence[Sequence[list[int]]],
                       fresh: Sequence[list[int]] | None, fresh_next: Sequence[list[int]] | None) -> WorldVerdict:
    """The new world's two passes after the resume (``passes``: per new rank, the sample ids of each) against the
    ``saved``-rank world's `OldWorld`: over the rest of the interrupted epoch and the next one, exactly what was
    due, padding not counted as data (`horizons`). ``fresh``, ``fresh_next``: per new rank, what a fresh world
    of the new size deals in that epoch (None where something of it was consumed) and in the next."""
    ways = [(way, way.tally(passes), way.of_pass(passes, 0))
            for way in horizons(old, len(passes), fresh, fresh_next)]
    if any(way.holds(passes) for way, _, _ in ways):
        return WorldVerdict(epoch=old.epoch)
    way, t, rest = min(ways, key=lambda w: (sum(w[1].lost.values()) + sum((w[1].repeated | w[2].repeated).values()),
                                            sum(w[2].extra.values())))
    repeated = t.repeated | rest.repeated  # over the horizon, or a copy in pass 1 of a sample already yielded
    resumed = len(passes)
    lines = [f"{_how(r, saved)} yielded {id_list(again)} that the {saved}-rank world had already yielded "
             f"in epoch {old.epoch}"
             for r, rank in enumerate(passes)
             if (again := Counter(i for i in (rank[0] if rank else []) if repeated[i] and rest.before[i]))]
    lines += _by_pass(old, passes, way)
    if sum(rest.extra.values()) > rest.padding:
        lines.append(f"yielded {id_list(rest.extra)} more often than the {saved}-rank world would have (more than "
                     f"the {rest.padding} copies padding may add)")
    lines.append(f"over {'all ' if resumed > 1 else ''}{_ranks(resumed)} and both passes: lost "
                 f"{id_list(t.lost) if t.lost else 'none'}, repeated {id_list(repeated) if repeated else 'none'}"
                 f"; the {saved}-rank world had yielded "
                 f"{id_list(Counter(old.consumed)) if old.consumed else 'nothing'} of epoch {old.epoch}")
    lines += padding_lines(rest, f"{saved}-rank world", f"{resumed}-rank world", span=f"in epoch {old.epoch}")
    impact = losses(sum(t.lost.values()), sum(repeated.values()) + max(0, sum(rest.extra.values()) - rest.padding),
                    epoch=old.epoch)
    return WorldVerdict(lines=lines, impact=impact, epoch=old.epoch)


def _ids(batches: Sequence[Any]) -> list[list[int]]:
    """Sample ids per batch (the ``index`` field); an AssertionError where a batch carries none."""
    ids = [sample_ids([b], integers=True) for b in batches]
    assert None not in ids, "the batches carry no int 'index' field: the samples of a world cannot be counted"
    return [i or [] for i in ids]


def assert_world_change(saved: Sequence[tuple[Sequence[Any], list[int]]], at: Sequence[Position],
                        resumed: Sequence[Sequence[Any]], fresh: Sequence[tuple[Sequence[Any], list[int]]], *,
                        endless: bool = False) -> None:
    """SC31's judgement of a world change, replayed in one process: ``saved``, each saving rank's uninterrupted
    run (`uninterrupted`, rank r of N), checkpointed at ``at[r]``; ``resumed``, what each rank of the new world
    streamed (`stream`) after loading rank ``r % N``'s state: on a finite loader two passes (the rest of the
    epoch and the next), on an ``endless`` stream the global steps to the end of an epoch; ``fresh``, a fresh
    new world's uninterrupted runs, rank by rank. Raises AssertionError naming the samples lost and repeated."""
    if endless:
        verdict = judge_endless_world([_ids(r) for r, _ in saved], [_ids(r) for r in resumed],
                                      [_ids(r) for r, _ in fresh], at=at[0].batches)
        assert verdict.impact is None, _told(len(saved), len(resumed), verdict)  # `skipped`: not judged, no raise
        return
    ranks = [saved_rank(reference, lengths, p) for (reference, lengths), p in zip(saved, at, strict=True)]
    assert None not in ranks, "the batches carry no int 'index' field: the samples of a world cannot be counted"
    known = [r for r in ranks if r is not None]
    old = old_world(known)
    passes = [first_passes(_ids(r), getattr(r, "lengths", [len(r)]), known[k % len(known)])
              for k, r in enumerate(resumed)]
    verdict = judge_finite_world(len(saved), old, passes,
                                 None if old.consumed else [epoch_ids(r, n, old.epoch) or [] for r, n in fresh],
                                 [epoch_ids(r, n, old.epoch + 1) or [] for r, n in fresh])
    assert verdict.impact is None, _told(len(saved), len(resumed), verdict)


def _told(saved: int, resumed: int, verdict: WorldVerdict) -> str:
    assert verdict.impact is not None
    return (f"SC31: saved on {_ranks(saved)}, resumed on {resumed}, {verdict.impact.describe()}:\n  "
            + "\n  ".join(verdict.lines))
