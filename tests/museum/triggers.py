"""The usage patterns of CONTRACT.md v2 that no clause exercises yet, written out by hand.

The museum uses them to show that a piece the contract does not catch today really
has its bug under the usage its report describes (and that the correct bases do not):
an xfail on a clause that does not exist says nothing unless the bug is there to find.
They are deliberately small, one fixed scenario each, not the Hypothesis searches the
clauses SC19-SC23 and SC31 will be; each returns ``None`` when the loader behaves,
else one line saying what went wrong.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from stateful_contract import LoaderConfig

__all__ = ["TRIGGERS"]

Factory = Callable[[LoaderConfig], Any]


def _fresh(factory: Factory, config: LoaderConfig) -> Any:
    torch.manual_seed(config.seed)
    return factory(config)


def _ids(batch: Any) -> list[int]:
    return batch["index"].tolist()  # type: ignore[no-any-return]


def _epochs(loader: Any, n: int) -> list[list[list[int]]]:
    return [[_ids(b) for b in loader] for _ in range(n)]


def _flat(epochs: list[list[list[int]]]) -> list[list[int]]:
    return [b for e in epochs for b in e]


def _at(factory: Factory, config: LoaderConfig, epoch: int, batches: int, *, after_stop: bool = False) -> Any:
    """The state of a loader run to batch ``batches`` of ``epoch`` (past its StopIteration if asked)."""
    loader = _fresh(factory, config)
    _epochs(loader, epoch)
    it = iter(loader)
    for _ in range(batches):
        next(it)
    if after_stop:
        assert next(it, None) is None, "after_stop needs batches == the epoch's length"
    return loader.state_dict()


def _differs(expected: list[list[int]], got: list[list[int]]) -> str | None:
    return None if expected == got else f"expected {expected}, got {got}"


def resume_once(factory: Factory, config: LoaderConfig, batches: int = 1) -> str | None:
    """SC10, one fixed example: resume after ``batches`` batches of epoch 0, compare two epochs on."""
    expected = _flat(_epochs(_fresh(factory, config), 2))[batches:]
    loader = _fresh(factory, config)
    loader.load_state_dict(_at(factory, config, 0, batches))
    return _differs(expected, _flat(_epochs(loader, 3))[: len(expected)])


def resume_twice(factory: Factory, config: LoaderConfig, first: int = 3, then: int = 1) -> str | None:
    """SC11, one fixed example: resume after ``first`` batches, take ``then`` more, resume again."""
    expected = _flat(_epochs(_fresh(factory, config), 2))[first + then:]
    try:
        run2 = _fresh(factory, config)
        run2.load_state_dict(_at(factory, config, 0, first))
        it = iter(run2)
        for _ in range(then):
            next(it)
        run3 = _fresh(factory, config)
        run3.load_state_dict(run2.state_dict())
        got = _flat(_epochs(run3, 3))[: len(expected)]
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"
    return _differs(expected, got)


def template_then_load(factory: Factory, config: LoaderConfig) -> str | None:
    """SC19, by hand: ``state_dict()`` on a fresh loader first, then ``load_state_dict(saved)``."""
    expected = _flat(_epochs(_fresh(factory, config), 2))[1:]
    saved = _at(factory, config, 0, 1)
    loader = _fresh(factory, config)
    loader.state_dict()  # the template torch.distributed.checkpoint asks for
    loader.load_state_dict(saved)
    return _differs(expected, _flat(_epochs(loader, 2))[: len(expected)])


def dcp_save_and_load(factory: Factory, config: LoaderConfig) -> str | None:
    """SC19, by hand: a real ``torch.distributed.checkpoint`` save and load (one process) of the loader's state."""
    import torch.distributed.checkpoint as dcp

    expected = _flat(_epochs(_fresh(factory, config), 2))[1:]
    saved = _at(factory, config, 0, 1)
    with tempfile.TemporaryDirectory() as d, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is ... uninitialized, assuming ... a single process"
        dcp.save({"dataloader": saved}, checkpoint_id=d)
        loader = _fresh(factory, config)
        template = {"dataloader": loader.state_dict()}
        dcp.load(template, checkpoint_id=d)
        loader.load_state_dict(template["dataloader"])
    return _differs(expected, _flat(_epochs(loader, 2))[: len(expected)])


def reload_into_a_used_loader(factory: Factory, config: LoaderConfig) -> str | None:
    """SC20, by hand: ``load_state_dict(saved)`` on a loader that already ran an epoch and a batch."""
    expected = _flat(_epochs(_fresh(factory, config), 2))[1:]
    saved = _at(factory, config, 0, 1)
    loader = _fresh(factory, config)
    _epochs(loader, 1)
    next(iter(loader))
    loader.load_state_dict(saved)
    return _differs(expected, _flat(_epochs(loader, 2))[: len(expected)])


def set_epoch_loop(factory: Factory, config: LoaderConfig, epochs: int = 3) -> str | None:
    """SC21, by hand: ``for epoch in range(start, n): set_epoch(epoch); for batch in loader``.

    Checkpoints after StopIteration of epoch 0 and, for loaders with ``set_epoch``, after
    its last batch, both resumed at epoch 1 as trainers do; every epoch after the resume
    must be the uninterrupted run's.
    """
    def run(loader: Any, start: int) -> list[list[list[int]]]:
        out = []
        for epoch in range(start, epochs):
            if callable(getattr(loader, "set_epoch", None)):
                loader.set_epoch(epoch)
            out.append([_ids(b) for b in loader])
        return out

    reference = run(_fresh(factory, config), 0)
    n = len(reference[0])
    has_set_epoch = callable(getattr(_fresh(factory, config), "set_epoch", None))
    points = [("after StopIteration", True)] + ([("after the last batch", False)] if has_set_epoch else [])
    for where, after_stop in points:
        loader = _fresh(factory, config)
        if has_set_epoch:
            loader.set_epoch(0)
        it = iter(loader)
        for _ in range(n):
            next(it)
        if after_stop:
            next(it, None)
        resumed = _fresh(factory, config)
        resumed.load_state_dict(loader.state_dict())
        got = run(resumed, 1)
        if got != reference[1:]:
            lengths = [len(e) for e in got]
            return f"checkpoint {where} of epoch 0, resumed at epoch 1: epoch lengths {lengths}, expected " \
                   f"{[len(e) for e in reference[1:]]}; first epoch {got[0]}, expected {reference[1]}"
    return None


def cut_short_passes(factory: Factory, config: LoaderConfig, limit: int = 2, passes: int = 6) -> str | None:
    """SC22, by hand: passes that break after ``limit`` batches, checkpointed inside pass 1.

    Two checkpoints: after one batch of pass 1, and right after pass 1's ``iter()``,
    before its first batch. The resumed run finishes pass 1, then runs the rest.
    """
    def run(loader: Any, count: int, first: int | None = None) -> list[list[int]]:
        out: list[list[int]] = []
        for p in range(count):
            it = iter(loader)
            for _ in range(first if p == 0 and first is not None else limit):
                batch = next(it, None)
                if batch is None:
                    break
                out.append(_ids(batch))
        return out

    reference = run(_fresh(factory, config), passes)
    for into_pass in (1, 0):
        loader = _fresh(factory, config)
        got = run(loader, 1)  # pass 0, cut short
        it = iter(loader)  # pass 1
        got += [_ids(next(it)) for _ in range(into_pass)]
        resumed = _fresh(factory, config)
        resumed.load_state_dict(loader.state_dict())
        got += run(resumed, passes - 1, first=limit - into_pass)
        if got != reference:
            return f"checkpoint {into_pass} batch(es) into pass 1: expected {reference}, got {got}"
    return None


def worker_count_change(factory: Factory, config: LoaderConfig, to: int = 1) -> str | None:
    """SC23, by hand: a state saved with ``config.num_workers`` workers resumed with ``to``.

    Either ``load_state_dict`` or the next ``iter()`` raises an exception that names
    the workers, or the resumed stream is exactly the uninterrupted one.
    """
    other = dataclasses.replace(config, num_workers=to)
    expected = _flat(_epochs(_fresh(factory, config), 2))[3:]
    saved = _at(factory, config, 0, 3)
    try:
        loader = _fresh(factory, other)
        loader.load_state_dict(saved)
        got = _flat(_epochs(loader, 2))[: len(expected)]
    except Exception as e:
        return None if "worker" in str(e).lower() else f"raised without naming the workers: {e!r}"
    return _differs(expected, got)


def _coverage(expected: list[int], got: list[int]) -> str | None:
    lost = sorted((Counter(expected) - Counter(got)).elements())
    extra = sorted((Counter(got) - Counter(expected)).elements())
    return None if not lost and not extra else f"lost {lost}, repeated {extra}"


def _rank_configs(config: LoaderConfig, world_size: int) -> list[LoaderConfig]:
    return [dataclasses.replace(config, rank=r, world_size=world_size) for r in range(world_size)]


def _flatten(state: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(state, dict) and state:
        out: dict[str, Any] = {}
        for k, v in state.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): state}


def _unflatten(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def shared_dcp_key(factory: Factory, config: LoaderConfig, world_size: int = 2) -> str | None:
    """SC30's shared-key save, emulated in one process: ``dcp.save({"dataloader": loader})`` on every rank.

    DCP keeps one copy of a key that every rank saves (it takes such items to be
    replicated; docs/distributed.md measured that both ranks then load rank 1's value),
    so each rank loads its own rank-unique keys plus the last rank's copy of the shared
    ones. The resumed ranks must together cover the rest of the epoch exactly.
    """
    configs = _rank_configs(config, world_size)
    states = [_flatten(_at(factory, c, 0, 1)) for c in configs]
    shared = set.intersection(*(set(s) for s in states))
    expected = [i for c in configs for b in _epochs(_fresh(factory, c), 1)[0][1:] for i in b]
    got = []
    for c, state in zip(configs, states):
        merged = {k: (states[-1][k] if k in shared else v) for k, v in state.items()}
        loader = _fresh(factory, c)
        loader.load_state_dict(_unflatten(merged))
        got += [i for b in _epochs(loader, 1)[0] for i in b]
    return _coverage(expected, got)


def world_size_change(factory: Factory, config: LoaderConfig, saved_on: int = 2, resumed_on: int = 1) -> str | None:
    """SC31, by hand: states saved on ``saved_on`` ranks, merged as a DCP checkpoint would be, resumed on ``resumed_on``.

    Either loading raises an exception naming the world sizes, or the resumed ranks
    cover exactly the samples the saving ranks had not consumed in that epoch.
    """
    saving = _rank_configs(config, saved_on)
    merged: dict[str, Any] = {}
    consumed: list[int] = []
    for c in saving:
        loader = _fresh(factory, c)
        it = iter(loader)
        consumed += [i for _ in range(2) for i in _ids(next(it))]
        merged.update(_flatten(loader.state_dict()))
    rest = sorted((Counter(range(config.dataset_size)) - Counter(consumed)).elements())
    got: list[int] = []
    try:
        for c in _rank_configs(config, resumed_on):
            loader = _fresh(factory, c)
            loader.load_state_dict(_unflatten(merged))
            got += [i for b in _epochs(loader, 1)[0] for i in b]
    except Exception as e:
        return None if "world" in str(e).lower() or "rank" in str(e).lower() else f"raised without naming the world sizes: {e!r}"
    return _coverage(rest, got)


#: Clause of CONTRACT.md v2 -> hand-written usage patterns that stand in for it (for SC10 and
#: SC11, which exist, one fixed example each, for pieces the ci profile's search misses).
TRIGGERS: dict[str, list[Callable[..., str | None]]] = {
    "SC10": [resume_once],
    "SC11": [resume_twice],
    "SC19": [template_then_load, dcp_save_and_load],
    "SC20": [reload_into_a_used_loader],
    "SC21": [set_epoch_loop],
    "SC22": [cut_short_passes],
    "SC23": [worker_count_change],
    "SC30": [shared_dcp_key],
    "SC31": [world_size_change],
}
