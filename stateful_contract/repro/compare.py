"""Comparing batches (and states) and streams of batches, and saying where they differ.

Batches are equal field by field (docs/clauses.md's terms; arrays as tensors); no leaf is compared with a
bare ``==`` whose answer is elementwise (``bool()`` of it raises). A difference is named by its path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch

from .consumption import loader_class
from .vocabulary import batch_count

__all__ = ["PROTOCOL_METHODS", "RESUME_WORDING", "Segment", "Wording", "assert_protocol", "assert_refused",
           "assert_same_stream", "assert_str_keyed_dict", "assert_unchanged", "describe_batch",
           "first_difference", "missing_methods", "same_batches", "stream_difference"]

#: How many elements of a tensor a message shows before eliding.
_SHOWN_ELEMENTS = 8
#: How long the rendering of one value may be.
_SHOWN_CHARACTERS = 160


def first_difference(expected: Any, got: Any, path: str = "") -> str | None:
    """The first place where ``got`` differs from ``expected``, or None when they are equal."""
    if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)) or (
                expected.dtype != got.dtype or expected.shape != got.shape):
            return _differs(expected, got, path)
        if torch.equal(expected, got) or (expected.is_floating_point()  # NaN where the other has NaN: equal
                                          and torch.allclose(expected, got, rtol=0, atol=0, equal_nan=True)):
            return None
        return _differs(expected, got, path)
    if isinstance(expected, Mapping) and isinstance(got, Mapping):
        if list(expected.keys()) != list(got.keys()) and set(expected.keys()) != set(got.keys()):
            return (f"{path or 'batch'}: expected keys {sorted(map(str, expected.keys()))}, "
                    f"got keys {sorted(map(str, got.keys()))}")
        pairs: Iterator[tuple[Any, Any, str]] = ((expected[k], got[k], f"{path}[{k!r}]") for k in expected)
    elif (isinstance(expected, Sequence) and isinstance(got, Sequence)
            and not isinstance(expected, (str, bytes)) and not isinstance(got, (str, bytes))):
        if _kind(expected) is not _kind(got) or len(expected) != len(got):
            return _differs(expected, got, path)
        pairs = ((e, g, f"{path}[{i}]") for i, (e, g) in enumerate(zip(expected, got)))
    elif _is_array(expected) or _is_array(got):
        return _array_difference(expected, got, path)
    elif dataclasses.is_dataclass(expected) and not isinstance(expected, type) and type(got) is type(expected):
        pairs = ((getattr(expected, f.name), getattr(got, f.name), f"{path}.{f.name}")
                 for f in dataclasses.fields(expected))
    elif isinstance(expected, float) and isinstance(got, float) and math.isnan(expected) and math.isnan(got):
        return None
    elif type(expected) is not type(got) or not _equal(expected, got):
        return _differs(expected, got, path)
    else:
        return None
    return next((d for e, g, where in pairs if (d := first_difference(e, g, where)) is not None), None)


def same_batches(expected: Sequence[Any], got: Sequence[Any]) -> bool:
    return len(expected) == len(got) and all(first_difference(e, g) is None for e, g in zip(expected, got))


def _differs(expected: Any, got: Any, path: str) -> str:
    return f"{path or 'batch'}: expected {describe_value(expected)}, got {describe_value(got)}"


class Segment(list):  # type: ignore[type-arg]
    """A stretch of the uninterrupted stream, ``reference[start:stop]``: a list that also answers
    `epoch_of`, so a message can name the epoch where a resumed stream first departs from it."""

    def __init__(self, batches: Sequence[Any] = (), start: int = 0, lengths: Sequence[int] = ()) -> None:
        super().__init__(batches)
        self.start = start
        self.lengths = tuple(lengths)

    def epoch_of(self, i: int) -> tuple[int, int] | None:
        """(epoch, batch within that epoch) of this segment's batch ``i``; None past the known epochs."""
        at = self.start + i
        for epoch, n in enumerate(self.lengths):
            if at < n:
                return epoch, at
            at -= n
        return None

    def epoch_end(self, i: int) -> int:
        """Where the epoch of batch ``i`` ends in this segment (its end, past the known epochs)."""
        where = self.epoch_of(i)
        return len(self) if where is None else min(len(self), i + self.lengths[where[0]] - where[1])


def _kind(value: Any) -> type:
    return list if isinstance(value, Segment) else type(value)


def _is_array(value: Any) -> bool:
    """A numpy array, without importing numpy for loaders that never use it."""
    return type(value).__name__ == "ndarray" and type(value).__module__ == "numpy"


def _array_difference(expected: Any, got: Any, path: str) -> str | None:
    import numpy as np

    if not (_is_array(expected) and _is_array(got)) or expected.dtype != got.dtype or expected.shape != got.shape:
        return _differs(expected, got, path)
    if expected.dtype.kind == "O":  # arrays of Python objects: element by element
        return first_difference(expected.tolist(), got.tolist(), path)
    if not np.array_equal(expected, got, equal_nan=expected.dtype.kind in "fc"):
        return _differs(expected, got, path)
    return None


def _equal(expected: Any, got: Any) -> bool:
    """``expected == got`` for leaves of one type; an object whose ``==`` is elementwise, or
    refuses, is compared by its attributes, else by its repr."""
    try:
        return bool(expected == got)
    except Exception:
        if hasattr(expected, "__dict__") and hasattr(got, "__dict__"):
            return first_difference(vars(expected), vars(got)) is None
        return repr(expected) == repr(got)


def describe_value(value: Any) -> str:
    """A short, readable rendering of one value."""
    if isinstance(value, torch.Tensor) or _is_array(value):
        flat = value.flatten().tolist()
        shown = ", ".join(repr(v) for v in flat[:_SHOWN_ELEMENTS]) + (", ..." if len(flat) > _SHOWN_ELEMENTS else "")
        if _is_array(value):
            return f"array([{shown}], shape={value.shape}, dtype={value.dtype})"
        if value.dim() == 0:
            return f"tensor({shown})"
        return f"tensor([{shown}], shape={tuple(value.shape)}, dtype={str(value.dtype).replace('torch.', '')})"
    if isinstance(value, Mapping):
        text = "{" + ", ".join(f"{k!r}: {describe_value(v)}" for k, v in value.items()) + "}"
    elif isinstance(value, (list, tuple)) and len(value) > _SHOWN_ELEMENTS:
        return f"{_kind(value).__name__} of {len(value)}"
    else:
        text = repr(value)
    # A message lists several batches: each stays one readable line.
    return text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS - 3] + "..."


def describe_batch(batch: Any) -> str:
    """A batch by its sample indices when it has an ``index`` field (the contract's dataset does)."""
    ids = batch_ids(batch)
    return f"batch of samples {ids}" if ids is not None else describe_value(batch)


#: How many batches a message lists before eliding.
SHOWN = 6


def shown_ids(stream: Sequence[Any], start: int = 0, count: int = SHOWN) -> str:
    """``count`` batches of ``stream`` from ``start``, each by its sample indices, "..." if more follow."""
    shown = [describe_batch(b).removeprefix("batch of samples ") for b in stream[start:start + count]]
    more = ", ..." if len(stream) > start + count else ""
    return "[" + ", ".join(shown) + more + "]"


@dataclass(frozen=True)
class Wording:
    """How a stream difference names its two streams and where they start."""

    got: str = "the resumed stream"
    expected: str = "the uninterrupted run"
    start: str = " after the checkpoint"
    origin: str = " from that point"


RESUME_WORDING = Wording()


def stream_difference(expected: Sequence[Any], got: Sequence[Any], wording: Wording = RESUME_WORDING) -> str | None:
    """Where two streams of batches first differ, in words; None when they are equal."""
    w = wording
    for i, (e, g) in enumerate(zip(expected, got)):
        if (diff := first_difference(e, g)) is not None:
            where = expected.epoch_of(i) if isinstance(expected, Segment) else None
            at = f" (batch {where[1]} of epoch {where[0]})" if where is not None else ""
            return (f"batch {i}{w.start}{at} differs: {diff}.{_reordered(expected, got, i)}\n"
                    f"  expected batches from there: {shown_ids(expected, i)}\n"
                    f"  got:                         {shown_ids(got, i)}")
    if len(got) < len(expected):
        return (f"{w.got} ended after {batch_count(len(got))}, but {w.expected} "
                f"yields {len(expected)}{w.origin}; missing: {shown_ids(expected, len(got))}")
    if len(got) > len(expected):
        return (f"{w.got} has {batch_count(len(got))}, but {w.expected} yields "
                f"only {len(expected)}{w.origin}; extra: {shown_ids(got, len(expected))}")
    return None


def batch_ids(batch: Any) -> list[Any] | None:
    """The sample indices of a batch with an ``index`` field (the contract's dataset has one), else None.

    A negative index is padding, not a sample: a packed batch pads its rows to one length, per-sample fields
    with a negative fill (torchtune's ``PackedDataset`` pads labels with -100), and no dataset has a sample
    -1. Counted as samples, one padded pack made "8 samples lost" of one, and SC42 took the fill for a
    dataset of the loader's own.

    A batch of several loaders' batches by name (Lightning's ``CombinedLoader`` yields ``{"a": batch_a, "b":
    batch_b}``, ``None`` for one that ran out) has the samples of each, named by its path: ``("a", 3)`` is
    sample 3 of ``a``'s batch, never ``b``'s sample 3, which may be another dataset's. Counted as whole
    batches instead, a resume that shifted one loader's cycle read as "batches lost" plus batches "the
    uninterrupted run never yields (drop_last's tail)"; ids that are not ints leave the clauses that count the
    config's samples (SC23, SC30, SC31, SC42) not judged, as before."""
    if not isinstance(batch, Mapping):
        return None
    if "index" not in batch:
        parts = _named_batches(batch, ())
        return None if not parts else [(*path, i) for path, part in parts for i in _own_ids(part)]
    return _own_ids(batch)


def _named_batches(batch: Mapping[Any, Any], path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], Any]] | None:
    """The batches with an ``index`` field inside a mapping of batches, each with its key path; None where any
    value is neither such a batch, a mapping of them, nor None (then the mapping is one batch of fields)."""
    found: list[tuple[tuple[Any, ...], Any]] = []
    for key, value in batch.items():
        if value is None:
            continue  # a loader that ran out (Lightning's max_size mode)
        if not isinstance(value, Mapping):
            return None
        if "index" in value:
            found.append(((*path, key), value))
        elif (inner := _named_batches(value, (*path, key))) is None:
            return None
        else:
            found.extend(inner)
    return found


def _own_ids(batch: Mapping[str, Any]) -> list[Any]:
    index = batch["index"]
    if isinstance(index, torch.Tensor) or _is_array(index):
        index = index.flatten().tolist()
    ids = index if isinstance(index, list) else [index]
    return [i for i in ids if not _is_padding(i)]


def _is_padding(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value < 0


@overload
def sample_ids(batches: Sequence[Any], *, integers: Literal[True]) -> list[int] | None: ...
@overload
def sample_ids(batches: Sequence[Any], *, integers: bool = False) -> list[Any] | None: ...
def sample_ids(batches: Sequence[Any], *, integers: bool = False) -> list[Any] | None:
    """The sample indices of a stream, batch after batch, or None when a batch has no ``index`` field (or,
    with ``integers``, one that is not an int: the clauses' sample accounting counts ints)."""
    ids = [batch_ids(batch) for batch in batches]
    found = None if None in ids else [i for one in ids for i in one or ()]
    return None if integers and found is not None and not all(isinstance(i, int) for i in found) else found


def shift_of(e: Sequence[Any], g: Sequence[Any]) -> int | None:
    """``g`` as ``e`` shifted: ``d`` > 0 samples skipped at the front, ``-d`` repeated (None: no shift). A
    stream that cycles over its data unshuffled reads both ways (3 lost or 2 repeated, on 5 samples): it
    reads as the loss, the commoner bug (a wrapper whose state is its base loader's, which runs ahead)."""
    n = min(len(e), len(g))
    lost = next((d for d in range(1, n // 2 + 1) if list(g[:n - d]) == list(e[d:n])), None)
    return lost if lost is not None else next((-d for d in range(1, n // 2 + 1) if list(g[d:n]) == list(e[:n - d])), None)


def _reordered(expected: Sequence[Any], got: Sequence[Any], i: int) -> str:
    """Where the resumed batches hold the expected samples in another order (over the epoch of the
    first differing batch ``i``), that sentence: a resume that skips the batches already seen, in a
    process whose shuffle was drawn anew, looks like this."""
    where = expected.epoch_of(i) if isinstance(expected, Segment) else None
    stop = expected.epoch_end(i) if isinstance(expected, Segment) else len(expected)
    e, g = sample_ids(expected[i:stop]), sample_ids(got[i:stop])
    if e is None or g is None or e == g or sorted(map(repr, e)) != sorted(map(repr, g)):
        return ""
    if isinstance(expected, Segment) and not expected.lengths and shift_of(e, g) is not None:
        return ""  # an endless stream resumed ahead or behind: a cycle holds the same samples, none reordered
    epoch = f"epoch {where[0]}" if where is not None else "the resumed stream"
    return (f"\n  same samples, another order: {epoch} holds the expected samples in another order, so the "
            "epoch's shuffle was not restored (a resume that skips the batches already seen must also restore "
            "the generator or the sampler's seed and epoch)")


def assert_same_stream(expected: Sequence[Any], got: Sequence[Any]) -> None:
    """Raise `AssertionError` saying where ``got`` first departs from ``expected`` (for reproductions)."""
    __tracebackhide__ = True
    if (diff := stream_difference(expected, got)) is not None:
        raise AssertionError(diff)


def assert_unchanged(before: Any, after: Any) -> None:
    """Raise `AssertionError` where ``after`` differs from ``before`` (a state that must not change)."""
    __tracebackhide__ = True
    if (diff := first_difference(before, after, "state")) is not None:
        raise AssertionError(f"the state changed: {diff}")


def assert_str_keyed_dict(state: Any) -> None:
    """Raise `AssertionError` unless ``state`` is a ``dict`` whose keys are all ``str``."""
    __tracebackhide__ = True
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise AssertionError(f"state_dict() returned {describe_value(state)}, not a dict with str keys")


#: The methods of the protocol (`stateful_contract.StatefulLoader`).
PROTOCOL_METHODS = ("__iter__", "state_dict", "load_state_dict")


def missing_methods(loader: Any) -> list[str]:
    return [m for m in PROTOCOL_METHODS if not callable(getattr(loader, m, None))]


def assert_protocol(loader: Any) -> None:
    """Raise `AssertionError` unless ``loader`` has callable ``__iter__``, ``state_dict``, ``load_state_dict``."""
    __tracebackhide__ = True
    if missing := missing_methods(loader):
        raise AssertionError(f"{loader_class(loader).__name__} has no callable {', '.join(missing)}")


def assert_refused(error: BaseException | None, first: Any = None) -> None:
    """Raise `AssertionError` unless ``error`` is an exception whose message names the problem."""
    __tracebackhide__ = True
    if error is None:
        raise AssertionError(f"the bad state was accepted silently; the loader then yielded {describe_value(first)}")
    if not str(error).strip():
        raise AssertionError(f"refused with a bare {type(error).__name__} that names no problem")
