"""torchdata.nodes used correctly: its ``Loader`` with the two fixes docs/findings.md proposes, over a sampler that resumes.

The plain rows (`nodes`) fail through four mechanisms, each a finding. This row applies
the two that live in ``Loader`` as patches (subclasses here, no monkey-patching of
torchdata), and avoids the two that live in ``SamplerWrapper`` by choosing a sampler they
do not touch:

- **F17 patch** (the fix of meta-pytorch/data PR #1548): ``load_state_dict()`` clears the
  "iterator pre-created by ``state_dict()``" flag, so the next ``iter()`` applies the loaded
  state even after a template ``state_dict()`` (as torch.distributed.checkpoint takes one).
- **F18 patch** (the fix proposed in docs/upstream/F18.md): ``LoaderIterator.reset()`` clears
  the look-ahead's cached state, so a loader resumed from an end-of-epoch state reports its
  live position afterwards.
- **F19, F20 avoided**: the sampler is `stateful_contract.samplers.DistributedBatchSampler`,
  whose state lives on the sampler object (so ``SamplerWrapper`` saves it, F19) and holds
  its own epoch (so the ``set_epoch`` that ``SamplerWrapper`` skips on resume is not needed,
  F20). It deals batches as ``BatchSampler(DistributedSampler(...))`` does, for the config's
  rank, and refuses a state saved on another world size by name.

torchdata.nodes ships with torchdata, a dependency of this package: nothing to install.
"""

from __future__ import annotations

import functools
from typing import Any

from torch.utils.data import default_collate

from stateful_contract.config import LoaderConfig
from stateful_contract.samplers import DistributedBatchSampler

__all__ = ["nodes_patched", "patched_loader_class"]


@functools.cache
def patched_loader_class() -> Any:
    """``torchdata.nodes.Loader`` with the F17 and F18 patches (built once, at first use)."""
    from torchdata.nodes import Loader
    from torchdata.nodes.loader import LoaderIterator

    class F18PatchedIterator(LoaderIterator):  # type: ignore[misc]
        def reset(self, initial_state: dict[str, Any] | None = None) -> None:
            super().reset(initial_state)
            # F18: the state cached by a look-ahead that ended the epoch belongs to that epoch.
            self._cached_state_dict = None

    class PatchedLoader(Loader):  # type: ignore[misc]
        """``Loader`` whose iterator is `F18PatchedIterator` and whose load is never ignored (F17)."""

        def __iter__(self) -> Any:
            if self._it is None:  # type: ignore[has-type]  # what Loader.__iter__ would create, patched
                self._it = F18PatchedIterator(self)
            return super().__iter__()

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            super().load_state_dict(state_dict)
            # F17: an iterator pre-created by state_dict() must not skip this load.
            self._iter_for_state_dict = False

    return PatchedLoader


def nodes_patched(config: LoaderConfig) -> Any:
    """``PatchedLoader(Mapper(SamplerWrapper(DistributedBatchSampler(rank, world_size, shuffle, seed,
    drop_last)), collate))``: batches of the config's rank, read and collated."""
    from torchdata.nodes import Mapper, SamplerWrapper

    sampler = DistributedBatchSampler(config.dataset, config.batch_size, num_replicas=config.world_size,
                                      rank=config.rank, shuffle=config.shuffle, seed=config.seed,
                                      drop_last=config.drop_last)
    dataset = config.dataset

    def read(indices: list[int]) -> Any:
        return default_collate([dataset[i] for i in indices])

    return patched_loader_class()(Mapper(SamplerWrapper(sampler), read))
