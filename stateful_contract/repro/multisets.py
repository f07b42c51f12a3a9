"""Samples counted as multisets over ranks and epochs: what a world lost and repeated after a checkpoint.

The world clauses (SC30, SC31) and the assertion a world-change reproduction ends with (`world_change`) count
with these, so a printed reproduction judges as the clause did; padding is not data (`tally`,
docs/distributed.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .compare import sample_ids
from .recording import asserts
from .steps import Position

__all__ = ["SHOWN_IDS", "Tally", "assert_same_samples", "epoch_ids", "id_list", "padding_lines", "tally", "window"]

#: Sample ids a message lists before eliding.
SHOWN_IDS = 12


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


@asserts("assert_same_samples")
def assert_same_samples(due: Sequence[int], batches: Sequence[Any]) -> None:
    """``batches`` hold exactly the samples ``due``, once each, in any order (the rest of an epoch resumed with
    another ``num_workers``, by a loader whose order depends on it: SC23). Raises AssertionError naming the
    samples lost and repeated."""
    got = sample_ids(batches, integers=True)
    assert got is not None, "the batches carry no int 'index' field: their samples cannot be counted"
    lost, extra = Counter(due) - Counter(got), Counter(got) - Counter(due)
    assert not lost and not extra, (f"the batches held {id_list(Counter(got))} where {id_list(Counter(due))} were "
                                    f"due: lost {id_list(lost) if lost else 'none'}, "
                                    f"repeated {id_list(extra) if extra else 'none'}")
