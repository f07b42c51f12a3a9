"""MindSpeed-MM's bug report's signature: a type checker must reject it where a `StatefulLoader` is expected."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateful_contract import StatefulLoader


class KeywordOnlyLoader:
    """MindSpeed-MM's PrefetchGradAccDataLoader: ``load_state_dict(self, **kwargs)``."""

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, **kwargs: Any) -> None:
        pass


loader: StatefulLoader = KeywordOnlyLoader()  # the line the typing test expects an error on
