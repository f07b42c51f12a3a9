"""What a failure does to a training run: the `Impact` every failed clause carries (docs/clauses.md).

Silent (the resumed run trains on the wrong data) or loud (a call the trainer makes raises or stops
the job), computed from what a judgement compared or the call the loader was in, never from a message.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# compare imports torch: imported where a stream is compared, so that `Impact` (every saved report holds
# some) reads without torch, as the badge does.

__all__ = ["Impact", "ImpactKind", "died", "epoch_lost", "epochs_impact", "losses", "loud", "samples_impact", "stream_impact",
           "untrained", "where_of"]

ImpactKind = Literal["silent", "loud"]


@dataclass
class Impact:
    """What one failure does to a training run, measured on its minimal example."""

    kind: ImpactKind
    #: A short phrase: ``"3 samples lost, 1 repeated in epoch 0"``, ``"load_state_dict raises TypeError"``.
    what: str
    #: For a loud failure, the trainer's call that raises or stops: ``"build"`` (the factory), ``"save"``
    #: (``state_dict``), ``"load"`` (``load_state_dict``), ``"iter()"``, ``"next()"``, ``"set_epoch"``.
    where: str = ""
    #: The counts behind the phrase: ``lost``, ``repeated``, ``reordered``, ``changed`` (of ``unit``),
    #: ``epochs lost``.
    counts: dict[str, int] = field(default_factory=dict)
    #: ``"sample"`` where the batches carry an ``index`` field, else ``"batch"``.
    unit: str = ""
    #: The epoch of the first difference, where known.
    epoch: int | None = None
    #: Where the compared stretch starts in the uninterrupted stream (a batch index), where known: with the
    #: config and the difference, what makes two failures one cause.
    at: int | None = None

    def describe(self) -> str:
        """How every face shows it: ``silent: 3 samples lost in epoch 0``."""
        return f"{self.kind}: {self.what}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Impact:
        return cls(kind=data["kind"], what=data.get("what", ""), where=data.get("where", ""),
                   counts={str(k): int(v) for k, v in dict(data.get("counts", {})).items()},
                   unit=data.get("unit", ""), epoch=data.get("epoch"), at=data.get("at"))


#: The trainer's call a step of the contract stands for, by the start of the step's text (`steps._user`).
_CALLS = {"factory(": "build", "loader.state_dict(": "save", "torch.distributed.checkpoint.save": "save",
          "loader.load_state_dict(": "load", "torch.distributed.checkpoint.load": "load",
          "iter(loader)": "iter()", "next(": "next()"}


def where_of(step: str) -> str:
    """The trainer's call ``step`` (``loader.load_state_dict(state)``) stands for: ``"load"``."""
    for start, where in _CALLS.items():
        if step.startswith(start):
            return where
    return "set_epoch" if ".set_epoch(" in step else ""


#: How each call reads in a phrase.
_NAMED = {"build": "building the loader (factory(config))", "save": "state_dict() at save",
          "load": "load_state_dict() at resume", "iter()": "iter(loader)", "next()": "next() on the loader",
          "set_epoch": "set_epoch()"}


def loud(step: str, how: str) -> Impact:
    """A loud impact: the trainer's call ``step`` ``how`` (``"raises TypeError"``, ``"hangs"``)."""
    where = where_of(step)
    return Impact("loud", f"{_NAMED.get(where, step or 'a call into the loader')} {how}", where)


def died(step: str, killed_by: str) -> Impact:
    """The loader's process went down (``killed_by``: a signal, an exit code, the timeout, the memory
    limit) in the call ``step`` ("" when between calls): the job stops, whatever the cause."""
    how = {"timeout": "hangs: the job stops", "memory limit": "outgrows the memory limit: the job is killed"}
    return loud(step, how.get(killed_by, f"kills the process ({killed_by}): the job stops"))


def _fingerprint(value: Any) -> Hashable:
    """A hashable stand-in for a batch, equal for equal batches; NaN equals NaN, as in
    `compare.first_difference` (else a batch holding one would count as changed wherever it stood)."""
    torch = sys.modules.get("torch")  # no tensor exists unless torch is imported: never imported here
    if torch is not None and isinstance(value, torch.Tensor):
        values = tuple(map(_nan_as_itself, value.flatten().tolist()))
        return ("tensor", str(value.dtype), tuple(value.shape), values)
    if isinstance(value, Mapping):
        return ("map", tuple((repr(k), _fingerprint(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_fingerprint(v) for v in value))
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy, without importing it
        return ("array", str(value.dtype), repr(value.tolist()))
    try:
        hash(value)
        return ("leaf", type(value).__name__, _nan_as_itself(value))
    except TypeError:
        return ("repr", repr(value))


def _nan_as_itself(x: Any) -> Any:
    return "nan" if isinstance(x, float) and math.isnan(x) else x


def _units(batches: Sequence[Any], by_sample: bool) -> list[Hashable]:
    from .compare import sample_ids

    if by_sample:
        return [v if isinstance(v, Hashable) else repr(v) for v in sample_ids(batches) or []]
    return [_fingerprint(b) for b in batches]


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'es' if unit == 'batch' and n != 1 else 's' if n != 1 else ''}"


def _shifted(e: list[Hashable], g: list[Hashable]) -> int | None:
    """``g`` as ``e`` shifted by a few units, if that explains it: ``d`` > 0 units lost at the front
    (``g`` starts ahead), ``-d`` repeated there; the nearer shift wins, and a short periodic stream,
    which reads both ways, reads as a loss (the commoner bug: a prefetching wrapper's state)."""
    n = min(len(e), len(g))
    for d in range(1, n // 2 + 1):  # a shift that leaves fewer units matched than it moves explains nothing
        if g[:n - d] == e[d:n]:
            return d
        if g[d:n] == e[:n - d]:
            return -d
    return None


def stream_impact(expected: Sequence[Any], got: Sequence[Any], *, cut: bool = True,
                  epoch: int | None = None) -> Impact:
    """What resuming with ``got`` instead of ``expected`` does to a run: a silent impact with counts, in
    samples where every batch carries an ``index``, else in batches; over the first epoch the resumed run's
    pass gets wrong (`_paired`), else over the epoch of the first differing batch. The same samples in
    another order is an order changed, a shift a loss at the front or a repeat (``cut``: ``got`` was cut at
    the length of ``expected``), else what the epoch lacks is lost and what it has more often repeated.
    ``epoch``: the streams', where ``expected`` does not know it."""
    from .compare import Segment, batch_ids

    by_sample = all(batch_ids(b) is not None for b in [*expected, *got])
    unit = "sample" if by_sample else "batch"
    if (skipped := _skipped_the_rest(expected, got, by_sample)) is not None:
        epoch, rest = skipped
        impact = losses(len(rest), 0, unit=unit, epoch=epoch, at=getattr(expected, "start", None))
        impact.what += f" (the resume skipped to epoch {epoch + 1})"  # the rest of the interrupted one never trained
        return impact
    paired = _paired(expected, got, cut)
    if paired is not None:  # the resumed run's own passes: each compared with its epoch, as a trainer counts
        epoch, e_pass, g_pass = paired
        where = expected.epoch_of(0) if isinstance(expected, Segment) else None
        # The epoch's batches before the compared pass: those of the interrupted epoch before the checkpoint.
        before = _trained_before(expected) if where is not None and where[0] == epoch else []
        return _counted(_units(e_pass, by_sample), _units(g_pass, by_sample), unit, epoch,
                        getattr(expected, "start", None), e_pass, g_pass,
                        before=None if before is None else _units(before, by_sample))
    first = next((i for i, (a, b) in enumerate(zip(expected, got)) if _fingerprint(a) != _fingerprint(b)),
                 min(len(expected), len(got)))
    if first >= len(expected):  # it went on past every batch due (not cut): what it yields past them is surplus
        return _counted([], _units(got[first:], by_sample), unit, epoch, getattr(expected, "start", None),
                        [], got[first:])
    where = expected.epoch_of(first) if isinstance(expected, Segment) else None
    stop = expected.epoch_end(first) if isinstance(expected, Segment) else len(expected)
    epoch = where[0] if where is not None else epoch
    at = getattr(expected, "start", None)
    e, g = _units(expected[first:stop], by_sample), _units(got[first:stop], by_sample)
    shift = _shifted(_units(expected[first:], by_sample), _units(got[first:], by_sample)) \
        if cut and len(got) >= len(expected) and not _same_samples(e, g) else None
    before = _epoch_before(expected, first)
    return _counted(e, g, unit, epoch, at, expected[first:stop], got[first:stop], shift,
                    before=None if before is None else _units(before, by_sample))


def _skipped_the_rest(expected: Sequence[Any], got: Sequence[Any], by_sample: bool) -> tuple[int, list[Hashable]] | None:
    """Where the resumed run's first pass is the epoch after the interrupted one (or its start, where the compared
    stretch cut it), the interrupted epoch and the units of its rest, which no pass trains: the resume skipped them.
    Paired with the rest of its epoch instead, that pass read as the epoch's batches before the checkpoint
    "repeated" (a trainer whose resume computes the epoch from a step count, as Hugging Face's Trainer does, and
    gets it one too high)."""
    from .compare import Segment

    if not (isinstance(expected, Segment) and isinstance(got, Segment) and got.start == 0 and got.lengths):
        return None
    where = expected.epoch_of(0)
    if where is None or where[0] + 1 >= len(expected.lengths):
        return None
    epoch, skip = where
    rest_end = expected.lengths[epoch] - skip
    following = list(expected[rest_end:rest_end + expected.lengths[epoch + 1]])
    first_pass = list(got[:got.lengths[0]])
    cut_short = len(got.lengths) == 1 and len(first_pass) < len(following)  # the compared stretch ended inside it
    if not rest_end or not first_pass or not (len(first_pass) == len(following) or cut_short):
        return None
    if _units(first_pass, by_sample) != _units(following[:len(first_pass)], by_sample):
        return None
    earlier = _trained_before(expected)
    whole = None if earlier is None else [*earlier, *expected[:rest_end]]
    # The interrupted epoch must be one like the next (as many batches) in another order: else the pass may as
    # well be that epoch restarted, or yielded whole where the uninterrupted run lost part of it (F28), and the
    # pairing with the rest of its epoch stands.
    if (whole is None or len(whole) != len(following)
            or _units(first_pass, by_sample) == _units(whole[:len(first_pass)], by_sample)):
        return None
    return epoch, _units(expected[:rest_end], by_sample)


def _trained_before(expected: Sequence[Any]) -> list[Any] | None:
    """What the uninterrupted run yielded of the epoch of ``expected``'s first batch before it: what the run
    interrupted there trained of that epoch (`Segment.before`; None where unknown)."""
    from .compare import Segment

    where = expected.epoch_of(0) if isinstance(expected, Segment) else None
    if where is None:
        return None
    return [] if where[1] == 0 else getattr(expected, "before", None)


def _epoch_before(expected: Sequence[Any], first: int) -> list[Any] | None:
    """The uninterrupted epoch of ``expected[first]`` before that batch (None where unknown)."""
    from .compare import Segment

    where = expected.epoch_of(first) if isinstance(expected, Segment) else None
    if where is None:
        return None
    begins = first - where[1]
    if begins >= 0:
        return list(expected[begins:first])
    earlier = _trained_before(expected)
    return None if earlier is None else [*earlier, *expected[:first]]


def _same_samples(e: list[Hashable], g: list[Hashable]) -> bool:
    return e != g and Counter(e) == Counter(g)


def _chunks(batches: Sequence[Any], lengths: Sequence[int], skip: int = 0) -> list[list[Any]]:
    out, at = [], 0
    for i, n in enumerate(lengths):
        n -= skip if i == 0 else 0
        out.append(list(batches[at:at + n]))
        at += n
    if at < len(batches):
        out.append(list(batches[at:]))
    return out


def _paired(expected: Sequence[Any], got: Sequence[Any], cut: bool) -> tuple[int, list[Any], list[Any]] | None:
    """The first epoch whose batches the resumed run's pass of it does not have: (epoch, expected, got),
    where ``expected`` (a `Segment`) knows its epochs and ``got`` (from `stream`) its passes. A state
    taken after an epoch's last batch resumes into its empty rest (torchdata) or into the next epoch
    (loaders that roll over): both pair with the epochs as they should."""
    from .compare import Segment, same_batches

    if not (isinstance(expected, Segment) and isinstance(got, Segment) and got.start == 0):
        return None
    where = expected.epoch_of(0)
    if where is None:
        return None
    first, skip = where
    lengths = list(expected.lengths)[first:]
    e_epochs = list(enumerate(_chunks(expected, lengths, skip), start=first))
    g_passes = _chunks(got, got.lengths)
    if e_epochs and g_passes and not e_epochs[0][1] and g_passes[0]:
        e_epochs.pop(0)  # a state taken at an epoch's end, resumed by a loader that rolls over: no empty pass
    for n, ((epoch, e), g) in enumerate(zip(e_epochs, g_passes)):
        if cut and n == len(g_passes) - 1:  # the last pass was cut where the compared stretch ends
            e, g = e[:len(g)], g[:len(e)]
        if not same_batches(e, g):
            return epoch, e, g
    return None


def _counted(e: list[Hashable], g: list[Hashable], unit: str, epoch: int | None, at: int | None,
             e_batches: Sequence[Any], g_batches: Sequence[Any], shift: int | None = None, *,
             before: list[Hashable] | None = None) -> Impact:
    """The impact of ``g`` where ``e`` was due (units of one epoch, or of the compared stretch), counted
    against what was trained: ``before``, the units the interrupted epoch trained before the checkpoint (None:
    unknown). A unit ``g`` has that neither ``e`` nor ``before`` holds is one the uninterrupted run never
    yields in this epoch: trained once, it is no repeat (that run's own loss, SC42's, not the resume's)."""
    where = f" in epoch {epoch}" if epoch is not None else ""
    if _same_samples(e, g):
        moved = sum(a != b for a, b in zip(e, g))
        return Impact("silent", f"order changed: {_plural(moved, unit)} in another order{where}",
                      counts={"reordered": moved}, unit=unit, epoch=epoch, at=at)
    unskipped = 0
    if shift is not None:
        lost, repeated = (shift, 0) if shift > 0 else (0, -shift)
    else:
        surplus = Counter(g) - Counter(e)
        if before is not None:
            due = set(e) | set(before)
            unskipped = sum(1 for u in surplus if u not in due)
        lost, repeated = sum((Counter(e) - Counter(g)).values()), sum(surplus.values()) - unskipped
    if unit == "batch" and unskipped:
        return _batches_changed(lost, repeated, unskipped, where, epoch, at)
    if lost or repeated:
        impact = losses(lost, repeated, unit=unit, epoch=epoch, at=at)
        if unskipped:
            impact.what += f" ({_uninterrupted_skips(unskipped, unit)})"
            impact.counts["not in the uninterrupted run"] = unskipped
        return impact
    if unskipped:
        return Impact("silent", f"none lost or repeated{where}: the resumed run trains {_plural(unskipped, unit)} "
                      f"that {_uninterrupted_skips(unskipped, unit, lead=False)}",
                      counts={"not in the uninterrupted run": unskipped}, unit=unit, epoch=epoch, at=at)
    changed = sum(_fingerprint(a) != _fingerprint(b) for a, b in zip(e_batches, g_batches))
    return Impact("silent", f"batch contents changed: {_plural(changed, 'batch')} of the same samples differ"
                  f"{where}", counts={"changed": changed}, unit="batch", epoch=epoch, at=at)


def _batches_changed(lost: int, repeated: int, changed: int, where: str, epoch: int | None,
                     at: int | None) -> Impact:
    """Counted in whole batches (no sample index to count), a batch the uninterrupted run never yields in the
    epoch is one whose contents changed, standing for a batch due: not a loss beside a batch of drop_last's
    tail (that excuse is about samples). Lightning's CombinedLoader restarts its batch_idx at a resume: every
    batch after it was "lost", and "never yielded, not the resume's", in one message."""
    lost -= min(lost, changed)
    counts = {k: v for k, v in (("lost", lost), ("repeated", repeated), ("changed", changed)) if v}
    if lost or repeated:
        impact = losses(lost, repeated, unit="batch", epoch=epoch, at=at)
        impact.what += f" (and {_plural(changed, 'batch')} of other contents than the uninterrupted run's)"
        impact.counts = counts
        return impact
    differ = "differs" if changed == 1 else "differ"
    return Impact("silent", f"batch contents changed: {_plural(changed, 'batch')} {differ} from the uninterrupted "
                  f"run's{where}", counts=counts, unit="batch", epoch=epoch, at=at)


def _uninterrupted_skips(n: int, unit: str, *, lead: bool = True) -> str:
    """The part of a difference that is the uninterrupted run's own loss, which a resume is not blamed for."""
    text = ("the uninterrupted run never yields in this epoch (drop_last's tail, or its own loss before any "
            "checkpoint: SC42), not the resume's")
    return f"and {_plural(n, unit)} {text}" if lead else text


def losses(lost: int, repeated: int, *, unit: str = "sample", epoch: int | None = None,
           at: int | None = None) -> Impact:
    """``3 samples lost, 1 repeated in epoch 0``: the silent impact of counted losses and repeats."""
    parts = [f"{_plural(lost, unit)} lost"] if lost else []
    if repeated:
        parts.append(f"{repeated} repeated" if lost else f"{_plural(repeated, unit)} repeated")
    counts = {k: v for k, v in (("lost", lost), ("repeated", repeated)) if v}
    where = f" in epoch {epoch}" if epoch is not None else ""
    return Impact("silent", ", ".join(parts) + where, counts=counts, unit=unit, epoch=epoch, at=at)


def samples_impact(due: Sequence[Hashable], got: Sequence[Hashable], *, epoch: int | None = None) -> Impact:
    """The impact of a resume that yielded the sample ids ``got`` where ``due`` were due, in any
    order (a resharded or worker-reordered epoch): the samples lost and the samples repeated."""
    return _counted(sorted(due, key=repr), sorted(got, key=repr), "sample", epoch, None, (), ())


def untrained(lost: int, repeated: int, *, epoch: int) -> Impact:
    """An uninterrupted epoch that lacks or repeats samples, no checkpoint involved: ``8 samples of epoch 0
    never trained``, ``2 samples of epoch 1 trained again`` (yielded once more than due)."""
    parts = [f"{_plural(lost, 'sample')} of epoch {epoch} never trained"] if lost else []
    if repeated:
        parts.append(f"{repeated} trained again" if lost else f"{_plural(repeated, 'sample')} of epoch {epoch} "
                     "trained again")
    counts = {k: v for k, v in (("lost", lost), ("repeated", repeated)) if v}
    return Impact("silent", ", ".join(parts), counts=counts, unit="sample", epoch=epoch)


def epoch_lost() -> Impact:
    """A pass that yields nothing where the uninterrupted run has an epoch: no call raises."""
    return Impact("silent", "an epoch lost: a trainer that counts passes trains one epoch less",
                  counts={"epochs lost": 1})


def epochs_impact(expected: Mapping[int, Sequence[Any]], got: Mapping[int, Sequence[Any]]) -> Impact | None:
    """The impact of the first epoch of a resumed epoch loop that is not the uninterrupted loop's."""
    from .compare import same_batches

    for epoch, batches in expected.items():
        if epoch not in got:
            return Impact("silent", f"epoch {epoch} lost: the resumed loop never runs it",
                          counts={"epochs lost": 1}, epoch=epoch)
        if not same_batches(batches, got[epoch]):
            return stream_impact(batches, got[epoch], cut=False, epoch=epoch)
    return None
