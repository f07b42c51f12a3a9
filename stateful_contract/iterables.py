"""A `LoaderConfig`'s samples as an iterable dataset: for factories of streaming loaders.

`LoaderConfig.iterable_dataset()` and `LoaderConfig.hf_iterable_dataset()` build on these;
this module knows nothing of the config itself. Both yield the samples of ``config.dataset``
(``index``, ``input_ids``, ``labels``), so the contract can still say which samples a
resumed loader lost or repeated.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Dataset, IterableDataset, get_worker_info

__all__ = ["StatefulTokenIterable", "TokenIterable", "hf_iterable_dataset", "shards"]


def shards(order: list[int], n_shards: int) -> list[list[int]]:
    """``order`` cut into ``n_shards`` runs of consecutive samples, as even as possible
    (the first ``len(order) % n_shards`` one longer; some empty when ``n_shards`` is larger)."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    size, longer = divmod(len(order), n_shards)
    starts = [k * size + min(k, longer) for k in range(n_shards + 1)]
    return [order[start:end] for start, end in itertools.pairwise(starts)]


class TokenIterable(IterableDataset):  # type: ignore[type-arg]
    """``samples`` in ``order`` as a torch ``IterableDataset``, sharded over worker processes.

    Worker ``w`` of ``W`` yields ``order[w::W]``, so the workers together yield each sample
    once per epoch. It has no ``state_dict``: a ``StatefulDataLoader`` can only resume it by
    fast-forwarding (`StatefulTokenIterable` has one).
    """

    def __init__(self, samples: Dataset[dict[str, Any]], order: list[int]) -> None:
        self.samples = samples
        self.order = order
        self.offset = 0
        self.pending: int | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = get_worker_info()
        shard = self.order if info is None else self.order[info.id :: info.num_workers]
        self.offset, self.pending = (self.pending or 0), None
        return self._run(shard)

    def _run(self, shard: list[int]) -> Iterator[dict[str, Any]]:
        while self.offset < len(shard):
            i = shard[self.offset]
            self.offset += 1
            yield self.samples[i]
        self.offset = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.order)} samples)"


class StatefulTokenIterable(TokenIterable):
    """`TokenIterable` with torchdata's ``Stateful`` protocol: the state is the offset in
    this process' shard; a loaded offset applies to the next ``iter()``, and the position
    moves at ``iter()``, not at the first sample (a state taken in between is the new pass')."""

    def state_dict(self) -> dict[str, Any]:
        return {"offset": self.offset if self.pending is None else self.pending}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = int(state_dict["offset"])


def _generate(shards: list[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    # Module level, over plain values: datasets pickles the generator and its arguments into
    # worker processes and hashes them for a fingerprint.
    for shard in shards:
        yield from shard


def hf_iterable_dataset(samples: Dataset[dict[str, Any]], order: list[int], n_shards: int = 4) -> Any:
    """A Hugging Face ``datasets.IterableDataset`` of ``samples`` in ``order``, in ``n_shards``
    shards of consecutive samples (`shards`), formatted as torch tensors.

    ``IterableDataset.shuffle(seed, buffer_size)`` (which shuffles the shards and a buffer
    of samples) is the caller's to apply. The dataset is built from a generator
    (``IterableDataset.from_generator``): nothing is written to disk, nothing downloaded.
    """
    import datasets  # optional: imported only here

    features = datasets.Features({"index": datasets.Value("int64"), "input_ids": datasets.Sequence(
        datasets.Value("int64")), "labels": datasets.Sequence(datasets.Value("int64"))})
    # A list in gen_kwargs is how datasets knows the shards: shard k's generator gets [split[k]].
    split = [[{"index": i, "input_ids": samples[i]["input_ids"].tolist(), "labels": samples[i]["labels"].tolist()}
              for i in shard] for shard in shards(order, n_shards)]
    dataset = datasets.IterableDataset.from_generator(_generate, features=features, gen_kwargs={"shards": split})
    return dataset.with_format("torch")
