"""A failure caused deep inside torch says what torch refused, in a line a stranger can act on: the global
``torch.load(weights_only=True)`` would not load (not its first line, in terminal bold), the entry
``torch.distributed.checkpoint`` could not load into its template (not every rank's traceback), and why DCP
handed ``load_state_dict`` a state other than the one it saved (non-str keys nested in the state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.repro.exception_text import exception_text


class Forwarding:
    """Hands ``StatefulDataLoader``'s state through, with something of its own beside it (`extra`)."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base, self.batches = config.stateful_dataloader(), 0

    def __iter__(self) -> Iterator[Any]:
        for batch in self.base:
            self.batches += 1
            yield batch

    def extra(self) -> Any:
        return self.batches

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "extra": self.extra()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict["base"])


class NumpyInState(Forwarding):
    """Correct in memory; its state holds a numpy array, which ``torch.load(weights_only=True)`` refuses."""

    def extra(self) -> Any:
        return np.arange(3)


class TensorOnlyOnceIterated(Forwarding):
    """Its state holds None until the first batch, a tensor after: DCP cannot load the tensor into the None of a
    fresh loader's template."""

    def extra(self) -> Any:
        return torch.tensor([self.batches]) if self.batches else None


class IntKeysNested(Forwarding):
    """Its state is keyed by rank number under a str key: DCP loads ``"0"`` and leaves the template's ``0``."""

    def state_dict(self) -> dict[str, Any]:
        return {"per_rank": {0: self.base.state_dict()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict["per_rank"][0])


def _failure(loader: type[Forwarding], clause: str) -> str:
    report = check(loader, profile="dev", clauses=[clause], isolation="in-process", seed=1)
    assert report[clause].status == "failed", report[clause].message
    return report[clause].message


def test_the_global_weights_only_refuses_is_named() -> None:
    message = _failure(NumpyInState, "SC17")
    assert "\x1b" not in message
    got = next(line for line in message.splitlines() if line.startswith("Got:"))
    assert "Weights only load failed" in got and "Unsupported global" in got and "numpy" in got


def test_the_entry_dcp_could_not_load_is_named_in_one_line() -> None:
    message = _failure(TensorOnlyOnceIterated, "SC19")
    got = next(line for line in message.splitlines() if line.startswith("Got:"))
    assert "CheckpointException" in got and "Invalid checkpoint metadata for dataloader.extra" in got
    assert "Traceback" not in got


def test_dcp_dropping_nested_int_keys_is_explained() -> None:
    message = _failure(IntKeysNested, "SC19")
    assert "the saved state has non-str keys (state['per_rank'][0] (int))" in message
    assert "make every key of the state a str, at every depth" in message


@pytest.mark.parametrize(("text", "line"), [
    ("plain", "plain"),
    ("first\nsecond line, no cause", "first\nsecond line, no cause"),
    ("\x1b[1mbold\x1b[0m start\n\tdetail\n\tValueError: the cause\ntrailer", "bold start ... ValueError: the cause"),
    ("failed\n\tWeightsUnpickler error: Unsupported global: GLOBAL x.y", "failed ... WeightsUnpickler error: "
                                                                         "Unsupported global: GLOBAL x.y"),
])
def test_exception_text(text: str, line: str) -> None:
    assert exception_text(RuntimeError(text)) == line


class ReturnsItsOwnGenerator(Forwarding):
    """``__iter__`` returns ``self._run()``: as lazy as a generator ``__iter__``, the base's pass starts late."""

    def __iter__(self) -> Iterator[Any]:
        return self._run()

    def _run(self) -> Iterator[Any]:
        yield from self.base

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


def test_an_iter_returning_its_own_generator_is_told_why_as_a_generator_iter_is() -> None:
    report = check(ReturnsItsOwnGenerator, profile="dev", clauses=["SC22"], isolation="in-process", seed=1,
                   space=ConfigSpace(num_workers=(0,)))
    assert report["SC22"].status == "failed", report["SC22"].message
    assert "or returns a generator of its own, as return self._run() does" in report["SC22"].message
