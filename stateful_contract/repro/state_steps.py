"""Steps on states: copies, round trips, checkpoint files, and the bad states SC40 feeds (public through
`stateful_contract.repro`, recorded like every step)."""

from __future__ import annotations

import collections
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

__all__ = ["BAD_STATES", "ROUND_TRIPS", "bad_state", "indistinguishable", "load_and_iterate",
           "load_checkpoint", "round_trip", "save_checkpoint", "snapshot"]


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


def indistinguishable(a: Any, b: Any) -> bool:
    """Whether no ``load_state_dict`` can tell the two states apart but by identity: the same types all
    the way down (dicts in the same key order), values, tensor dtypes, layouts and bytes, and sharing
    between their parts. A leaf of another type is never the same: what its loader reads is unknown."""
    first = _fingerprint(a, {}, {})
    return first is not None and first == _fingerprint(b, {}, {})


_LEAVES = (str, int, float, bool, bytes, type(None))


def _fingerprint(value: Any, seen: dict[int, int], storages: dict[int, int]) -> Any:
    """A value equal for two states exactly when `indistinguishable` holds; None for an unknown leaf."""
    kind = type(value)
    if kind in _LEAVES:
        return kind.__name__, repr(value)  # repr: 0.0 and -0.0, nan, 1 and True differ
    if id(value) in seen:  # a part shared with another (deepcopy, pickle and torch.save keep sharing)
        return "again", seen[id(value)]
    seen[id(value)] = len(seen)
    if kind is torch.Tensor:
        storage = value.untyped_storage()
        key = storage.data_ptr()
        # bytes(storage) reads it byte by byte in Python: 45 ms for a generator state, against 4 us.
        raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage).cpu().numpy().tobytes()
        held = ("again", storages[key]) if key in storages else ("bytes", raw)
        storages.setdefault(key, len(storages))
        return ("tensor", str(value.dtype), value.device.type, tuple(value.shape), value.stride(),
                value.storage_offset(), value.requires_grad, held)
    parts: list[tuple[Any, ...]]
    if kind in (dict, collections.OrderedDict):
        parts = [(_fingerprint(k, seen, storages), _fingerprint(v, seen, storages)) for k, v in value.items()]
    elif kind in (list, tuple):
        parts = [(_fingerprint(v, seen, storages),) for v in value]
    else:
        return None
    return None if any(None in part for part in parts) else (kind.__name__, tuple(parts))


@recorded("state")
def round_trip(state: Any, via: str) -> Any:
    """``state`` after the round trip named ``via`` (a key of `ROUND_TRIPS`)."""
    return ROUND_TRIPS[via](state)


def _early(factory: Factory, config: LoaderConfig) -> Any:
    """A state taken after the first batch, or after iter() when an epoch has no batch (drop_last)."""
    first = stream(fresh(factory, config), 1, limit=1)
    return checkpoint(fresh(factory, config), Position(0, len(first)))


#: The bad inputs the strict tier (SC40) feeds to ``load_state_dict``, by name: how each is made from a
#: factory and a config.
_BAD: dict[str, Callable[[Factory, LoaderConfig], Any]] = {
    "None": lambda factory, config: None,
    "{}": lambda factory, config: {},
    "a list": lambda factory, config: [1, 2, 3],
    "a state with an unknown key": lambda factory, config: {**_early(factory, config), "__not_a_state_key__": 1},
    "a state without its first key": lambda factory, config: dict(list(_early(factory, config).items())[1:]),
    "a state from another config (batch_size + 1)":
        lambda factory, config: _early(factory, replace(config, batch_size=config.batch_size + 1)),
    "a state from another rank (rank 1 of 2, loaded by rank 0 of 2)":
        lambda factory, config: _early(factory, replace(config, world_size=2, rank=1)),
}
BAD_STATES = tuple(_BAD)


@recorded("bad")
def bad_state(factory: Factory, config: LoaderConfig, kind: str) -> Any:
    """The bad state named ``kind`` (one of `BAD_STATES`) for loaders of ``config``."""
    if kind not in _BAD:
        raise ValueError(f"unknown bad state {kind!r}; known: {', '.join(BAD_STATES)}")
    return _BAD[kind](factory, config)


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
