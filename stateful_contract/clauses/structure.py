"""Structure clauses (SC01-SC03): judged on the loader object, before any resume.

A failure here is reported once instead of cascading into every resume clause.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .violation import violated

__all__ = [
    "implements_protocol",
    "load_accepts_positional_state",
    "state_is_a_str_keyed_dict",
]

REQUIRED_METHODS = ("__iter__", "state_dict", "load_state_dict")


def implements_protocol(loader: Any) -> None:
    """SC01: the loader has callable ``__iter__``, ``state_dict`` and ``load_state_dict``."""
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(loader, m, None))]
    if missing:
        raise violated(
            "SC01",
            expected=f"callable {', '.join(REQUIRED_METHODS)} on {type(loader).__name__}",
            got=f"{type(loader).__name__} has no callable {', '.join(missing)}",
        )


def signature_text(method: Any) -> str:
    try:
        return f"{getattr(method, '__name__', 'load_state_dict')}{inspect.signature(method)}"
    except (TypeError, ValueError):
        return "load_state_dict(<signature not inspectable>)"


def load_accepts_positional_state(loader_type: str, signature: str, error: BaseException | None) -> None:
    """SC02: ``load_state_dict(state)`` with one positional argument works.

    ``error`` is what the positional call raised (None when it worked). Trainers call
    it positionally, e.g. MindSpeed-MM's
    ``self.train_dataloader.load_state_dict(state["extra_state"]["train_dataloader"])``.
    """
    if error is not None:
        raise violated(
            "SC02",
            expected=(f"{loader_type}.load_state_dict(state) to accept the state positionally, as "
                      "torchdata's StatefulDataLoader.load_state_dict(state_dict) does; trainers "
                      "resume with loader.load_state_dict(checkpoint[...]), so every resume crashes otherwise"),
            got=(f"{type(error).__name__}: {error}\n  declared as: {signature}\n"
                 "  fix: def load_state_dict(self, state_dict: dict[str, Any]) -> None"),
        )


def state_is_a_str_keyed_dict(state: Any, where: str) -> None:
    """SC03: ``state_dict()`` returns a ``dict`` with ``str`` keys (checked at several points)."""
    if not isinstance(state, Mapping) or not isinstance(state, dict):
        raise violated(
            "SC03",
            context=where,
            expected="state_dict() to return a dict (checkpoint code such as torch.distributed.checkpoint "
                     "and trainers' extra_state merge it as a dict)",
            got=f"{type(state).__name__}: {state!r:.200}",
        )
    bad = [k for k in state if not isinstance(k, str)]
    if bad:
        raise violated(
            "SC03",
            context=where,
            expected="every key of the state dict to be a str",
            got=f"non-str keys {bad[:5]!r} (types {sorted({type(k).__name__ for k in bad})})",
        )
