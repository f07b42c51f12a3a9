"""Loaders a type checker must accept where a `StatefulLoader` is expected (no errors here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader

from stateful_contract import StatefulLoader, TokenDataset


class PositionalLoader:
    """The fixed signature: the state is accepted positionally, as trainers pass it."""

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def resume(loader: StatefulLoader, state: dict[str, Any]) -> None:
    loader.load_state_dict(state)  # how trainers call it


resume(PositionalLoader(), {})
resume(StatefulDataLoader(TokenDataset(4)), {})  # torchdata's own loader
