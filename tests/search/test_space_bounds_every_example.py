"""A narrowed configuration space bounds every example the check runs, not only the ones Hypothesis draws:
the failures an earlier random search saved, a clause's explicit examples and the structure clauses' fixed
config. A user narrows the space to what the loader supports (Megatron-LM's samplers need a whole micro-batch:
megatron/training/datasets/data_samplers.py at NVIDIA/Megatron-LM d98e8a64, ``active_total_samples``); a
check that then fails it on an example outside that space fails a correct loader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from stateful_contract import ConfigSpace, LoaderConfig, check
from stateful_contract.profiles import DATABASE_ENV


class WholeMicroBatches:
    """Correct wherever the dataset holds a whole micro-batch: Megatron's cyclic sampler shape, which cuts each
    epoch to whole micro-batches and divides by that count (ZeroDivisionError on a smaller dataset)."""

    def __init__(self, config: LoaderConfig) -> None:
        self.config, self.consumed, self.pending = config, 0, None

    def __iter__(self) -> Iterator[Any]:
        if self.pending is not None:
            self.consumed, self.pending = self.pending, None
        c = self.config
        active = c.dataset_size - c.dataset_size % c.batch_size
        epoch, within = divmod(self.consumed, active)  # as MegatronPretrainingRandomSampler.__iter__
        del epoch  # one order every epoch: the contract's comparison needs no shuffle here
        order = list(range(active))[within:]
        return self._run(order)

    def _run(self, order: list[int]) -> Iterator[Any]:
        b = self.config.batch_size
        for i in range(0, len(order), b):
            self.consumed += b
            yield torch.utils.data.default_collate([self.config.dataset[j] for j in order[i:i + b]])

    def state_dict(self) -> dict[str, Any]:
        return {"consumed_samples": self.consumed if self.pending is None else self.pending}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = int(state_dict["consumed_samples"])


def whole_micro_batches(config: LoaderConfig) -> WholeMicroBatches:
    return WholeMicroBatches(config)


def test_a_failure_saved_outside_the_space_now_declared_is_not_replayed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(DATABASE_ENV, str(tmp_path / "examples"))
    first = check(whole_micro_batches, profile="dev", clauses=["SC18"], target="whole_micro_batches",
                  isolation="in-process")
    assert first["SC18"].status == "failed"  # a dataset smaller than a micro-batch: the search finds it, saves it
    assert "ZeroDivisionError" in first["SC18"].message
    narrowed = ConfigSpace(dataset_size=(5, 24), batch_size=(1, 5))
    second = check(whole_micro_batches, profile="dev", clauses=["SC18"], target="whole_micro_batches",
                   isolation="in-process", space=narrowed)
    assert second["SC18"].status == "passed", second["SC18"].message


def test_fixed_and_explicit_examples_are_moved_into_the_space() -> None:
    space = ConfigSpace(num_workers=(2,), dataset_size=(9, 24), batch_size=(3, 5), grad_acc_step=(1, 1))
    fitted = space.fitted(LoaderConfig(dataset_size=7, batch_size=2, grad_acc_step=2, num_workers=0))
    assert (fitted.dataset_size, fitted.batch_size, fitted.grad_acc_step, fitted.num_workers) == (9, 3, 1, 2)
    assert space.holds(fitted)
    assert not space.holds(LoaderConfig(dataset_size=7, batch_size=3, grad_acc_step=1, num_workers=2))
    inside = LoaderConfig(dataset_size=12, batch_size=4, num_workers=2)
    assert ConfigSpace(num_workers=(2,)).fitted(inside) is inside  # what the space already draws is untouched


@pytest.mark.parametrize("workers", [(0, 2), (1,)])
def test_the_nearest_worker_count_is_taken(workers: tuple[int, ...]) -> None:
    assert ConfigSpace(num_workers=workers).fitted(LoaderConfig(num_workers=1)).num_workers in workers


def persistent_workers_always(config: LoaderConfig) -> Any:
    """As many trainers write it: persistent workers on, whatever the config (torch refuses them without workers)."""
    return config.stateful_dataloader(persistent_workers=True)


def test_a_factory_for_worker_configs_only_is_built_inside_its_space_and_told_how_outside_it() -> None:
    from stateful_contract.run.check import FactoryError

    with pytest.raises(FactoryError) as refused:
        check(persistent_workers_always, profile="dev", clauses=["SC03"], isolation="in-process")
    said = str(refused.value)
    assert "persistent_workers option needs num_workers > 0 on LoaderConfig(dataset_size=7" in said
    # How, in the face's own words: the call's keyword here, the flag on the command line.
    assert "narrow the space to what the loader supports (check(..., space=...))" in said
    report = check(persistent_workers_always, profile="dev", clauses=["SC03"], isolation="in-process",
                   space=ConfigSpace(num_workers=(1, 2)))
    assert report["SC03"].status == "passed", report["SC03"].message


def imports_what_is_not_there(config: LoaderConfig) -> Any:
    from stateful_contract.reference.prefetch import NoSuchLoader  # type: ignore[attr-defined]

    return NoSuchLoader(config)


def test_a_factory_that_fails_every_config_is_not_sent_to_narrow_the_space() -> None:
    """An ImportError is no config's: the advice to narrow the space sent a user the wrong way."""
    from stateful_contract.run.check import FactoryError

    with pytest.raises(FactoryError) as refused:
        check(imports_what_is_not_there, profile="dev", clauses=["SC03"], isolation="in-process")
    said = str(refused.value)
    assert "ImportError: cannot import name 'NoSuchLoader'" in said
    assert "in imports_what_is_not_there)" in said  # where it was raised
    assert "cannot build a loader for any config" in said and "narrow the space" not in said
