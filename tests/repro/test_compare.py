"""Comparing batches and states: every kind of value a loader yields or keeps in its state.

A comparison that raises on a correct loader's batches (numpy's elementwise ``==``) is a
false failure; one that calls two different values equal is a miss.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import zoo

from stateful_contract import ConfigSpace, check
from stateful_contract.repro.compare import describe_batch, first_difference, stream_difference


@dataclasses.dataclass
class Window:
    ids: torch.Tensor
    tokens: int


class Elementwise:
    """An object whose ``==`` answers elementwise, as pandas and jax values do."""

    def __init__(self, values: list[int]) -> None:
        self.values = np.asarray(values)

    def __eq__(self, other: object) -> np.ndarray:  # type: ignore[override]
        return self.values == getattr(other, "values", None)


EQUAL = [
    np.arange(6).reshape(2, 3),
    np.array([1.0, float("nan")]),
    np.array(["a", "b"]),
    np.array([{"k": 1}, None], dtype=object),
    np.int64(3),
    (np.random.RandomState(0).get_state(),),  # a state holding numpy's RNG state
    Window(torch.arange(4), 4),
    {"w": [Window(torch.zeros(2), 2)]},
    Elementwise([1, 2, 3]),
]


@pytest.mark.parametrize("value", EQUAL, ids=lambda v: type(v).__name__)
def test_equal_values_of_every_kind_compare_equal(value):
    import copy

    assert first_difference(value, copy.deepcopy(value)) is None


@pytest.mark.parametrize(("expected", "got", "says"), [
    (np.arange(3), np.arange(1, 4), "expected array([0, 1, 2], shape=(3,), dtype=int64), got array([1, 2, 3]"),
    (np.arange(3), np.arange(3).astype(np.int32), "dtype=int32"),
    (np.arange(4), np.arange(4).reshape(2, 2), "shape=(2, 2)"),
    (np.arange(3), torch.arange(3), "got tensor([0, 1, 2]"),
    (np.array([1, None], dtype=object), np.array([1, 2], dtype=object), "[1]: expected None, got 2"),
    (Window(torch.arange(4), 4), Window(torch.arange(4), 5), ".tokens: expected 4, got 5"),
    (Window(torch.arange(4), 4), Window(torch.arange(1, 5), 4), ".ids: expected tensor([0, 1, 2, 3]"),
    (Elementwise([1, 2]), Elementwise([1, 3]), "got <"),
], ids=["values", "dtype", "shape", "array-vs-tensor", "object-array", "dataclass-field", "dataclass-tensor",
        "elementwise-eq"])
def test_different_values_are_told_apart_and_the_message_says_where(expected, got, says):
    diff = first_difference({"x": expected}, {"x": got})
    assert diff is not None and diff.startswith("['x']") and says in diff, diff


def test_a_stream_of_numpy_batches_says_which_samples_differ():
    first = [{"index": np.array([0, 1]), "x": np.zeros(2)}, {"index": np.array([2, 3]), "x": np.zeros(2)}]
    skipped = first[1:]
    assert describe_batch(first[0]) == "batch of samples [0, 1]"
    diff = stream_difference(first, skipped)
    assert diff is not None and "batch 0 after the checkpoint differs" in diff and "[2, 3]" in diff, diff


def test_a_loader_of_numpy_and_dataclass_batches_that_skips_a_batch_fails_sc10():
    class Skips(zoo.NumpyBatches):
        def restore(self, state):
            super().restore(state)
            self.offset += 1 if self.offset else 0

    report = check(Skips, clauses=["SC10"], space=ConfigSpace(num_workers=(0,)))
    result = report["SC10"]
    assert result.status == "failed", result.message
    assert "differs: ['input_ids']: expected array([" in result.message, result.message
    assert max(map(len, result.message.splitlines())) < 1200, "each batch is shown in one short line"
    assert "load_state_dict" in result.reproduction or "state=state" in result.reproduction


# --- SC17's one resume per distinct round-tripped state (`state_steps.indistinguishable`) -----------

def test_round_trips_of_a_plain_state_are_indistinguishable() -> None:
    from stateful_contract.repro.state_steps import ROUND_TRIPS, indistinguishable

    generator = torch.Generator().manual_seed(3).get_state()
    state = {"epoch": 2, "done": False, "next": None, "rng": generator, "same": generator, "order": [1.5, -0.0]}
    copies = [via(state) for via in ROUND_TRIPS.values()]
    assert all(indistinguishable(copies[0], c) for c in copies)


@pytest.mark.parametrize(("a", "b"), [
    ({"n": 1}, {"n": True}),                                   # bool is an int, but not to a loader that checks
    ({"n": (1, 2)}, {"n": [1, 2]}),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),                      # key order: a loader may zip the values
    ({"x": 0.0}, {"x": -0.0}),
    ({"t": torch.zeros(2, dtype=torch.int64)}, {"t": torch.zeros(2, dtype=torch.int32)}),
    ({"t": torch.arange(4)[1:]}, {"t": torch.arange(1, 4)}),  # the same values from another offset
], ids=["bool-int", "tuple-list", "key-order", "signed-zero", "dtype", "offset"])
def test_states_a_loader_could_tell_apart_are_not_indistinguishable(a: object, b: object) -> None:
    from stateful_contract.repro.state_steps import indistinguishable

    assert not indistinguishable(a, b)


def test_sharing_and_unknown_leaves_are_not_indistinguishable() -> None:
    from stateful_contract.repro.state_steps import indistinguishable

    shared = torch.zeros(3)
    assert not indistinguishable({"a": shared, "b": shared}, {"a": torch.zeros(3), "b": torch.zeros(3)})
    leaf = Window(torch.zeros(1), 3)  # what a loader reads of an object of its own is unknown
    assert not indistinguishable({"w": leaf}, {"w": leaf})


def test_a_stream_that_ends_after_one_batch_says_so_in_english() -> None:
    one = [{"index": torch.tensor([0])}]
    assert "ended after 1 batch, but" in (stream_difference([*one, *one], one) or "")
    assert "has 1 batch, but" in (stream_difference([], one) or "")
