"""Endless streams on several ranks (issue 31, items 1 and 5), and messages that name the user's class under a
declared consumption (item 7).

An endless stream on several ranks is judged natively: SC30 compares each rank's resumed stream with its
uninterrupted one over the endless horizon, SC32 counts each rank's batches stretch by stretch (docs/clauses.md,
SC30-SC32 and "Endless streams"). Multi-rank runs take seconds each: one example each, replayed, except the
correct loader's search (``acceptance``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateful_contract import ConfigSpace, LoaderConfig, check

IN_PROCESS = ConfigSpace(num_workers=(0,))


class NoEpochHook:
    """A correct loader with no ``set_epoch``, drawn through a consumption below."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.base.load_state_dict(state_dict)


class NoLoad:
    """Lacks ``load_state_dict`` (SC01)."""

    def __init__(self, config: LoaderConfig) -> None:
        self.base = config.stateful_dataloader()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.base)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()  # type: ignore[no-any-return]


def plain(loader: Any) -> Iterator[Any]:
    """The trainer draws from ``iter(loader)``: the consumption changes nothing but how the check draws."""
    return iter(loader)


def test_with_a_declared_consumption_messages_name_the_users_class_not_the_adapter() -> None:
    sc21 = check(NoEpochHook, consume=plain, clauses=["SC21"], space=IN_PROCESS)["SC21"]
    assert sc21.status == "not-judged" and sc21.message.startswith("NoEpochHook has no set_epoch"), sc21.message
    hooked = check(NoEpochHook, consume=plain, clauses=["SC21"], epoch_hook="reshuffle", space=IN_PROCESS)["SC21"]
    assert hooked.status == "failed" and "NoEpochHook has no reshuffle" in hooked.got, hooked.got
    assert "Drawn" not in hooked.message + hooked.reproduction
    assert "factory = drawn_through(factory, consume)" in hooked.reproduction  # the reproduction draws as the trainer
    sc01 = check(NoLoad, consume=plain, clauses=["SC01"], space=IN_PROCESS)["SC01"]
    assert sc01.status == "failed" and "NoLoad has no callable load_state_dict" in sc01.got, sc01.got
    assert "Drawn" not in sc01.message
