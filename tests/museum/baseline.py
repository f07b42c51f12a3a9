"""The baseline a user writes by hand: torchdata's own test pattern.

torchdata's ``test_state_dict.py`` takes ``k`` batches for ``k`` in {0, 1, 10}, takes
``state_dict()``, builds a fresh loader, ``load_state_dict``, collects the rest of the
*same* epoch and compares it with the uninterrupted rest of that epoch. This module
is that pattern, run on a few default configurations, so the museum can say which
reported bugs it would have caught. It looks at one epoch, never iterates a resumed
loader further, never resumes twice and never calls ``set_epoch``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import torch

from stateful_contract import LoaderConfig

__all__ = ["BASELINE_KS", "BaselineResult", "baseline_configs", "run_baseline", "torchdata_pattern"]

#: Batches taken before the checkpoint, as in torchdata's tests.
BASELINE_KS = (0, 1, 10)


@dataclasses.dataclass(frozen=True)
class BaselineResult:
    caught: bool
    #: the first (config, k) that caught it, and what differed
    where: str = ""


def _same_batch(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_batch(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))
    return bool(a == b)


def _indices(batches: list[Any]) -> list[list[int]]:
    return [b["index"].tolist() if isinstance(b, dict) and "index" in b else b for b in batches]


def _fresh(factory: Callable[[LoaderConfig], Any], config: LoaderConfig) -> Any:
    torch.manual_seed(config.seed)  # as a test seeds at its start, and as the contract does
    return factory(config)


def torchdata_pattern(factory: Callable[[LoaderConfig], Any], config: LoaderConfig, k: int) -> str | None:
    """``None`` when the resumed rest of the epoch equals the uninterrupted one, else what differed.

    An exception anywhere in the pattern is a catch too: the hand-written test errors.
    """
    try:
        full = list(iter(_fresh(factory, config)))
        loader = _fresh(factory, config)
        it = iter(loader)
        taken = min(k, len(full))  # k is meant to fall inside the epoch: never run into its StopIteration
        for _ in range(taken):
            next(it)
        state = loader.state_dict()
        resumed_loader = _fresh(factory, config)
        resumed_loader.load_state_dict(state)
        rest = list(iter(resumed_loader))
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"
    expected = full[taken:]
    if len(rest) != len(expected) or not all(_same_batch(a, b) for a, b in zip(rest, expected)):
        return f"after {taken} batches: expected {_indices(expected)}, got {_indices(rest)}"
    return None


def baseline_configs(world_size: int = 1) -> list[LoaderConfig]:
    """24 samples in batches of 2 (12 batches), shuffled or not, 0 or 2 workers; every rank of ``world_size``."""
    return [LoaderConfig(dataset_size=24, batch_size=2, shuffle=shuffle, num_workers=workers, seed=0,
                         rank=rank, world_size=world_size)
            for shuffle in (False, True) for workers in (0, 2) for rank in range(world_size)]


def run_baseline(factory: Callable[[LoaderConfig], Any], configs: Iterable[LoaderConfig] | None = None,
                 ks: Iterable[int] = BASELINE_KS) -> BaselineResult:
    """The pattern over ``configs`` x ``ks``; caught when any combination differs."""
    for config in configs if configs is not None else baseline_configs():
        for k in ks:
            diff = torchdata_pattern(factory, config, k)
            if diff is not None:
                return BaselineResult(True, f"{config.as_code()}, k={k}: {diff}")
    return BaselineResult(False)
