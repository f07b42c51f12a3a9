"""``LoaderConfig(...)`` and ``Position(...)`` read from a command line, without eval."""

from __future__ import annotations

import ast
from typing import Any

from .._engine.steps import Position
from ..config import LoaderConfig

__all__ = ["parse_call"]

_TYPES: dict[str, type[Any]] = {"LoaderConfig": LoaderConfig, "Position": Position}


def parse_call(text: str, expected: type[Any]) -> Any:
    """``LoaderConfig(dataset_size=9, ...)`` or ``Position(...)`` with literal arguments, without eval."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"cannot parse {text!r}: {e}") from None
    if (not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name)
            or _TYPES.get(node.func.id) is not expected or node.args):
        raise ValueError(f"expected {expected.__name__}(name=value, ...), got {text!r}")
    try:
        kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
    except ValueError:
        raise ValueError(f"only literal values are accepted in {text!r}") from None
    return expected(**kwargs)
