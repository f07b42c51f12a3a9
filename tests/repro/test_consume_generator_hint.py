"""A declared consumption that is a generator function is told the same cause and fix as a generator
``__iter__``: its ``iter()`` leaves the loader where the previous pass left it, and the fix is in it.

A trainer that moves each batch to the device in a generator (``def to_device(loader): for b in loader:
yield move(b)``) declared with ``--consume`` failed SC22 right after a new ``iter()`` with no hint: the
hint looked for a generator of the loader's class, and the drawn loader's iterator is the contract's
adapter around the consumption's generator.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.clauses.trainer import CutShort

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

IN_PROCESS = ConfigSpace(num_workers=(0,))
ONE = LoaderConfig(dataset_size=1, batch_size=1)
#: Passes cut short after 1 batch; the state taken right after the second pass's iter().
RIGHT_AFTER_A_NEW_ITER = CutShort(limit=1, passes=1, into=0)


def loader(config: LoaderConfig) -> Any:
    return config.stateful_dataloader()


def to_device(loader: Any) -> Iterator[Any]:
    """Lazy: the loader's pass starts at the first next()."""
    for batch in loader:
        yield dict(batch)


def delegating(loader: Any) -> Iterator[Any]:
    """A pytest class's ``consume`` method returning another function's generator."""
    return to_device(loader)


def to_device_eager(loader: Any) -> Iterator[Any]:
    it = iter(loader)
    return (dict(batch) for batch in it)


def _sc22(consume: Any) -> Any:
    return check(loader, clauses=["SC22"], space=IN_PROCESS, consume=consume,
                 replay=(ONE, RIGHT_AFTER_A_NEW_ITER))["SC22"]


@pytest.mark.parametrize("consume", [to_device, delegating])
def test_a_generator_consumption_failing_right_after_iter_is_told_why_and_how_to_fix_it(consume: Any) -> None:
    lazy = _sc22(consume)
    assert lazy.status == "failed", lazy.message
    assert "The declared consumption draws through to_device(), a generator function" in lazy.got, lazy.got
    assert "start the loader's iterator when to_device is called" in lazy.got
    assert "Its __iter__ is a generator function" not in lazy.got  # the loader is not the one to fix



def test_the_fix_the_hint_shows_resumes_exactly() -> None:
    """The same point resumes exactly once the consumption starts the pass (a generator expression over
    iter(loader), which is eager)."""
    assert _sc22(to_device_eager).status == "passed"
