"""The `StatefulLoader` protocol: what a checkpointable loader looks like to a type checker.

``load_state_dict`` is positional-only on purpose, so mypy or pyright reject the seed's keyword-only wrapper
(docs/clauses.md, SC02); ``runtime_checkable`` checks only that the three methods exist (SC01), not that.
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
