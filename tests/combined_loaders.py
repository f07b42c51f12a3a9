"""Loaders that combine several loaders' batches into one, for the tests of how such a batch's samples are counted.

`MaxSizeCycleForgetsWhoRanOut` is Lightning's ``CombinedLoader(mode="max_size_cycle")`` (Lightning-AI/pytorch-lightning
``src/lightning/pytorch/utilities/combined_loader.py``, ``_MaxSizeCycle`` and ``_state_dicts``/``_load_state_dicts``
at 03f57f9c and later): every step yields ``{"short": batch, "long": batch}``, a loader that runs out is started
again until every loader has run out once, and the state is each loader's own. Which loaders already ran out this
pass is not in it, so a loader resumed at its pass's end starts over where the uninterrupted run moves on: the
resumed epoch is cut short and its samples are lost, silently (SC10). Its samples are ``("short", i)`` and
``("long", i)`` (`stateful_contract.repro.compare.batch_ids`).

`BatchIdxRestartsAtResume` is what Lightning 2.x's CombinedLoader yields, ``(batch, batch_idx, dataloader_idx)``
(lightning 2.6.6, measured through the real class): ``batch_idx`` counts from 0 at every ``iter()``, a resumed
pass's too, and is in no state. A batch of the resumed pass has the same samples and another ``batch_idx``: SC10
fails it (a loop that steps its optimizer on ``batch_idx % accumulate`` shifts its windows), as batches of other
contents, which carry no sample index to count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Subset

from stateful_contract import LoaderConfig


class MaxSizeCycleForgetsWhoRanOut:
    """Two torchdata loaders, over the first third of the config's samples and the rest, combined in
    Lightning's max_size_cycle mode; the state is the two loaders' states, as Lightning's fit loop saves it."""

    def __init__(self, config: LoaderConfig) -> None:
        from torchdata.stateful_dataloader import StatefulDataLoader

        cut = max(1, config.dataset_size // 3)
        # A dataset of one sample gives both loaders that sample.
        parts = {"short": range(cut), "long": range(cut, config.dataset_size) or range(cut)}
        self.loaders = {name: StatefulDataLoader(Subset(config.dataset, list(part)), batch_size=config.batch_size,
                                                 shuffle=config.shuffle, drop_last=config.drop_last)
                        for name, part in parts.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        iterators = {name: iter(loader) for name, loader in self.loaders.items()}
        ran_out = dict.fromkeys(self.loaders, False)
        while True:
            out = {}
            for name, loader in self.loaders.items():
                try:
                    out[name] = next(iterators[name])
                except StopIteration:
                    ran_out[name] = True
                    if all(ran_out.values()):
                        return
                    iterators[name] = iter(loader)
                    out[name] = next(iterators[name])
            yield out

    def __len__(self) -> int:
        return max(len(loader) for loader in self.loaders.values())

    def state_dict(self) -> dict[str, Any]:
        return {"combined_loader": [loader.state_dict() for loader in self.loaders.values()]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for loader, state in zip(self.loaders.values(), state_dict["combined_loader"]):
            loader.load_state_dict(state)


class BatchIdxRestartsAtResume:
    """One torchdata loader's batches as ``(batch, batch_idx, 0)``, ``batch_idx`` counted from 0 at every ``iter()``;
    the state is the loader's."""

    def __init__(self, config: LoaderConfig) -> None:
        self.loader = config.stateful_dataloader()

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        it = iter(self.loader)  # started here, as StatefulDataLoader.__iter__ does: a state after iter() is the pass's
        return ((batch, i, 0) for i, batch in enumerate(it))

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.loader.load_state_dict(state_dict)
