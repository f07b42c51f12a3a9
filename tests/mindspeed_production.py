"""MindSpeed-MM master's production data path, modelled: what upstream does, in this repository's own code.

Upstream (Ascend/MindSpeed-MM at ``57069cd5``, 2026-08-08), the path a per-token-loss FSDP2 training takes:

- ``mindspeed_mm/fsdp/data/dataloader/sampler.py::BaseRandomBatchSampler``: a batch sampler over
  ``micro_batch_size * num_replicas`` samples per step that keeps a *consumed-samples counter*: each batch it
  yields adds ``micro_batch_size * num_replicas``, the epoch is ``consumed // (total - total % that)``, the
  epoch's order is ``randperm`` seeded with the epoch, rank ``r`` takes every ``num_replicas``-th index from
  the consumed offset on, an incomplete last batch is dropped. Its state is ``{"yielded": consumed}``; a load
  takes effect at the next ``iter()``. Modelled by `ConsumedSamplesBatchSampler`.
- ``mindspeed_mm/fsdp/data/dataloader/dataloader.py``: ``prepare_sampler_dataloader`` puts it under a
  ``StatefulDataLoader`` (``persistent_workers`` when there are workers); ``PrefetchGradAccDataLoader(base,
  grad_acc_step, cyclic=True)`` buffers one window and cycles over the base loader without end; in
  ``cyclic=False`` its ``__init__`` already calls ``iter(base)`` and ``__iter__`` does again; ``state_dict``
  is the base loader's, ``load_state_dict(self, **kwargs)`` keyword-only. The ``Preloader`` fetches the
  next batch in a background thread when one is handed out (``next``) and moves it to the device in another
  (``trigger_h2d``, after the backward). Modelled by `MindSpeedWrapper` (the seed report's two bugs),
  `ProposedFixWrapper` (its proposed positional load) and `Preloader`.
- ``mindspeed_mm/fsdp/data/data_utils/utils.py::build_iterations``: ``while True: for x in dl: yield x``.
- ``mindspeed_mm/fsdp/train/train_engine.py``: ``train()`` draws from ``build_iterations(train_dataloader)``,
  with ``enable_preload`` through ``Preloader(...)``; ``train_step`` calls ``next`` then, after the
  backward, ``trigger_h2d()`` per micro-batch; ``save()`` stores ``self.train_dataloader.state_dict()``
  (the wrapper's, the base loader's) and ``load()`` calls ``load_state_dict(state)`` positionally.
  `train_engine` is that consumption, for ``--consume``.

The model matches upstream's classes, loaded with the device calls stubbed, batch for batch on the runs the
tests make (docs/findings.md, "MindSpeed-MM's production path"). The corrected pair is the reference wrapper
in cyclic mode with `StateAwarePreloader`, whose owner saves the wrapper's state from before the batches it
holds (`preloaded_reference` + `train_engine_state_aware`).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Generator, Iterator
from typing import Any

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from stateful_contract import LoaderConfig
from stateful_contract.reference import MindSpeedPrefetchGradAccDataLoader, PrefetchGradAccDataLoader

__all__ = ["ConsumedSamplesBatchSampler", "MindSpeedWrapper", "Preloaded", "Preloader", "ProposedFixWrapper",
           "StateAwarePreloader", "build_iterations", "preloaded_reference", "production_loader",
           "proposed_fix_production", "reference_production", "seed_production", "train_engine", "train_engine_preload",
           "train_engine_state_aware"]


class ConsumedSamplesBatchSampler:
    """``BaseRandomBatchSampler`` (data_sharding=False, drop_last=True): batches of ``micro_batch_size``
    indices for ``rank`` of ``num_replicas``, positioned by a consumed-samples counter."""

    def __init__(self, total_samples: int, micro_batch_size: int, num_replicas: int = 1, rank: int = 0,
                 shuffle: bool = True) -> None:
        self.total_samples, self.micro_batch_size = total_samples, micro_batch_size
        self.num_replicas, self.rank, self.shuffle = num_replicas, rank, shuffle
        self.consumed_samples, self.next_consumed_samples = 0, None
        self.step = micro_batch_size * num_replicas
        self.last_batch_size = total_samples % self.step

    def __len__(self) -> int:
        return self.total_samples  # upstream's (samples, not batches)

    def __iter__(self) -> Iterator[list[int]]:
        if self.next_consumed_samples is not None:
            self.consumed_samples, self.next_consumed_samples = self.next_consumed_samples, None
        active = self.total_samples - self.last_batch_size  # 0 when micro x ranks > samples: upstream divides
        epoch, offset = self.consumed_samples // active, self.consumed_samples % active
        full = self.total_samples // self.micro_batch_size * self.micro_batch_size
        order = (torch.randperm(full, generator=torch.Generator().manual_seed(epoch)).tolist() if self.shuffle
                 else list(range(full)))
        batch: list[int] = []
        for index in order[offset:][self.rank::self.num_replicas]:
            batch.append(index)
            if len(batch) == self.micro_batch_size:
                self.consumed_samples += self.step
                yield batch
                batch = []

    def state_dict(self) -> dict[str, Any]:
        return {"yielded": self.consumed_samples}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "yielded" not in state_dict or state_dict["yielded"] < 0:
            raise ValueError("Invalid state_dict")
        self.next_consumed_samples = state_dict["yielded"]


def production_loader(config: LoaderConfig) -> StatefulDataLoader:
    """``prepare_sampler_dataloader``: the consumed-samples batch sampler under torchdata's loader."""
    sampler = ConsumedSamplesBatchSampler(config.dataset_size, config.batch_size, config.world_size, config.rank,
                                          shuffle=config.shuffle)
    return StatefulDataLoader(config.dataset, batch_sampler=sampler, num_workers=config.num_workers,
                              persistent_workers=config.num_workers > 0)


def build_iterations(loader: Any) -> Iterator[Any]:
    """``build_iterations(train_dl)[0]``: cycles over the loader's passes without end."""
    def cyclic() -> Iterator[Any]:
        while True:
            yield from loader
    return cyclic()


class MindSpeedWrapper(MindSpeedPrefetchGradAccDataLoader):
    """``PrefetchGradAccDataLoader`` with its ``cyclic`` flag (default True); the state methods (the seed's
    bugs), buffering and counting are the seed wrapper's (stateful_contract/reference/mindspeed.py)."""

    def __init__(self, base_dataloader: Any, grad_acc_step: int, cyclic: bool = True) -> None:
        super().__init__(base_dataloader, grad_acc_step)
        self.cyclic = cyclic
        self.base_iter = self._build_base_iter()  # upstream's __init__: eager iter(base) when not cyclic

    def _build_base_iter(self) -> Iterator[Any]:
        return build_iterations(self.base_dataloader) if self.cyclic else iter(self.base_dataloader)

    def __iter__(self) -> MindSpeedWrapper:
        self.base_iter = self._build_base_iter()  # and again here, as upstream's __iter__
        self._current_iterator = self._generate_batches()
        return self

    def _generate_batches(self) -> Generator[dict[str, Any], None, None]:
        """Upstream's generator, over ``self.base_iter`` (the one ``__iter__`` built). Its ``finally`` that
        closes ``self.base_iter`` is left out: ``train()`` builds its iterator once, so it never runs there."""
        base_iter = self.base_iter
        assert base_iter is not None
        while True:
            buffer = []
            try:
                for _ in range(self.grad_acc_step):
                    buffer.append(next(base_iter))
            except StopIteration:
                if not buffer:
                    return
            total = sum((b["labels"] > -1).sum() for b in buffer)
            for batch in buffer:
                yield {**batch, "global_step_token_num": total, "avg_per_step_token_num": total / len(buffer)}


class ProposedFixWrapper(MindSpeedWrapper):
    """The bug report's proposed fix: ``load_state_dict(self, state_dict=None)``, positional."""

    def load_state_dict(self, state_dict: dict[str, Any] | None = None) -> None:  # type: ignore[override]
        if state_dict is not None:
            self.base_dataloader.load_state_dict(state_dict)


class Preloader:
    """Upstream's ``Preloader`` without a device: the first batch fetched at once; ``next()`` hands out the
    ready batch and starts fetching the next in a thread; ``trigger_h2d()`` (after the backward) waits for
    that fetch in another thread and makes its batch the ready one."""

    def __init__(self, data_iterator: Iterator[Any]) -> None:
        self.data_iterator = data_iterator
        self.next_batch: Any = None
        self._cpu_batch: Any = None
        self._cpu_thread: threading.Thread | None = None
        self._h2d_thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._exhausted = False
        self._fetch()
        self._launch_h2d()

    def _fetch(self) -> None:
        try:
            self._cpu_batch = next(self.data_iterator)
        except StopIteration:
            self._cpu_batch, self._exhausted = None, True
        except Exception as e:  # re-raised on the trainer's thread, as upstream's
            self._error = e

    def _launch_h2d(self) -> None:
        if self._cpu_thread is not None:
            self._cpu_thread.join()
            self._cpu_thread = None
        self.next_batch, self._cpu_batch = (None, None) if self._error is not None else (self._cpu_batch, None)

    def trigger_h2d(self) -> None:
        if self._exhausted and self._cpu_thread is None:
            return
        self._h2d_thread = threading.Thread(target=self._launch_h2d, daemon=True)
        self._h2d_thread.start()

    def __iter__(self) -> Preloader:
        return self

    def __next__(self) -> Any:
        if self._h2d_thread is not None:
            self._h2d_thread.join()
            self._h2d_thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self.next_batch is None:
            raise StopIteration("Dataloader has been exhausted, no more data available.")
        batch, self.next_batch = self.next_batch, None
        if not self._exhausted:
            self._cpu_thread = threading.Thread(target=self._fetch, daemon=True)
            self._cpu_thread.start()
        return batch


class StateAwarePreloader(Preloader):
    """The same preloader, keeping beside each batch it fetches the wrapper's state from before the fetch:
    what the trainer must save while it holds that batch (`state`)."""

    def __init__(self, data_iterator: Iterator[Any], state_of: Any) -> None:
        self._state_of = state_of
        self._states: list[Any] = []  # one per batch fetched and not yet handed out
        super().__init__(data_iterator)

    def _fetch(self) -> None:
        self._states.append(copy.deepcopy(self._state_of()))
        super()._fetch()

    def __next__(self) -> Any:
        batch = super().__next__()
        self._states.pop(0)
        return batch

    def state(self) -> Any:
        return self._states[0] if self._states else self._state_of()


class Preloaded:
    """The trainer's loader with a state-aware preloader: it saves the state from before the batch held."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.preloader: StateAwarePreloader | None = None

    def state_dict(self) -> Any:
        return self.loader.state_dict() if self.preloader is None else self.preloader.state()

    def load_state_dict(self, state: Any) -> None:
        self.preloader = None
        self.loader.load_state_dict(state)


def _micro_batches(pipeline: Any) -> Iterator[Any]:
    """``train_step``'s draw: ``get_batch`` (``next``), the step, then ``trigger_h2d()`` if there is one."""
    while True:
        try:
            batch = next(pipeline)
        except StopIteration:
            return
        if hasattr(pipeline, "trigger_h2d"):
            pipeline.trigger_h2d()
        yield batch


def train_engine(loader: Any) -> Iterator[Any]:
    """``train()`` without ``enable_preload``: batches from ``build_iterations(train_dataloader)``."""
    return _micro_batches(build_iterations(loader))


def train_engine_preload(loader: Any) -> Iterator[Any]:
    """``train()`` with ``enable_preload``: through a ``Preloader`` over ``build_iterations``."""
    return _micro_batches(Preloader(build_iterations(loader)))


def train_engine_state_aware(owner: Preloaded) -> Iterator[Any]:
    """``enable_preload`` with the fix: the preloader keeps the wrapper's state beside each batch it holds."""
    owner.preloader = StateAwarePreloader(build_iterations(owner.loader), owner.loader.state_dict)
    return _micro_batches(owner.preloader)


def seed_production(config: LoaderConfig) -> MindSpeedWrapper:
    """Upstream's wrapper (cyclic) over the production loader: keyword-only load, base state."""
    return MindSpeedWrapper(production_loader(config), config.grad_acc_step)


def proposed_fix_production(config: LoaderConfig) -> ProposedFixWrapper:
    """The same with the bug report's proposed fix."""
    return ProposedFixWrapper(production_loader(config), config.grad_acc_step)


def reference_production(config: LoaderConfig) -> PrefetchGradAccDataLoader:
    """The reference wrapper in cyclic mode over the production loader."""
    return PrefetchGradAccDataLoader(production_loader(config), config.grad_acc_step, cyclic=True)


def preloaded_reference(config: LoaderConfig) -> Preloaded:
    """The reference wrapper in cyclic mode over the production loader, owned by the trainer's preloader."""
    return Preloaded(PrefetchGradAccDataLoader(production_loader(config), config.grad_acc_step, cyclic=True))
