"""Steps on states: copies, round trips, checkpoint files, and the bad states SC40 feeds.

Public through `stateful_contract.repro`, and recorded like every step
(`stateful_contract._engine.recording`).
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ..config import LoaderConfig
from .recording import recorded
from .steps import Factory, LoaderError, LoadForm, NotJudgeable, Position, checkpoint, fresh, load, stream

__all__ = [
    "BAD_STATES",
    "ROUND_TRIPS",
    "TRAINER_KEYS",
    "bad_state",
    "load_and_iterate",
    "load_checkpoint",
    "round_trip",
    "save_checkpoint",
    "snapshot",
]


@recorded("before")
def snapshot(state: Any) -> Any:
    """A deep copy of ``state`` (``copy.deepcopy``, else a pickle round trip)."""
    try:
        return copy.deepcopy(state)
    except Exception:
        try:
            return pickle.loads(pickle.dumps(state))
        except Exception as e:
            raise NotJudgeable(f"the state can be neither deep-copied nor pickled ({e!r}); see SC17") from e


def _torch_round_trip(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


#: The round trips checkpoint code puts a state through (SC17), by the name a report shows.
ROUND_TRIPS: dict[str, Callable[[Any], Any]] = {
    "torch.save + torch.load(weights_only=True)": _torch_round_trip,
    "pickle": lambda s: pickle.loads(pickle.dumps(s)),
    "copy.deepcopy": copy.deepcopy,
}


@recorded("state")
def round_trip(state: Any, via: str) -> Any:
    """``state`` after the round trip named ``via`` (a key of `ROUND_TRIPS`)."""
    return ROUND_TRIPS[via](state)


#: The bad inputs the strict tier (SC40) feeds to ``load_state_dict``, by name.
BAD_STATES = (
    "None",
    "{}",
    "a list",
    "a state with an unknown key",
    "a state without its first key",
    "a state from another config (batch_size + 1)",
    "a state from another rank (rank 1 of 2, loaded by rank 0 of 2)",
)


@recorded("bad")
def bad_state(factory: Factory, config: LoaderConfig, kind: str) -> Any:
    """The bad state named ``kind`` (one of `BAD_STATES`) for loaders of ``config``."""

    def early(c: LoaderConfig) -> Any:
        # After the first batch, or after iter() when an epoch has no batch (drop_last).
        first = stream(fresh(factory, c), 1, limit=1)
        return checkpoint(fresh(factory, c), Position(0, len(first)))

    if kind == "None":
        return None
    if kind == "{}":
        return {}
    if kind == "a list":
        return [1, 2, 3]
    if kind == "a state with an unknown key":
        return {**early(config), "__not_a_state_key__": 1}
    if kind == "a state without its first key":
        good = early(config)
        return {k: v for k, v in list(good.items())[1:]}
    if kind.startswith("a state from another config"):
        return early(replace(config, batch_size=config.batch_size + 1))
    if kind.startswith("a state from another rank"):
        return early(replace(config, world_size=2, rank=1))
    raise ValueError(f"unknown bad state {kind!r}; known: {', '.join(BAD_STATES)}")


@recorded(("error", "first"))
def load_and_iterate(loader: Any, state: Any, load_form: LoadForm = "positional") -> tuple[BaseException | None, Any]:
    """``load_state_dict(state)``, then the first batch: what was raised (or None) and the batch (or None)."""
    try:
        load(loader, state, load_form)
        return None, next(iter(loader), None)
    except LoaderError as e:
        return e.error, None
    except Exception as e:
        return e, None


#: Where a state goes in a trainer's per-rank checkpoint file (MindSpeed-MM's ``extra_state``).
TRAINER_KEYS = ("extra_state", "train_dataloader")


@recorded()
def save_checkpoint(state: Any, path: str) -> None:
    """``torch.save({"extra_state": {"train_dataloader": state}}, path)``, as trainers save a loader."""
    torch.save({TRAINER_KEYS[0]: {TRAINER_KEYS[1]: state}}, path)


@recorded("state")
def load_checkpoint(path: str) -> Any:
    """The loader state in a trainer checkpoint file, read as checkpoint loaders do (``weights_only=True``)."""
    return torch.load(path, weights_only=True)[TRAINER_KEYS[0]][TRAINER_KEYS[1]]
