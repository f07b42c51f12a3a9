"""Strict tier (SC40): beyond StatefulDataLoader, which accepts all of these silently.

Reported and badged apart from the core clauses, and run only when asked for.
"""

from __future__ import annotations

from typing import Any

from ..engine.compare import describe_batch
from .violation import violated

__all__ = ["bad_state_is_refused"]


def bad_state_is_refused(kind: str, error: BaseException | None, first_batch: Any) -> None:
    """SC40: a bad state is refused with an exception that names the problem.

    ``error`` is what ``load_state_dict(bad)`` or the next ``iter()``/``next()`` raised
    (None when nothing was raised); ``first_batch`` is what the loader yielded instead.
    """
    if error is None:
        shown = "no batch" if first_batch is None else describe_batch(first_batch)
        raise violated(
            "SC40", context=f"load_state_dict({kind})",
            expected="an exception at load_state_dict or at the next iter() that names the problem "
                     "(a silent restart re-trains on data the model has already seen)",
            got=f"accepted silently; the loader then yielded {shown}",
        )
    if not str(error).strip():
        raise violated(
            "SC40", context=f"load_state_dict({kind})",
            expected="the exception to name the problem",
            got=f"a bare {type(error).__name__} with no message",
        )
