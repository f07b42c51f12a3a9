"""The `StatefulLoader` protocol: what a checkpointable loader looks like to a type checker.

The signature of `load_state_dict` is positional-only on purpose. Trainers call
``loader.load_state_dict(state)`` positionally, as torchdata's ``StatefulDataLoader`` accepts it; a wrapper
declaring ``def load_state_dict(self, **kwargs)`` (the seed report's bug) cannot accept that call, and mypy or
pyright reject it where a `StatefulLoader` is expected. ``runtime_checkable`` only checks that the three
methods exist (clause SC01); the signature itself is checked by clause SC02.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from typing_extensions import Protocol, runtime_checkable

__all__ = ["StatefulLoader"]


@runtime_checkable
class StatefulLoader(Protocol):
    """An iterable loader whose position can be saved and restored."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any], /) -> None: ...
